"""The launch form's text fields, read into a study spec and written back.

A researcher types lists as text (``8, 16, 32``, ``1M, 2M, 1.741B``, one ``model, tokens`` per
line); these pure functions turn them into :class:`cbscore.study.StudySpec` fields and back.
Every error is a :class:`~cbscore.errors.ConfigError` naming the spec field and the value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from cbscore.errors import ConfigError

#: Suffixes of token counts: ``2M`` = 2,000,000 (decimal, as the paper writes budgets).
_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}
_COUNT_RE = re.compile(r"^([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmbgt]?)$", re.IGNORECASE)
_SPLIT_RE = re.compile(r"[,;\s]+")

#: The form's label of each spec field, so that a message names what the researcher sees.
LABELS = {
    "name": "Study name",
    "kind": "Study kind",
    "models": "Models",
    "tokens": "Token budgets D",
    "tokens_per_param": "Tokens per parameter",
    "settings": "Settings (model, tokens)",
    "batch_sizes": "Batch sizes",
    "b_ref": "Reference batch size B_ref",
    "context_tokens": "Context length T",
    "overhead": "Overhead r",
    "target_losses": "Target losses",
    "search.kind": "Search",
    "search.lrs": "Learning rates",
    "search.n_trials": "Optuna trials per cell",
    "search.lr_min": "Lowest learning rate",
    "search.lr_max": "Highest learning rate",
    "search.chain_exponent": "Chain exponent",
    "search.bracket_ratio": "Bracket ratio",
    "search.extension_gain": "Extension gain",
    "search.max_extensions": "Most extensions per cell",
    "search.reference_rates": "Reference cell's rates",
    "search.bracket_min_batch_size": "Narrow cells below B",
    "search.narrow_rates": "Rates of a narrow cell",
    "search.bracket_top_cells": "Bracketed top cells",
    "search.replicate_ends": "Replicate the end cells",
    "search.chain_centre": "Centre the next cell on",
    "search.local_exponent": "Local exponent",
    "budget_multiple": "Fallback budget (× D)",
    "budget_margin": "Budget margin",
    "recipe": "Recipe rule",
    "prune_margin": "Prune margin",
    "stop_far_rates": "Stop far rates",
    "seeds": "Seeds",
    "max_trials": "Max trials",
    "max_total_tokens": "Max total tokens",
    "data": "Data source",
    "data.source": "Data source",
    "schedule": "Schedule",
    "warmup_fraction": "Warm-up fraction",
    "beta1": "β1",
    "beta2": "β2",
    "weight_decay": "Weight decay",
    "grad_clip": "Gradient clipping",
    "micro_batch_size": "Micro-batch size",
    "devices_per_trial": "Devices per trial",
    "gns_micro_batch_size": "Noise-scale split (sequences)",
    "gns_cells": "Noise-scale cells",
    # A schedule study's fields (cbscore.study.decay_spec).
    "decay": "Schedules",
    "decay.schedules": "Schedules measured",
    "decay.decay_fraction": "WSD decay share",
    "decay.min_lr_ratio": "Floor (share of the peak rate)",
    "decay.horizon_low": "Shortest horizon (× D)",
    "decay.horizon_high": "Longest horizon (× D)",
    "decay.wsd_ratio": "Decay-branch horizon ratio",
    "decay.cosine_ratio": "Cosine horizon ratio",
    # A local study's fields (app.local_form).
    "local": "Local CBS",
    "local.base_batch_size": "Base batch B0",
    "local.base_lr": "Base learning rate η0",
    "local.checkpoint_count": "Log-spaced checkpoints",
    "local.checkpoint_tokens": "Extra checkpoints (tokens)",
    "local.multipliers": "Multipliers k",
    "local.early_multipliers": "Early multipliers (below 1)",
    "local.early_checkpoints": "Checkpoints with early multipliers",
    "local.lr_rule": "Learning-rate rule f(k)",
    "local.window_fraction": "Window Δ (share of t)",
    "local.window_tokens": "Window Δ (tokens)",
    "local.epsilon": "Tolerance ε (nats)",
    # The simulator's inputs (Preview → "Simulate this design").
    "noise": "Noise σ",
    "b_noise": "B_noise of every setting",
    "--truth": "Truth",
}


#: The chained search's fields the form shows (:mod:`cbscore.study.chained`); the absolute
#: ``replicate_batch_sizes`` and ``replicates`` stay off the Launch page (a pasted spec keeps them).
CHAINED_FIELDS = ("chain_exponent", "bracket_ratio", "extension_gain", "max_extensions", "reference_rates",
                  "bracket_min_batch_size", "bracket_top_cells", "narrow_rates", "replicate_ends", "chain_centre",
                  "local_exponent")
#: Chained fields that are whole numbers on the form; in ``_ZERO_IS_NONE`` a 0 is ``None``.
_CHAINED_INTS = ("max_extensions", "bracket_min_batch_size", "bracket_top_cells", "narrow_rates")
_ZERO_IS_NONE = ("bracket_min_batch_size", "bracket_top_cells")
#: Chained fields that are a checkbox on the form.
_CHAINED_BOOLS = ("replicate_ends", "local_exponent")
#: A schedule study's fields the form shows (:class:`cbscore.study.decay_spec.DecaySpec`).
DECAY_FIELDS = ("schedules", "decay_fraction", "min_lr_ratio", "horizon_low", "horizon_high", "wsd_ratio",
                "cosine_ratio")

#: How a field is typed on this form, where that is the form's own (a list as text, 0 for ``None``):
#: added under the field's doc, which says what the field means.
INPUT_HINTS = {
    "tokens": "Comma-separated counts, e.g. `1M, 2M, 1.741B`.",
    "settings": "One setting per line: a model preset and its D, e.g. `tiny-0.1M, 1M`.",
    "batch_sizes": "Comma-separated, e.g. `64, 128, 256`.",
    "target_losses": "Only for explicit targets: one `setting_id: loss` per line.",
    "search.lrs": "Comma-separated, e.g. `0.001, 0.00316, 0.01`.",
    "search.bracket_min_batch_size": "0 = `None`.",
    "search.bracket_top_cells": "0 = `None`.",
    "seeds": "Comma-separated, e.g. `0, 1`.",
    "max_trials": "“Launch anyway” below is the `force`.",
    "data.source": "A path must lie inside the server's data roots: `$CBS_HOME/corpora` (where the operator "
                   "puts corpora) or a folder of `CBS_DATA_ROOTS`.",
    "beta2": "Empty = `None`.",
    "micro_batch_size": "0 = `None`.",
    "gns_micro_batch_size": "0 = `None`.",
    "local.checkpoint_tokens": "Comma-separated, e.g. `12288, 50k`.",
    "local.multipliers": "Comma-separated, e.g. `1, 1.5, 2, 3, 4, 6, 8`.",
    "local.early_multipliers": "Comma-separated, e.g. `0.5, 0.25`.",
    "local.window_tokens": "0 = `None`: the share above.",
}


def field_help(name: str) -> str:
    """A widget's help: the spec field's own docstring and the range its checks hold it to
    (``cbs study fields`` prints the same words, :mod:`cbscore.study.spec_docs`), the field named
    first so a researcher finds it in the YAML, and how the form reads it where that is the form's
    own (:data:`INPUT_HINTS`)."""
    from cbscore.study.spec_docs import spec_field_doc, spec_field_range

    hint, bounds = INPUT_HINTS.get(name), spec_field_range(name)
    if bounds.startswith("a finite number within"):  # the bound every number has: nothing to tell
        bounds = ""
    return (f"`{name}`: {spec_field_doc(name)}" + (f"\n\nAllowed: {bounds}." if bounds else "")
            + (f"\n\n{hint}" if hint else ""))


def label_of(field: str) -> str:
    """The form label for a spec field (``settings[2].model`` → ``Settings (model, tokens)``)."""
    base = re.sub(r"\[\d+\]", "", field)
    for key in (field, base, base.split(".")[0]):
        if key in LABELS:
            return LABELS[key]
    return field


def parse_count(field: str, text: str) -> int:
    """``"1.741B"`` → 1741000000; ``"2e6"``, ``"500k"``, ``"2_000_000"`` are counts too."""
    match = _COUNT_RE.match(text.strip().replace("_", ""))
    if not match:
        raise ConfigError(field, text, "must be a count like 2000000, 2M or 1.741B")
    value = float(match.group(1)) * _SUFFIX[match.group(2).lower()]
    if not math.isfinite(value) or value != round(value):
        raise ConfigError(field, text, "must be a whole number of tokens")
    return int(round(value))


def _items(text: str) -> list[str]:
    return [item for item in _SPLIT_RE.split(text.strip()) if item]


def parse_counts(field: str, text: str) -> list[int]:
    """A list of counts separated by commas or spaces: ``"1M, 2M"`` → ``[1000000, 2000000]``."""
    return [parse_count(field, item) for item in _items(text)]


def parse_ints(field: str, text: str) -> list[int]:
    """``"8, 16, 32"`` → ``[8, 16, 32]``; anything that is not a whole number names the field."""
    out = []
    for item in _items(text):
        try:
            out.append(int(item))
        except ValueError:
            raise ConfigError(field, item, "must be a whole number") from None
    return out


def parse_floats(field: str, text: str) -> list[float]:
    """``"0.003, 1e-2"`` → ``[0.003, 0.01]``."""
    out = []
    for item in _items(text):
        try:
            out.append(float(item))
        except ValueError:
            raise ConfigError(field, item, "must be a number") from None
    return out


def parse_settings(text: str) -> list[dict[str, Any]]:
    """One ``model, tokens`` per line → ``[{"model": ..., "tokens": ...}]`` (custom studies)."""
    out = []
    for i, line in enumerate(ln for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")):
        parts = [p for p in re.split(r"[,\s]+", line.strip()) if p]
        if len(parts) != 2:
            raise ConfigError(f"settings[{i}]", line.strip(), "must be 'model, tokens' (e.g. tiny-0.1M, 1M)")
        out.append({"model": parts[0], "tokens": parse_count(f"settings[{i}].tokens", parts[1])})
    return out


def parse_targets(text: str) -> dict[str, float]:
    """One ``setting_id: loss`` per line → ``{setting_id: loss}``."""
    out: dict[str, float] = {}
    for line in (ln.strip() for ln in text.splitlines()):
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.rpartition(":")
        key = key.strip()
        if not sep or not key:
            raise ConfigError("target_losses", line, "each line must be 'setting_id: loss'")
        try:
            out[key] = float(value)
        except ValueError:
            raise ConfigError(f"target_losses.{key}", value.strip(), "must be a finite number") from None
    return out


def format_count(value: int) -> str:
    """Inverse of :func:`parse_count` for round numbers: 1741000000 → ``1.741B``."""
    for unit, scale in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("k", 10**3)):
        text = f"{value / scale:.12g}{unit}"
        if value >= scale and parse_count("tokens", text) == value:
            return text
    return str(value)


def format_list(values) -> str:
    return ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)


def format_settings(settings) -> str:
    return "\n".join(f"{s['model']}, {format_count(int(s['tokens']))}" for s in settings)


def format_targets(targets: Mapping[str, float] | None) -> str:
    return "\n".join(f"{k}: {v:g}" for k, v in (targets or {}).items())


# --------------------------------------------------------------------------- form ↔ spec
#: What each study kind means, as the form offers it (Zhang et al. 2025, §4).
KIND_LABELS = {
    "chinchilla": "Chinchilla (N and D grow together)",
    "fixed_n": "Fixed N, vary D",
    "fixed_d": "Fixed D, vary N",
    "custom": "Custom settings",
    "local": "Local CBS during one run (Merrill et al. 2025)",
    "schedule": "Schedules of one setting (constant, cosine, WSD)",
}


def form_values(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The form's widget values for a spec dict (``StudySpec.to_dict()``), keyed by spec field."""
    search = spec.get("search") or {}
    return {
        "name": spec["name"],
        "kind": spec.get("kind", "custom"),
        "models": list(spec.get("models") or []),
        "tokens": ", ".join(format_count(int(t)) for t in spec.get("tokens") or []),
        "tokens_per_param": float(spec.get("tokens_per_param", 20.0)),
        "settings": format_settings(spec.get("settings") or []),
        "batch_sizes": format_list(spec.get("batch_sizes") or []),
        "b_ref": int(spec.get("b_ref", 256)),
        "context_tokens": int(spec.get("context_tokens", 512)),
        "overhead": float(spec.get("overhead", 0.2)),
        "target_rule": "reference" if not spec.get("target_losses") else "explicit",
        "target_losses": format_targets(spec.get("target_losses")),
        "search.kind": search.get("kind", "grid"),
        "search.lrs": format_list(search.get("lrs") or []),
        "search.n_trials": int(search.get("n_trials", 4)),
        "search.lr_min": float(search.get("lr_min", 1e-4)),
        "search.lr_max": float(search.get("lr_max", 1e-1)),
        "budget_multiple": float(spec.get("budget_multiple", 2.0)),
        "budget_margin": float(spec.get("budget_margin", 0.25)),
        "prune_margin": float(spec.get("prune_margin", 0.1)),
        "stop_far_rates": bool(spec.get("stop_far_rates", True)),
        "seeds": format_list(spec.get("seeds") or [0]),
        "max_trials": int(spec.get("max_trials", 2000)),
        "data.source": str((spec.get("data") or {}).get("source", "builtin")),
        "schedule": spec.get("schedule", "constant"),
        "recipe": spec.get("recipe", "fixed"),
        "warmup_fraction": float(spec.get("warmup_fraction", 0.25)),
        "beta2": "" if spec.get("beta2") is None else f"{spec['beta2']:g}",
        "micro_batch_size": int(spec.get("micro_batch_size") or 0),
        "devices_per_trial": int(spec.get("devices_per_trial") or 1),
        "gns_micro_batch_size": int(spec.get("gns_micro_batch_size") or 0),
        "gns_cells": str(spec.get("gns_cells") or "all"),
        **chained_values(search),
        **decay_values(spec.get("decay")),
    }


def chained_values(search: Mapping[str, Any]) -> dict[str, Any]:
    """The chained search's widget values (its defaults where the spec gives none)."""
    from cbscore.study.spec_parts import SearchSpec

    default = SearchSpec()
    out = {}
    for name in CHAINED_FIELDS:
        value = search.get(name, getattr(default, name))
        out[f"search.{name}"] = (value if isinstance(value, str) else bool(value) if name in _CHAINED_BOOLS
                                 else int(value or 0) if name in _CHAINED_INTS else float(value))
    return out


def decay_values(decay: Mapping[str, Any] | None) -> dict[str, Any]:
    """A schedule study's widget values (``DecaySpec``'s defaults where the spec gives none)."""
    from cbscore.study.decay_spec import DecaySpec

    d = DecaySpec.from_dict(decay or {})
    return {"decay.schedules": list(d.schedules),
            **{f"decay.{name}": float(getattr(d, name)) for name in DECAY_FIELDS if name != "schedules"}}


def build_spec(base: Mapping[str, Any], values: Mapping[str, Any]):
    """The :class:`~cbscore.study.StudySpec` of ``base`` (a spec dict) with the form's ``values``.

    Fields the form does not show (EWA τ, weight decay, ...) keep their ``base`` value.
    Raises :class:`ConfigError` naming the first field that is wrong.
    """
    from cbscore.study import StudySpec

    d = dict(base)
    kind = values["kind"]
    d["name"] = str(values["name"]).strip()
    d["kind"] = kind
    if kind == "custom":
        d.update(settings=parse_settings(values["settings"]), models=[], tokens=[])
    else:
        d.update(settings=[], models=list(values["models"]))
        if kind == "chinchilla":
            d["tokens_per_param"] = float(values["tokens_per_param"])
        else:
            d["tokens"] = parse_counts("tokens", values["tokens"])
    d["batch_sizes"] = parse_ints("batch_sizes", values["batch_sizes"])
    for key in ("b_ref", "context_tokens", "max_trials"):
        d[key] = int(values[key])
    for key in ("overhead", "budget_multiple", "budget_margin", "prune_margin", "warmup_fraction"):
        d[key] = float(values[key])
    d["target_losses"] = parse_targets(values["target_losses"]) if values["target_rule"] == "explicit" else None
    if d["target_losses"] == {}:
        raise ConfigError("target_losses", values["target_losses"], "must give one 'setting_id: loss' per line")
    d["search"] = {**(base.get("search") or {}), "kind": values["search.kind"],
                   "lrs": parse_floats("search.lrs", values["search.lrs"]),
                   "n_trials": int(values["search.n_trials"]), "lr_min": float(values["search.lr_min"]),
                   "lr_max": float(values["search.lr_max"])}
    for name in CHAINED_FIELDS:  # absent from an older form's values: the base spec's then
        if f"search.{name}" in values:
            value = values[f"search.{name}"]
            d["search"][name] = (int(value) or None if name in _ZERO_IS_NONE else bool(value) if name in _CHAINED_BOOLS
                                 else int(value) if name in _CHAINED_INTS else value)
    # The rules that failed the simulator's criteria for a default are not on the form: a pasted spec's ``experimental``
    # block (in ``base``) is kept as it was.
    if "stop_far_rates" in values:
        d["stop_far_rates"] = bool(values["stop_far_rates"])
    d["seeds"] = parse_ints("seeds", values["seeds"])
    d["data"] = {**(base.get("data") or {}), "source": str(values["data.source"]).strip()}
    d["schedule"] = values["schedule"]
    d["recipe"] = values["recipe"]
    beta2 = str(values["beta2"]).strip()
    try:
        d["beta2"] = float(beta2) if beta2 else None
    except ValueError:
        raise ConfigError("beta2", beta2, "must be a number in [0, 1), or empty for the recipe rule") from None
    d["micro_batch_size"] = int(values["micro_batch_size"]) or None
    d["devices_per_trial"] = int(values["devices_per_trial"])
    d["gns_micro_batch_size"] = int(values["gns_micro_batch_size"]) or None  # 0 = no extra split
    d["gns_cells"] = values["gns_cells"]
    # A kind's own block (``local:``, ``decay:``) from its fields; every other kind's block is dropped.
    own = KIND_BLOCKS.get(kind)
    for block, build in KIND_BLOCKS.values():
        d[block] = build(base, d, values) if own is not None and own[0] == block else None
    return StudySpec.from_dict(d)


def _local_block(base: Mapping[str, Any], d: Mapping[str, Any], values: Mapping[str, Any]):
    """A local study's own fields come from app.local_form (build_local_spec), already in ``d``."""
    return d.get("local")


def _decay_block(base: Mapping[str, Any], d: Mapping[str, Any], values: Mapping[str, Any]) -> dict:
    """A schedule study's decay fields (fields of the base the form does not show are kept)."""
    decay = {**(base.get("decay") or {})}
    if "decay.schedules" in values:
        decay["schedules"] = list(values["decay.schedules"])
    for name in DECAY_FIELDS[1:]:
        if f"decay.{name}" in values:
            decay[name] = float(values[f"decay.{name}"])
    return decay


#: the kinds with a block of their own, by the kind's name: the block's field and what builds it from the form
KIND_BLOCKS = {"local": ("local", _local_block), "schedule": ("decay", _decay_block)}


def budget_rule(spec, batch_size: int) -> str:
    """The planner's budget rule for the trials of a cell at ``batch_size``, in words
    (``cbscore.study.planner.cell_budget_tokens``; DESIGN.md §1, "Budgets that cannot bias B*")."""
    margin = f"{1 + spec.budget_margin:g}"
    if spec.target_losses is None:
        if batch_size == spec.b_ref:  # the target is the cell's loss at D, and its runs must cross it
            return f"{margin}·D tokens (the reference runs)"
        if batch_size < spec.b_ref:
            return f"{margin}·D tokens"
        return f"{margin}·S(smaller B) steps (at most {margin}·S(B_ref))"
    fallback = f"{spec.budget_multiple:g}·D tokens"
    if batch_size <= spec.b_ref:
        return f"{fallback} (fallback: explicit targets)"
    return f"{fallback} until a smaller B reaches the target, then {margin}·S(smaller B) steps"


def planned_cells(spec) -> list[dict[str, Any]]:
    """One row per cell (setting × batch size): its role, trials and per-trial budget (the most
    the planner can give it before anything is measured: above B_ref, the step cap from
    ``S(B_ref) = D/(B_ref·T)``). Trials per cell are the estimate's own (``cell_size``): cells of a
    chained search are not equal (the reference cell may run the grid, the others three rates)."""
    from cbscore.study.budgets import cell_size, planned_budget

    rows = []
    for s in spec.resolve_settings():
        for b in spec.batch_sizes:
            role, _, budget = planned_budget(spec, s, b)
            reference = role == "reference"
            rows.append({
                "setting": s.setting_id, "model": s.model, "N": s.n_params, "D (tokens)": s.tokens,
                "B (sequences)": b, "role": "reference: sets the target" if reference else "search to target",
                "trials": cell_size(spec, b), "budget per trial (tokens)": budget,
                "budget per trial (steps)": budget // (b * spec.context_tokens),
                "budget rule": budget_rule(spec, b),
            })
    return rows


def _local_rates_line(spec) -> str:
    return (f"**Learning rates:** the base run at η0 = {spec.local.base_lr:g}; each branch at f(k)·η0 "
            f"(`{spec.local.lr_rule}`).")


#: the kinds whose learning rates are their own (not a search's), by the kind's name: their Preview line
KIND_RATES_LINES = {"local": _local_rates_line}


def rates_line(spec) -> str:
    """The learning rates a study will run, in words, for the Preview (the rates the Launch button
    starts are these: issue 42, a study once launched with rates that were not the pasted YAML's)."""
    search = spec.search
    rates = ", ".join(f"{lr:g}" for lr in search.lrs)
    if spec.kind in KIND_RATES_LINES:  # a kind whose rates are its own, not a search's
        return KIND_RATES_LINES[spec.kind](spec)
    if search.kind == "optuna":
        return (f"**Learning rates:** Optuna proposes {search.n_trials} per cell, log-uniform between "
                f"{search.lr_min:g} and {search.lr_max:g}.")
    if search.kind == "chained":
        ref = (f"{rates}" if search.reference_rates == "grid"
               else f"three rates around the geometric middle of {rates} (×/÷ {search.bracket_ratio:g})")
        narrow = ("" if spec.bracket_floor is None or search.narrow_rates == 3
                  else f" (below B = {spec.bracket_floor}: "
                       + (f"two, ×/÷ √{search.bracket_ratio:g})" if search.narrow_rates == 2 else "the centre alone)"))
        ends = spec.replicated_batch_sizes
        replicated = (f" B = {', '.join(str(b) for b in ends)} each run {search.replicates} more at the best rate with a "
                      "new training seed." if ends else "")
        anchor = "fitted optimum" if search.chain_centre == "vertex" else "best"
        power = ("the slope of the two cells before it" if search.local_exponent
                 else f"{search.chain_exponent:g}")
        return (f"**Learning rates:** the reference cell runs {ref}; every other cell three rates "
                f"(×/÷ {search.bracket_ratio:g}) around its neighbour's {anchor} × (B/B′)^{power}{narrow}, "
                f"at most {search.max_extensions} added past an edge.{replicated}")
    extra = (f"; a cell whose best rate sits at an edge adds up to {search.lr_extensions} past it"
             if search.lr_extensions else "; no rate is added past an edge")
    return f"**Learning rates:** {rates} in every cell{extra}."


# --------------------------------------------------------------------------- recipe preview
#: A middle τ whose half-life passes this share of D averages over much of the run, from the
#: initial weights on (DESIGN.md §1, "Recipe defaults"); the paper's own are 1.5%–19% of D.
LONG_HORIZON_SHARE = 0.5


def recipe_rows(spec) -> list[dict[str, Any]]:
    """Per setting and batch size: the β2 and the EWA τ its trials use (``cbscore.recipe.study_recipe``
    under the spec's ``recipe``, or the spec's own ``beta2``/``ewa_taus``), the middle τ's
    half-life in steps and as a share of D, and the floors and ceilings of the rule that set them."""
    from cbscore.recipe import half_life_steps, spec_recipe
    from cbscore.study.cell_trials import cell_recipe

    rows = []
    for setting in spec.resolve_settings():
        for b in spec.batch_sizes:
            beta2, taus = cell_recipe(spec, setting, b)
            taus = tuple(sorted(taus))
            middle = taus[len(taus) // 2]
            steps = half_life_steps(middle)
            rows.append({
                "setting": setting.setting_id, "B (sequences)": b, "β2": beta2, "EWA τ (middle)": middle,
                "τ half-life (steps)": steps,
                "τ half-life (share of D)": steps * b * spec.context_tokens / setting.tokens,
                "τ tracked": ", ".join(f"{t:g}" for t in taus),
                "bounds hit": ", ".join(x for x in spec_recipe(spec, batch_size=b, d_tokens=setting.tokens).bounds
                                        if (x.startswith("β2") and spec.beta2 is None)
                                        or (x.startswith("τ") and spec.ewa_taus is None)),
            })
    return rows


# --------------------------------------------------------------------------- simulation
#: Where a simulation's truth comes from (Preview → "Simulate this design").
TRUTH_LABELS = {
    "paper": "The paper's laws (the paper's models)",
    "b_noise": "One B_noise for every setting",
    "csv": "A CSV of truth curves",
}
#: Most simulated studies the page runs at once.
MAX_SIM_SEEDS = 200
#: Most simulated trials (the design's trials × simulated studies) one click runs for a user who
#: is no admin (``CBS_WEB_SIM_TRIALS``); ``cbs study simulate`` on the host has no such bound.
MAX_SIM_TRIALS = 20_000
#: Seconds after which a simulation stops at the next simulated study (``CBS_WEB_SIM_SECONDS``).
MAX_SIM_SECONDS = 60.0


def sim_limits() -> tuple[int, float]:
    """``(most simulated trials per click, seconds)`` from the environment, else the defaults."""
    import os

    return (int(os.environ.get("CBS_WEB_SIM_TRIALS") or MAX_SIM_TRIALS),
            float(os.environ.get("CBS_WEB_SIM_SECONDS") or MAX_SIM_SECONDS))


def check_sim_size(spec, seeds: int, max_trials: int) -> None:
    """:class:`ConfigError` naming the simulated studies when ``seeds`` studies of ``spec`` would
    simulate more than ``max_trials`` trials (counted by arithmetic, before anything runs)."""
    from cbscore.errors import ConfigError
    from cbscore.study import grid_trials

    trials = grid_trials(spec) * seeds
    if trials > max_trials:
        raise ConfigError("simulated studies", seeds, f"{seeds} studies of this design simulate {trials:,} trials, "
                          f"more than the web app runs for one click ({max_trials:,}, CBS_WEB_SIM_TRIALS); simulate "
                          "fewer studies, or run `cbs study simulate` on the host")


def simulate_within(spec, curves, config, seeds: int, *, seconds: float, alive=lambda: True):
    """``simulate(spec, curves, config, seeds=seeds)``, one simulated study at a time, stopping
    early once ``seconds`` have passed or ``alive()`` says the browser session has ended (checked
    between studies). Returns the report of the studies run (the same numbers as one call when
    none is cut) and how many ran."""
    import dataclasses
    import time

    from cbscore.study.simulate import simulate

    start, runs, report = time.monotonic(), [], None
    for i in range(seeds):
        if runs and (time.monotonic() - start > seconds or not alive()):
            break
        report = simulate(spec, curves, config, seeds=1, first_seed=i)
        runs.extend(report.seeds)
    return dataclasses.replace(report, seeds=tuple(runs)), len(runs)
#: The paper's models (DESIGN.md §1), whose B* its laws describe.
PAPER_MODELS = ("85M", "151M", "302M", "604M", "1.2B")


def default_truth(spec) -> str:
    """The truth a simulation of ``spec`` starts from: the paper's laws for a study of the paper's
    models (the ``paper-*`` presets), where they give every setting a positive B_noise; else one
    B_noise for every setting (the laws say nothing about tiny models)."""
    from cbscore.errors import CbsError
    from cbscore.study.simulate import paper_truth

    if not all(s.model in PAPER_MODELS for s in spec.resolve_settings()):
        return "b_noise"
    try:
        paper_truth(spec)
    except CbsError:  # B* at or below (1 + r)·B_ref: no positive B_noise
        return "b_noise"
    return "paper"


def read_truth_text(text: str, spec, name: str):
    """:func:`cbscore.study.simulate.read_truth` of an uploaded CSV's ``text``: either
    ``setting,s_min,b_noise`` rows (optionally ``n_params,tokens``) or a steps table in the
    ``cbs fit`` format. Messages name the upload, not the temporary file it is read from."""
    import tempfile
    from pathlib import Path

    from cbscore.analysis import MAX_CSV_ROWS, check_csv_bounds
    from cbscore.errors import DataError
    from cbscore.study.simulate import read_truth

    check_csv_bounds(text, name)
    if text.count("\n") > MAX_CSV_ROWS:
        raise DataError(f"{name}: more than {MAX_CSV_ROWS:,} rows, the limit of a truth table (MAX_CSV_ROWS).")
    with tempfile.TemporaryDirectory(prefix="cbs-truth-") as folder:
        path = Path(folder) / "truth.csv"
        path.write_text(text, encoding="utf-8")
        try:
            return read_truth(path, spec)
        except DataError as exc:
            raise DataError(str(exc).replace(f"--truth {path}", name)) from None


def uniform_truth(spec, b_noise: float):
    """One truth curve with ``B_noise = b_noise`` for every setting. ``S_min`` is a placeholder:
    the simulator scales each setting's curve so that its best reference run crosses the target
    after D tokens (a scale of S(B) leaves B_noise, and so B*, unchanged)."""
    from cbscore.study.simulate import TruthCurve

    if not (isinstance(b_noise, (int, float)) and math.isfinite(b_noise) and b_noise > 0):
        raise ConfigError("b_noise", b_noise, "must be a positive number of sequences")
    return {s.setting_id: TruthCurve(s_min=1.0, b_noise=float(b_noise)) for s in spec.resolve_settings()}


def simulation_rows(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per setting of a ``SimulationReport.to_json_dict()``: B* of the truth, of the full grid and
    of the study (medians over seeds), the study's bias and spread, and what was censored or
    skipped."""
    from cbscore.study.sim_report import setting_notes

    rows = []
    for s in report["settings"]:
        rows.append({
            "setting": s["setting"],
            "B* truth": s["cbs_truth"],
            "B* full grid": s["cbs_grid_median"],
            "B* study": s["cbs_study_median"],
            "study vs truth": s["bias_vs_truth"],
            "study vs full grid": s["bias_vs_grid"],
            "study B* 5%": s["cbs_study_p05"],
            "study B* 95%": s["cbs_study_p95"],
            "notes": setting_notes(s),
        })
    return rows


def simulation_summary(report: Mapping[str, Any]) -> str:
    """The tokens and GPU-hours of a ``SimulationReport.to_json_dict()``, in one sentence."""
    from app.units import count

    share = report["tokens_share_of_fixed_budget_grid"]
    return (f"Tokens: the study spends {count(report['tokens_study_mean'])} (mean over {report['seeds']} "
            f"simulated studies), {'' if share is None else f'{share:.0%} of '}the fixed-budget grid's "
            f"{count(report['tokens_fixed_budget_grid'])}; the full grid run to each trial's target would spend "
            f"{count(report['tokens_grid_to_target_mean'])}. GPU-hours ({report['gpu_hours_note']}): study "
            f"{report['gpu_hours_study']:.3g}, fixed-budget grid {report['gpu_hours_fixed_budget_grid']:.3g}.")
