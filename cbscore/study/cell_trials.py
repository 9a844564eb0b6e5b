"""The trials of a cell: cell and trial ids, the cell's recipe (β2, τ), the trainer's config of one
trial and its :class:`~cbscore.study.trials.TrialSpec`, with the budget of
:func:`cbscore.study.budgets.cell_budget_tokens`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from cbscore.study.budgets import cell_budget_tokens
from cbscore.study.plan_result import AskRequest
from cbscore.study.spec import StudySpec
from cbscore.study.spec_parts import Setting
from cbscore.study.trials import TrialRecord, TrialSpec, built

if TYPE_CHECKING:
    from cbscore.data import DataConfig


def cell_id(setting_id: str, batch_size: int) -> str:
    """Id of the cell ``(setting, batch size)``."""
    return f"{setting_id}.b{batch_size}"


def make_trial_id(spec: StudySpec, setting: Setting, batch_size: int, tag: str, seed: int) -> str:
    """Id of a trial of a cell: ``tag`` names its learning rate (grid) or its number (Optuna)."""
    return f"{spec.name}.{setting.setting_id}.b{batch_size}.{tag}.s{seed}"


def records_by_cell(records: Iterable[TrialRecord]) -> dict[str, list[TrialRecord]]:
    """``{cell id: its records}``, in the order given."""
    by_cell: dict[str, list[TrialRecord]] = {}
    for r in records:
        by_cell.setdefault(r.cell_id, []).append(r)
    return by_cell


def cell_recipe(spec: StudySpec, setting: Setting, batch_size: int) -> tuple[float, tuple[float, ...]]:
    """``(β2, τ tracked)`` of the trials of one cell: the spec's own ``beta2``/``ewa_taus`` where it
    gives them, else :func:`cbscore.recipe.study_recipe` under the spec's ``recipe`` rule."""
    from cbscore.recipe import spec_recipe

    recipe = spec_recipe(spec, batch_size=batch_size, d_tokens=setting.tokens)
    beta2 = recipe.beta2 if spec.beta2 is None else float(spec.beta2)
    taus = recipe.ewa_taus if spec.ewa_taus is None else tuple(spec.ewa_taus)
    return beta2, taus


def study_data(spec: StudySpec) -> DataConfig:
    """The spec's ``data`` as the trainer's :class:`~cbscore.data.DataConfig`, checked as
    ``TrainConfig`` checks a dict of its fields (:meth:`DataConfig.from_dict`)."""
    from cbscore.data import DataConfig

    return DataConfig.from_dict(dict(spec.data))


def build_train_config(spec: StudySpec, setting: Setting, *, batch_size: int, lr: float, seed: int,
                       max_tokens: int, max_steps: int | None, target_loss: float | None,
                       recipe: tuple[float, tuple[float, ...]] | None = None,
                       data: DataConfig | None = None) -> dict:
    """The trainer's config of one trial, as ``TrainConfig.to_dict()`` (validated by the trainer);
    ``recipe``: the cell's :func:`cell_recipe`, ``data``: the spec's :func:`study_data`, where the
    caller has them (a frozen ``DataConfig`` is the same config as the dict it was read from, and
    ``TrainConfig`` reads a dict again at every trial)."""
    from cbscore.train.config import TrainConfig

    beta2, taus = cell_recipe(spec, setting, batch_size) if recipe is None else recipe
    local = batch_size // spec.devices_per_trial  # sequences per step on one device
    # (The fields are named here: TrainConfig itself checks their values, as from_dict would.)
    config = TrainConfig(**{
        "model": setting.model,
        "batch_size": batch_size,
        "devices": spec.devices_per_trial,
        # Gradient accumulation above the micro-batch (the same update, less memory per pass).
        "micro_batch_size": spec.micro_batch_size if spec.micro_batch_size and local > spec.micro_batch_size
        else None,
        # An extra split of the same batch that measures the gradient noise scale (cbscore.train.gns).
        "gns_micro_batch_size": spec.gns_micro_batch_size if batch_size in spec.gns_batch_sizes() else None,
        # Its averages' half-life: 10% of the setting's D at every batch size, in tokens.
        "gns_half_life_tokens": max(1, round(0.1 * setting.tokens)),
        "context_tokens": spec.context_tokens,
        "lr": lr,
        "max_tokens": max_tokens,
        "max_steps": max_steps,
        # Warm-up fixed in tokens: 25% of the setting's reference budget (paper §3.1).
        "warmup_tokens": int(spec.warmup_fraction * setting.tokens),
        "schedule": spec.schedule,
        "beta1": spec.beta1,
        "beta2": beta2,
        "ewa_taus": list(taus),
        "weight_decay": spec.weight_decay,
        "grad_clip": spec.grad_clip,
        "target_loss": target_loss,
        "seed": seed,
        "data": dict(spec.data) if data is None else data,
        "allow_repeat": spec.allow_repeat,
        "eval_windows": spec.eval_windows,
        "max_eval_fraction": spec.max_eval_fraction,
    })
    return config.to_dict()


def make_trial(spec: StudySpec, setting: Setting, *, batch_size: int, role: str, lr: float, seed: int,
               tag: str, max_steps: int | None, target_loss: float | None,
               search_number: int | None = None, budget_factor: float = 1.0,
               recipe: tuple[float, tuple[float, ...]] | None = None, data: DataConfig | None = None,
               with_config: bool = True) -> TrialSpec:
    """The TrialSpec of one trial of a cell, its budget from :func:`cell_budget_tokens` (times
    ``budget_factor`` for a re-run below its step cap); ``recipe``: the cell's :func:`cell_recipe`,
    ``data``: the spec's :func:`study_data`, where the caller has them; ``with_config=False``: an empty
    ``train_config`` (the simulator, which trains nothing, checks each cell's config once instead:
    :func:`check_cell_configs`)."""
    max_tokens = cell_budget_tokens(spec, setting, batch_size, role, max_steps)
    if budget_factor != 1.0 and not (batch_size > spec.b_ref and max_steps is not None):
        max_tokens = int(budget_factor * max_tokens)  # a re-run of a censored trial (its step cap grew already)
    return built(  # (TrialSpec(...), every field in order)
        TrialSpec,
        trial_id=make_trial_id(spec, setting, batch_size, tag, seed),
        study=spec.name,
        setting_id=setting.setting_id,
        cell_id=cell_id(setting.setting_id, batch_size),
        role=role,
        model=setting.model,
        n_params=setting.n_params,
        setting_tokens=setting.tokens,
        batch_size=batch_size,
        lr=float(lr),
        seed=seed,
        max_tokens=max_tokens,
        max_steps=max_steps,
        target_loss=target_loss,
        search_number=search_number,
        train_config=build_train_config(spec, setting, batch_size=batch_size, lr=lr, seed=seed,
                                        max_tokens=max_tokens, max_steps=max_steps, target_loss=target_loss,
                                        recipe=recipe, data=data) if with_config else {},
    )


def check_cell_configs(spec: StudySpec) -> None:
    """Build the trainer's config of one trial per cell (each setting and batch size, at the spec's
    smallest rate and first seed, uncapped): the simulator plans without trainer configs
    (``make_trial(with_config=False)``), and a spec whose trials the trainer refuses is refused
    there too, naming the field."""
    data = study_data(spec)
    for setting in spec.resolve_settings():
        for b in spec.batch_sizes:
            role = "reference" if b == spec.b_ref else "trial"
            build_train_config(spec, setting, batch_size=b, lr=min(spec.search.lrs), seed=spec.seeds[0],
                               max_tokens=cell_budget_tokens(spec, setting, b, role, None), max_steps=None,
                               target_loss=None, data=data)


def trial_from_ask(spec: StudySpec, ask: AskRequest, *, lr: float, number: int) -> TrialSpec:
    """Build the TrialSpec of an Optuna-proposed learning rate for ``ask``'s cell."""
    setting = {s.setting_id: s for s in spec.resolve_settings()}[ask.setting_id]
    seed = spec.seeds[number % len(spec.seeds)]
    return make_trial(spec, setting, batch_size=ask.batch_size, role=ask.role, lr=lr, seed=seed,
                      tag=f"o{number}", max_steps=ask.max_steps, target_loss=ask.target_loss,
                      search_number=number)
