"""The study spec: what a researcher asks CBS Lab to measure.

A study is a set of *settings* ``(N, D)`` (a model preset and a token budget), each measured at
several batch sizes. The kinds follow the paper (Zhang et al. 2025, §3): ``chinchilla`` (N and D
grow together at a tokens-per-parameter ratio), ``fixed_n`` (one model, several D), ``fixed_d``
(several models, one D) and ``custom`` (any list of ``(model, D)``); ``local`` measures the CBS
during one run by branching from its checkpoints (Merrill et al. 2025; :mod:`cbscore.study.local_spec`);
``schedule`` measures one setting's CBS under constant+EWA, cosine and WSD from the same stable runs
and their decay branches (:mod:`cbscore.study.decay_spec`).

The spec is a frozen dataclass on :class:`cbscore.config.Config`: each field's own check sits in its
metadata and runs first, ``__post_init__`` keeps the rules between fields (a kind's block, the batch
sizes a local study derives, the settings); ``to_dict()``/``from_dict()`` is the wire format
(JSON/YAML), and every check raises :class:`~cbscore.errors.ConfigError` naming the field and the value.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cbscore.config import Config, Range, boolean, checked, one_of
from cbscore.errors import ConfigError
from cbscore.recipe import RECIPE_RULES
from cbscore.study.bounds import FINITE, MAX_BATCH, MAX_TOKENS, check_numbers
from cbscore.study.decay_spec import DecaySpec, apply_decay
from cbscore.study.local_spec import LocalSpec, apply_local, checkpoints
from cbscore.study.spec_parts import (
    ExperimentalSpec,
    SearchSpec,
    Setting,
    SettingSpec,
    _each_setting,
    _experimental_given,
    _positive_float,
    _positive_int,
    _search_given,
    _settings_given,
    a_list,
    format_tokens,
    move_experimental,
)

KINDS = ("chinchilla", "fixed_n", "fixed_d", "custom", "local", "schedule")
SCHEDULES = ("constant", "cosine", "wsd")
GNS_CELLS = ("all", "reference")


_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_NO_EXPERIMENTAL = ExperimentalSpec()


# ---------------------------------------------------------------- one field's checks and coercions
def _study_name(field_name: str, value: Any) -> None:
    if not isinstance(value, str) or not _NAME_RE.fullmatch(value):  # "$" would admit a trailing newline
        raise ConfigError(field_name, value, "must be 1-64 letters, digits, '-' or '_', starting with a letter or digit")


def _other_study(field_name: str, value: Any) -> None:
    if not isinstance(value, str) or not _NAME_RE.fullmatch(value):
        raise ConfigError(field_name, value, "must be the name of another study")


def _listed(value: Any) -> Any:
    """A list field from the wire: any iterable but a string becomes a tuple (a mapping: its keys);
    a string or a scalar stays for :func:`a_list` to refuse."""
    if isinstance(value, (tuple, str, bytes)) or not hasattr(value, "__iter__"):
        return value
    return tuple(value)


def _seeds(field_name: str, value: Any) -> None:
    a_list(field_name, value)
    if not value:
        raise ConfigError(field_name, list(value), "must list at least one seed")
    for s in value:
        if isinstance(s, bool) or not isinstance(s, int) or s < 0:
            raise ConfigError(field_name, s, "each seed must be a non-negative integer")


def _taus(field_name: str, value: Any) -> None:
    a_list(field_name, value)
    if not value:
        raise ConfigError(field_name, list(value), "must list at least one τ or be null")
    for tau in value:
        if not (isinstance(tau, (int, float)) and 0 < tau < 1):
            raise ConfigError(field_name, tau, "each τ must be in (0, 1)")


def _budget_multiple(field_name: str, value: Any) -> None:
    _positive_float(field_name, value)
    if value < 1:
        raise ConfigError(field_name, value, "must be at least 1 (a trial gets at least D tokens)")


def _within(low: float, high: float, reason: str, *, low_open: bool = False, high_open: bool = False,
            booleans: bool = False) -> Callable[[str, Any], None]:
    """A number in the interval, else ``reason``; ``booleans``: a boolean passes here, to be refused
    by :func:`~cbscore.study.bounds.check_numbers` with the field's stated range."""
    def check(field_name: str, value: Any) -> None:
        if ((isinstance(value, bool) and not booleans) or not isinstance(value, (int, float))
                or not (low < value if low_open else low <= value) or not (value < high if high_open else value <= high)):
            raise ConfigError(field_name, value, reason)
    return check


def _mapping(field_name: str, value: Any) -> None:
    if not isinstance(value, Mapping):
        raise ConfigError(field_name, value, "must map setting ids to losses")


def _dict_or_none(value: Any) -> Any:
    return None if value is None else dict(value)


def _dict_if_mapping(value: Any) -> Any:
    return dict(value) if isinstance(value, Mapping) else value


def _check_local_budget(spec) -> None:
    _positive_int("tokens", spec.tokens[0])
    checkpoints(spec.local, total_tokens=spec.tokens[0], context_tokens=spec.context_tokens)  # each on a step


def _check_schedule_budget(spec) -> None:
    _positive_int("tokens", spec.tokens[0])


#: the kinds with a block of fields of their own, by kind: the block's field (``local:``, ``decay:``), what
#: reads it into the spec (after the fields' own checks, before the rules between fields) and what checks
#: the one setting's budget (after the models). What each kind does beyond its spec is
#: :mod:`cbscore.study.kinds`.
_KIND_BLOCKS = {"local": ("local", apply_local, _check_local_budget),
                "schedule": ("decay", apply_decay, _check_schedule_budget)}


@dataclass(frozen=True, kw_only=True)
class StudySpec(Config):
    """A critical-batch-size study (DESIGN.md §1)."""

    name: str = checked(_study_name)
    """Study name: letters, digits, ``-`` and ``_``; one MLflow experiment per name."""
    kind: str = checked(one_of(KINDS), "custom")
    """What the study varies: ``chinchilla`` (N and D together at ``tokens_per_param``), ``fixed_n``
    (one model, several D), ``fixed_d`` (several models, one D), ``custom`` (any ``settings``),
    ``local`` (the CBS during one run, from its checkpoints) or ``schedule`` (one setting under
    constant+EWA, cosine and WSD)."""
    models: tuple[str, ...] = checked(a_list, (), coerce=_listed)
    """Model presets (``chinchilla``, ``fixed_d``: several; ``fixed_n``: exactly one)."""
    tokens: tuple[int, ...] = checked(a_list, (), coerce=_listed, range=Range(1, MAX_TOKENS, integer=True))
    """Token budgets D (``fixed_n``: several; ``fixed_d``: exactly one; ``chinchilla``: optional,
    one per model, overriding ``tokens_per_param``)."""
    tokens_per_param: float = checked(_positive_float, 20.0, range=Range(0, 1e4, lo_open=True))
    """``chinchilla``: D = tokens_per_param · N (the paper's Chinchilla ratio is 20)."""
    settings: tuple[SettingSpec, ...] = checked(_each_setting, (), coerce=_settings_given)
    """``custom``: the explicit list of ``(model, tokens)``."""
    batch_sizes: tuple[int, ...] = checked(a_list, (64, 128, 256, 512, 1024, 2048), coerce=_listed,
                                           range=Range(1, MAX_BATCH, integer=True))
    """Batch sizes to measure, in sequences of ``context_tokens`` tokens; must contain ``b_ref``."""
    context_tokens: int = checked(_positive_int, 512, range=Range(1, 2**20, integer=True))
    """Sequence length T in tokens (the paper: 512)."""
    b_ref: int = checked(None, 256, range=Range(1, MAX_BATCH, integer=True))  # checked after the kind's block
    """Reference batch size B_ref in sequences: its runs set each setting's target (paper: 256)."""
    overhead: float = checked(_positive_float, 0.2, range=Range(0, 10, lo_open=True))
    """The r of the 20% rule: B* is the largest B with S(B) ≤ (1 + r)·S_lin(B), where
    S_lin(B) = S(B_ref)·B_ref/B is perfect linear scaling from the reference batch size
    (Zhang et al. 2025, §2)."""
    target_losses: Mapping[str, float] | None = checked(None, None, coerce=_dict_or_none, range=Range(0, 100))
    """Explicit held-out target loss per setting id; ``None`` = targets from reference runs."""
    search: SearchSpec = checked(None, default_factory=SearchSpec, coerce=_search_given)
    """Hyper-parameter search of each cell."""
    experimental: ExperimentalSpec = checked(None, default_factory=ExperimentalSpec, coerce=_experimental_given)
    """Rules that failed the simulator's criteria for a default (``predict``, ``lr_prior``, ``prune_at_equal_tokens``;
    :class:`~cbscore.study.spec_parts.ExperimentalSpec`), all off by default; a spec from before
    that gives them at their old place (``search.predict``, ``search.lr_prior``, top level) loads
    with a warning naming the new one."""
    budget_multiple: float = checked(_budget_multiple, 2.0, range=Range(1, 100))
    """Token budget (× D) of a non-reference cell only where no bound applies: explicit
    ``target_losses`` (no reference run) below B_ref, or above B_ref before any smaller batch
    size reached the target. Otherwise budgets follow the rule of DESIGN.md §1 (cells below
    B_ref: (1 + budget_margin)·D tokens; above: (1 + budget_margin)·S(smaller B) steps)."""
    budget_margin: float = checked(_within(0, 10, "must be a number in [0, 10]"), 0.25, range=Range(0, 10))
    """Slack of each trial's budget: below B_ref a trial gets (1 + margin)·D tokens, above it
    (1 + margin)·S(the next smaller B) steps, since tokens to target never exceed D below B_ref
    and steps to target never grow with B above it (McCandlish et al. 2018, eqs. 2.11-2.12), up
    to tuning noise. A trial cut off at its budget gives only a lower bound and runs again with a
    larger one. The paper presets set 0.5: on their wide learning-rate grid fewer first attempts
    are censored (docs/results/cheaper-search/budget-margin/)."""
    prune_margin: float = checked(_within(0, 10, "must be a number in [0, 10]", booleans=True), 0.1,
                                  range=Range(0, 10))
    """Trials still above target at an evaluation past (1 + margin)·S_best steps stop as ``pruned``."""
    stop_far_rates: bool = checked(boolean, True)
    """Stop a running first attempt as ``pruned`` before the cell's best has crossed when, at the
    same step, its held-out loss trails its seed's leader by more than ``far_rate_margin`` nats,
    it trained ``far_rate_fraction`` of the cell's expected steps, and its rate lies outside the
    leader's fit window (``cbscore.analysis.window_rates``). Unlike
    ``experimental.prune_at_equal_tokens`` nothing is projected: every rate the fit reads runs to its crossing,
    and a stopped rate that turns out to neighbour the cell's best is run again
    (``cbscore.study.equal_tokens``)."""
    far_rate_fraction: float = checked(_within(0, 1, "must be a number in [0, 1]"), 0.5, range=Range(0, 1))
    """With ``stop_far_rates``: a trial is judged only once it trained this fraction of the cell's
    expected steps (the best crossing so far, else the next smaller batch size's S). Earlier, the
    lab's curves cross over: a rate that reached the target first trailed by up to 1.1 nats at a
    tenth of its steps (docs/results/cheaper-search/calibration.txt). 0.25 saves more in simulation
    but moved B* off the full grid in 1 of 200 seeds (by up to 9.9%); 0.5 in none
    (docs/results/cheaper-search/far-rates)."""
    far_rate_margin: float = checked(_within(0, 10, "must be a number in (0, 10] (nats)", low_open=True), 0.3,
                                     range=Range(0, 10))
    """With ``stop_far_rates``: the loss gap (nats, EWA held-out loss at equal tokens) past which a
    rate outside the leader's window stops. On the lab's curves a winner trailed by at most 0.19
    nats from a quarter of its steps on, 0.17 from half (calibration.txt)."""
    equal_token_fraction: float = checked(_within(0, 1, "must be a number in (0, 1]", low_open=True), 0.25,
                                          range=Range(0, 1, lo_open=True))
    """With ``experimental.prune_at_equal_tokens``: a trial the cell's fit reads stops once it trained this
    fraction of the cell's expected steps (the best crossing so far, else the next smaller batch
    size's S) and trails its seed's leader; its steps to target are projected from its curve
    against the leader's (``cbscore.analysis.project_pruned``)."""
    equal_token_margin: float = checked(_within(0, 10, "must be a number in (0, 10] (nats)", low_open=True), 0.05,
                                        range=Range(0, 10))
    """Loss gap (nats, EWA held-out loss at equal tokens) past which a trial is stopped by
    ``experimental.prune_at_equal_tokens``; calibrated on the lab's own curves (docs/results/equal-tokens)."""
    warmup_fraction: float = checked(_within(0, 1, "must be in [0, 1)", high_open=True, booleans=True), 0.25,
                                     range=Range(0, 1, hi_open=True))
    """Warm-up length as a fraction of D, fixed in tokens across batch sizes (paper: 25%)."""
    schedule: str = "constant"
    """Learning-rate schedule after warm-up: ``constant`` (paper; ``constant_ewa`` is the same), ``cosine``
    or ``wsd``. Under ``cosine`` and ``wsd`` every trial decays at its own budget, so its steps to
    target mix the horizon with the batch size: a ``schedule`` study measures them from decay
    branches instead (:mod:`cbscore.study.decay_spec`)."""
    beta1: float = checked(_within(0, 1, "must be in [0, 1)", high_open=True, booleans=True), 0.95,
                           range=Range(0, 1, hi_open=True))
    """AdamW β1 (paper: 0.95)."""
    recipe: str = checked(one_of(RECIPE_RULES), "fixed")
    """How β2 and the EWA τ are chosen (``cbscore.recipe.study_recipe``). ``fixed`` (the default of
    every kind): one β2 and one set of τ per batch size for the whole study, the paper's horizons
    (half-lives in tokens) as the same share of the study's reference D, √(D_min·D_max) of its
    settings, so the D- and N-exponents do not measure the recipe (the paper kept one table; with
    one D, as in ``fixed_d``, it equals ``scaled``). ``scaled``: the same shares of each setting's
    own D (the recipe then moves with D). ``paper_table``: the paper's table by batch size in
    sequences (the paper presets: T = 512, runs of thousands of steps). ``fixed`` and ``scaled``
    keep β2's horizon in tokens below 8·B_ref (a smaller batch gets a larger β2) within [0.95,
    0.999], and τ's half-life at least 4 steps. Three τ are tracked (half-lives ×½, ×1, ×2)."""
    beta2: float | None = checked(_within(0, 1, "must be in [0, 1) or null for the paper's table", high_open=True,
                                          booleans=True), None, range=Range(0, 1, hi_open=True))
    """AdamW β2 for every cell; ``None`` = from ``recipe``."""
    ewa_taus: tuple[float, ...] | None = checked(_taus, None, coerce=_listed,
                                                range=Range(0, 1, lo_open=True, hi_open=True))
    """EWA decay rates tracked in every cell; ``None`` = from ``recipe``."""
    weight_decay: float = checked(_within(0, math.inf, "must be a non-negative number", booleans=True), 0.0,
                                  range=Range(0, 10))
    """AdamW weight decay (paper: 0)."""
    grad_clip: float = checked(_positive_float, 1.0, range=Range(0, 1e6, lo_open=True))
    """Gradient-norm clipping threshold (paper: 1.0)."""
    micro_batch_size: int | None = checked(_positive_int, None, range=Range(1, MAX_BATCH, integer=True))
    """Sequences per forward pass on one device, for the per-device batches above it (gradient
    accumulation: the same update with less memory per pass; it must divide them); ``None`` =
    chosen from the GPU's free memory on CUDA, the whole per-device batch on a CPU."""
    devices_per_trial: int = checked(_positive_int, 1, range=Range(1, 1024, integer=True))
    """Devices that train each trial together (DDP; ``cbscore.train.distributed``): GPUs, or gloo
    processes on a CPU. Every batch size is split evenly across them, so each must be a multiple
    of it. A worker started with ``--devices-per-trial K`` runs trials on its own K instead (the
    same update, computed on other hardware)."""
    gns_micro_batch_size: int | None = checked(_positive_int, None, range=Range(1, MAX_BATCH, integer=True))
    """Measure the gradient noise scale ``B_simple`` (``cbscore.train.gns``) in the cells chosen by
    ``gns_cells``, by splitting each batch into passes of this many sequences (the same update;
    the split costs step time on small batches). It must be smaller than ``b_ref`` and divide
    every larger batch size of those cells (and ``micro_batch_size`` where that applies).
    ``None`` = measure only where ``micro_batch_size`` already accumulates. The measured noise
    scale feeds the B* forecast on the Curves and Scaling pages."""
    gns_cells: str = checked(one_of(GNS_CELLS), "all")
    """Cells that get the ``gns_micro_batch_size`` split: ``all``, or ``reference`` (only the
    reference cell at ``b_ref``, which is all the forecast needs)."""
    forecast_from: str | None = checked(_other_study, None)
    """Name of an earlier study whose calibrated noise-scale forecast chooses this study's batch
    sizes (``cbscore.study.forecast_range``); checked against the tracking store at launch."""
    eval_windows: int = checked(_positive_int, 128, range=Range(1, 10**6, integer=True))
    """Held-out windows of ``context_tokens + 1`` tokens per evaluation (more: a less noisy target
    crossing, slower evaluations)."""
    max_eval_fraction: float = checked(_positive_float, 0.5, range=Range(0, 10, lo_open=True))
    """Cap on each trial's evaluation compute as a fraction of its training compute (evaluations
    are spaced at least that far apart; lower: faster trials, a coarser crossing)."""
    seeds: tuple[int, ...] = checked(_seeds, (0,), coerce=_listed, range=Range(0, 2**32 - 1, integer=True))
    """Training seeds; each seed is one more trial per learning rate."""
    data: Mapping[str, Any] = checked(None, default_factory=lambda: {"source": "builtin"}, coerce=dict)
    """Data settings (``cbscore.data.DataConfig`` fields): source, vocab_size, ..."""
    allow_repeat: bool = False
    """Allow more than one pass over the corpus (the paper trains single pass)."""
    max_trials: int = checked(_positive_int, 2000, range=Range(1, 10**7, integer=True))
    """Sanity limit on the number of trials; a larger study needs ``force`` ("Launch anyway" on
    the Launch page, ``--force`` in the CLI)."""
    max_total_tokens: float = checked(_positive_float, 1e13, range=Range(0, 1e18, lo_open=True))
    """Sanity limit on the grid's total training tokens; a larger study needs ``force``."""
    reuse_trials: bool = checked(boolean, True)
    """Train nothing that a finished trial of any study already trained with the same trainer
    config on the same token store: its run is copied into this study, tagged ``reused_from``
    (:mod:`workers.studies.reuse`). ``false``: train every trial here."""
    recipe_d_ref_tokens: int | None = checked(_positive_int, None, range=FINITE)
    """The ``fixed`` recipe's reference D in tokens; ``None`` = √(D_min·D_max) of the settings.
    ``cbs study extend`` pins it when it adds settings, so the trials already run keep their β2
    and τ (:mod:`cbscore.study.extend`)."""
    local: LocalSpec | None = field(default=None, metadata={"coerce": False})  # read by its kind's block
    """``local`` studies: the base run's batch and rate, its checkpoints and the branches from each
    (:class:`~cbscore.study.local_spec.LocalSpec`; ``None`` = its defaults). A local study's
    ``batch_sizes`` and ``b_ref`` are derived from it (every ``k·B0``, and ``B0``)."""
    decay: DecaySpec | None = field(default=None, metadata={"coerce": False})  # read by its kind's block
    """``schedule`` studies: the schedules measured, the decay and the horizons read
    (:class:`~cbscore.study.decay_spec.DecaySpec`; ``None`` = its defaults)."""
    pinned_targets: Mapping[str, float] | None = checked(_mapping, None, coerce=_dict_if_mapping, range=FINITE)
    """Targets (held-out loss, nats per token) that settings had when the study was extended: the
    planner uses them instead of recomputing them from the reference cell, so trials that
    stopped at a target stay measured against it (a new seed's reference runs would move the mean
    over seeds). ``None`` = none pinned (:mod:`cbscore.study.extend`)."""

    # ------------------------------------------------------------------ validation
    def __post_init__(self) -> None:
        super().__post_init__()  # wire values coerced, each field's own check (its metadata)
        self._check_experimental()
        for kind, (block, apply, _) in _KIND_BLOCKS.items():
            if kind == self.kind:
                apply(self)
            elif getattr(self, block) is not None:
                raise ConfigError(block, getattr(self, block), f"applies to kind {kind} only, not {self.kind}")
        # checked here, after the kind's block: a local study derives its batch sizes and b_ref
        if not self.batch_sizes:
            raise ConfigError("batch_sizes", list(self.batch_sizes), "must list at least one batch size")
        for b in self.batch_sizes:
            _positive_int("batch_sizes", b)
        if len(set(self.batch_sizes)) != len(self.batch_sizes):
            raise ConfigError("batch_sizes", list(self.batch_sizes), "must not repeat a batch size")
        object.__setattr__(self, "batch_sizes", tuple(sorted(self.batch_sizes)))
        _positive_int("b_ref", self.b_ref)
        if self.b_ref not in self.batch_sizes:
            raise ConfigError("b_ref", self.b_ref, f"must be one of batch_sizes {list(self.batch_sizes)}")
        search = self.search
        if search.bracket_top_cells is not None and search.bracket_min_batch_size is not None:
            raise ConfigError("search.bracket_top_cells", search.bracket_top_cells,
                              f"cannot be given with search.bracket_min_batch_size={search.bracket_min_batch_size} "
                              "(both say which cells keep the three-rate bracket; give one)")
        if search.replicate_ends and (search.replicate_batch_sizes or search.kind != "chained"):
            raise ConfigError("search.replicate_ends", True,
                              "applies to a chained search without search.replicate_batch_sizes "
                              f"(kind {search.kind}, replicate_batch_sizes {list(search.replicate_batch_sizes)})")
        replicated = self.search.replicate_batch_sizes
        if replicated and (self.search.kind != "chained" or self.b_ref in replicated
                           or not set(replicated) <= set(self.batch_sizes)):
            raise ConfigError("search.replicate_batch_sizes", list(replicated),
                              f"must list batch sizes of a chained search from {list(self.batch_sizes)}, "
                              f"b_ref={self.b_ref} excepted (its runs set the target)")
        # after the kind's block too: a schedule study names its own rule for a schedule first
        if self.schedule == "constant_ewa":  # the name a schedule study's decay.schedules gives it
            object.__setattr__(self, "schedule", "constant")
        if self.schedule not in SCHEDULES:
            raise ConfigError("schedule", self.schedule, f"must be one of {', '.join(SCHEDULES)} (or constant_ewa)")
        uneven = [b for b in self.batch_sizes if b % self.devices_per_trial]
        if uneven:
            raise ConfigError("devices_per_trial", self.devices_per_trial,
                              f"must divide every batch size (it does not divide {uneven})")
        if self.micro_batch_size is not None:
            k = self.devices_per_trial
            bad = [b for b in self.batch_sizes if b // k > self.micro_batch_size and (b // k) % self.micro_batch_size]
            if bad:
                what = "batch size" if k == 1 else f"per-device batch (batch size / {k})"
                raise ConfigError("micro_batch_size", self.micro_batch_size,
                                  f"must divide every larger {what} (it does not divide {bad})")
        self._check_gns()
        if self.forecast_from is not None and self.forecast_from == self.name:
            raise ConfigError("forecast_from", self.forecast_from, "must name another study, not this one")
        self._check_kind()
        if self.target_losses is not None:
            ids = {s.setting_id for s in self.resolve_settings()}
            for key, loss in self.target_losses.items():
                if key not in ids:
                    raise ConfigError("target_losses", key, f"names no setting of this study (settings: {sorted(ids)})")
                if isinstance(loss, bool) or not isinstance(loss, (int, float)) or not abs(loss) <= sys.float_info.max:
                    raise ConfigError(f"target_losses.{key}", loss, "must be a finite number")
            missing = sorted(ids - set(self.target_losses))
            if missing:
                raise ConfigError("target_losses", dict(self.target_losses), f"must give a target for every setting (missing {missing})")
        if self.pinned_targets is not None:
            ids = {s.setting_id for s in self.resolve_settings()}
            for key, loss in self.pinned_targets.items():
                if key not in ids:
                    raise ConfigError("pinned_targets", key, f"names no setting of this study (settings: {sorted(ids)})")
                if isinstance(loss, bool) or not isinstance(loss, (int, float)) or not 0 < loss <= sys.float_info.max:
                    raise ConfigError(f"pinned_targets.{key}", loss, "must be a positive finite loss")
        check_numbers(self)  # and every number finite, in its stated range (the checks above name types and signs)

    @property
    def replicated_batch_sizes(self) -> tuple[int, ...]:
        """The chained search's replicated cells: ``search.replicate_batch_sizes``, or with
        ``search.replicate_ends`` the smallest and largest batch size other than ``b_ref``."""
        if not self.search.replicate_ends:
            return self.search.replicate_batch_sizes
        others = [b for b in self.batch_sizes if b != self.b_ref]
        return tuple(sorted({others[0], others[-1]})) if others else ()

    @property
    def bracket_floor(self) -> int | None:
        """The chained search's smallest bracketed batch size: ``search.bracket_min_batch_size``, or
        with ``search.bracket_top_cells`` ``N`` the ``N``-th largest of ``batch_sizes`` (``None``: every
        cell is bracketed)."""
        top = self.search.bracket_top_cells
        if top is None:
            return self.search.bracket_min_batch_size
        return self.batch_sizes[-top] if top < len(self.batch_sizes) else None

    @property
    def compares_at_equal_tokens(self) -> bool:
        """Whether running trials are compared with their leader at equal tokens
        (``stop_far_rates`` or ``experimental.prune_at_equal_tokens``): the planner needs their curves."""
        return self.stop_far_rates or self.experimental.prune_at_equal_tokens

    def _check_experimental(self) -> None:
        """The experimental rules against the search they modify."""
        ex, search = self.experimental, self.search
        if ex.predict and search.kind != "grid":
            raise ConfigError("experimental.predict", ex.predict,
                              f"applies to search.kind grid only, not {search.kind} (a chained search centres "
                              "each cell on its neighbour's best rate)")
        if ex.lr_prior is not None and search.runs_rates and search.lrs:
            from cbscore.study.lr_predict import allowed_rates

            allowed = allowed_rates(search.lrs, search.lr_extensions)
            if not allowed[0] <= ex.lr_prior <= allowed[-1]:
                raise ConfigError("experimental.lr_prior", ex.lr_prior,
                                  f"must lie within the allowed rates [{allowed[0]:g}, {allowed[-1]:g}] "
                                  "(search.lrs and search.lr_extensions past each edge)")

    def gns_batch_sizes(self) -> tuple[int, ...]:
        """Batch sizes whose trials get the ``gns_micro_batch_size`` split (none without it)."""
        if self.gns_micro_batch_size is None:
            return ()
        chosen = self.batch_sizes if self.gns_cells == "all" else (self.b_ref,)
        return tuple(b for b in chosen if b > self.gns_micro_batch_size)

    def _check_gns(self) -> None:
        m = self.gns_micro_batch_size
        if m is None:
            return
        if m >= self.b_ref:
            raise ConfigError("gns_micro_batch_size", m,
                              f"must be smaller than b_ref={self.b_ref} (the forecast needs the reference runs split in two at least)")
        for b in self.gns_batch_sizes():
            pass_size = self.micro_batch_size if self.micro_batch_size and b > self.micro_batch_size else b
            if pass_size % m:
                which = f"micro_batch_size={pass_size}" if pass_size != b else f"batch size {b}"
                raise ConfigError("gns_micro_batch_size", m, f"must divide {which}")

    def _check_kind(self) -> None:
        from cbscore.study.models import check_model

        if self.kind == "custom":
            if not self.settings:
                raise ConfigError("settings", [], "a custom study needs at least one {model, tokens} setting")
            for i, s in enumerate(self.settings):
                check_model(f"settings[{i}].model", s.model)
                _positive_int(f"settings[{i}].tokens", s.tokens)
            return
        if not self.models:
            raise ConfigError("models", [], f"a {self.kind} study needs at least one model preset")
        for m in self.models:
            check_model("models", m)
        if len(set(self.models)) != len(self.models):
            raise ConfigError("models", list(self.models), "must not repeat a model")
        if self.kind in _KIND_BLOCKS:  # one setting: its budget, and what the kind's block asks of it
            _KIND_BLOCKS[self.kind][2](self)
            return
        if self.kind == "fixed_n" and len(self.models) != 1:
            raise ConfigError("models", list(self.models), "a fixed_n study takes exactly one model")
        if self.kind in ("fixed_n", "fixed_d"):
            if not self.tokens:
                raise ConfigError("tokens", [], f"a {self.kind} study needs token budgets")
            for t in self.tokens:
                _positive_int("tokens", t)
            if self.kind == "fixed_d" and len(self.tokens) != 1:
                raise ConfigError("tokens", list(self.tokens), "a fixed_d study takes exactly one token budget")
            if len(set(self.tokens)) != len(self.tokens):
                raise ConfigError("tokens", list(self.tokens), "must not repeat a token budget")
        if self.kind == "chinchilla" and self.tokens:
            if len(self.tokens) != len(self.models):
                raise ConfigError("tokens", list(self.tokens),
                                  f"a chinchilla study takes one token budget per model ({len(self.models)}) or none")
            for t in self.tokens:
                _positive_int("tokens", t)

    # ------------------------------------------------------------------ settings
    def resolve_settings(self) -> list[Setting]:
        """The ``(N, D)`` settings of the study, in a stable order (computed once per spec: the
        planner asks on every pass)."""
        cached = self.__dict__.get("_settings")
        if cached is None:
            cached = tuple(self._resolve_settings())
            object.__setattr__(self, "_settings", cached)  # a cache on a frozen spec, not a field
        return list(cached)

    def _resolve_settings(self) -> list[Setting]:
        from cbscore.study.models import model_info

        pairs: list[tuple[str, int]]
        if self.kind == "custom":
            pairs = [(s.model, s.tokens) for s in self.settings]
        elif self.kind == "chinchilla" and self.tokens:
            pairs = list(zip(self.models, self.tokens))
        elif self.kind == "chinchilla":
            pairs = [(m, int(round(self.tokens_per_param * model_info(m, self.context_tokens, self._vocab_size())[0]))) for m in self.models]
        elif self.kind in ("fixed_n", "local", "schedule"):
            pairs = [(self.models[0], t) for t in self.tokens]
        else:
            pairs = [(m, self.tokens[0]) for m in self.models]
        out: list[Setting] = []
        seen: set[str] = set()
        for model, tokens in pairs:
            n_params, flops = model_info(model, self.context_tokens, self._vocab_size())
            setting_id = f"{model}_D{format_tokens(tokens)}"
            if setting_id in seen:
                raise ConfigError("settings", setting_id, "repeats a setting")
            seen.add(setting_id)
            out.append(Setting(setting_id=setting_id, model=model, n_params=n_params, tokens=tokens,
                               flops_per_token=flops))
        return out

    def _vocab_size(self) -> int | None:
        """The tokenizer's vocabulary (LM-head FLOPs), known without touching the network."""
        from cbscore.data import DataConfig

        try:
            return DataConfig.from_dict(dict(self.data)).expected_vocab_size
        except ConfigError:
            return None  # a bad data setting is reported where the data is checked

    # ------------------------------------------------------------------ wire format
    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        if self.experimental == _NO_EXPERIMENTAL:
            del d["experimental"]  # the rules that failed the criteria appear only in a spec that uses one
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StudySpec:
        """The base's reading, with the study's own messages (``spec: must be a mapping of fields``,
        ``is not a study field (known: ...)``) and the rules given at their place before issue 40
        moved into ``experimental`` (with a warning)."""
        if not isinstance(data, Mapping):
            raise ConfigError("spec", data, "must be a mapping of fields")
        data = move_experimental(data)  # a spec from before issue 40 gives them at their old place
        known = cls._plan().names
        unknown = sorted(data.keys() - known)
        if unknown:
            raise ConfigError(unknown[0], data[unknown[0]], f"is not a study field (known: {', '.join(sorted(known))})")
        if "name" not in data:
            raise ConfigError("name", None, "is required")
        return cls(**data)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    @classmethod
    def from_yaml(cls, source: str | Path) -> StudySpec:
        """Read a spec from a YAML (or JSON) file (a :class:`~pathlib.Path`) or from YAML text (a
        ``str``, always: a string is never taken for a path, so text pasted in the web page can
        never make the server read one of its files)."""
        text = source
        if isinstance(source, Path):
            path = source
            if not path.exists():
                raise ConfigError("spec", str(path), "file does not exist")
            text = path.read_text()
        from cbscore.study.safe_yaml import load_yaml

        return cls.from_dict(load_yaml(text))  # no aliases, at most 64 KiB, 12 deep

    def replace(self, **changes: Any) -> StudySpec:
        """A copy with ``changes``; the rules moved into ``experimental`` are still taken at their old
        names (with a warning), merged into this spec's block."""
        if "experimental" not in changes and ("prune_at_equal_tokens" in changes
                                              or isinstance(changes.get("search"), Mapping)):
            changes = move_experimental(changes)
            if "experimental" in changes:  # moved ones over this spec's block
                changes["experimental"] = {**dataclasses.asdict(self.experimental), **changes["experimental"]}
        elif "experimental" in changes:
            changes = move_experimental(changes)
        return dataclasses.replace(self, **changes)
