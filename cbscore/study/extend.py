"""Growing a study without re-running a trial: the rules of ``cbs study extend``.

An extension is a *patch*, a mapping of study fields like a spec's, applied to the stored spec:
each field it names replaces the stored value. Only what adds trials may change:

==================  ==========================================================================
``batch_sizes``     add any; drop one that has not run (dropping one that ran hides its cells:
                    the planner, the table and the fit leave them out; nothing is deleted)
``seeds``           add (every seed that ran stays)
``settings``        add (``custom``; ``models``/``tokens`` for the other kinds, likewise)
``search.lrs``      add rates to a grid (every rate that ran stays)
``search.n_trials`` raise an Optuna cell's trial count
``budget_margin``   raise (new trials get the larger budgets; ``cbs study retry --censored`` runs
                    a censored cell again at a larger cap)
``max_trials``,     raise the sanity limits
``max_total_tokens``
``local``           a local study's ``warmup_run`` and ``warmup_schedule`` only, once: the
                    warm-up and its two controls (:mod:`cbscore.study.local_plan`), launched by
                    ``cbs study warmup`` (:mod:`workers.studies.local_warmup`); the keys it names replace
                    the stored ones
==================  ==========================================================================

Everything else (B_ref, T, r, the recipe, the data, the schedule, ...) decides what the trials
already run measured, so changing it is refused, naming the field: that is a new study.

Two things are pinned so that the trials already run keep their meaning:

* **Targets.** A setting's target is the mean over seeds of its reference cell's best loss at D
  (:func:`cbscore.study.planner.setting_targets`). A new seed (or a new reference rate) would move
  it, and the trials that stopped at the old target would then be measured against another one.
  Every target known at the extension is kept in ``pinned_targets``; a new seed's trials are run to
  it, and its reference runs' S(B_ref) is read at it like any cell's.
* **The recipe's reference D.** ``recipe: fixed`` sets β2 and τ from √(D_min·D_max) of the
  settings; new settings would change it for every cell. ``recipe_d_ref_tokens`` keeps it.

:func:`extend_spec` is pure: the stored spec, the patch, what has run; it returns the new spec and
the changes in words, or raises :class:`~cbscore.errors.ConfigError` naming the field and the value.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import Any

from cbscore.errors import ConfigError
from cbscore.study.spec import StudySpec

#: Fields a patch may name (``search`` only with the keys of :data:`SEARCH_FIELDS`).
EXTENSIBLE = ("batch_sizes", "seeds", "settings", "models", "tokens", "search", "budget_margin", "max_trials",
              "max_total_tokens", "local")
SEARCH_FIELDS = ("lrs", "n_trials")
#: ``local`` keys a patch may change (the warm-up phase of a local study).
LOCAL_FIELDS = ("warmup_run", "warmup_schedule")
_LIMITS = ("budget_margin", "max_trials", "max_total_tokens")


def extend_spec(stored: StudySpec, patch: Mapping[str, Any], *, targets: Mapping[str, float],
                ran_batch_sizes: Set[int] = frozenset(),
                busy_batch_sizes: Set[int] = frozenset()) -> tuple[StudySpec, list[str]]:
    """The spec of ``stored`` grown by ``patch``, and what changed, one line per change.

    ``targets``: the targets the study has now (setting id → loss; pinned in the new spec).
    ``ran_batch_sizes``: batch sizes with at least one trial (dropping one of them only hides it);
    ``busy_batch_sizes``: those with a trial queued or running (they cannot be dropped yet).
    """
    if not isinstance(patch, Mapping) or not patch:
        raise ConfigError("patch", patch, "must be a mapping of the study fields to change (for example "
                                          "batch_sizes: [...] or seeds: [...])")
    patch = dict(patch)
    if "name" in patch and patch.pop("name") != stored.name:
        raise ConfigError("name", patch.get("name"), f"must be the study's own name {stored.name!r} (or left out)")
    before = stored.to_dict()
    for key in patch:
        if key not in EXTENSIBLE:
            if key not in before:
                raise ConfigError(key, patch[key], f"is not a study field (an extension may change: {', '.join(EXTENSIBLE)})")
            if patch[key] != before[key]:
                raise ConfigError(key, patch[key], "decides what the trials already run measured, so an extension "
                                                   f"cannot change it (it is {before[key]!r}); launch a new study")
    merged = dict(before)
    changes: list[str] = []
    for key, value in patch.items():
        if key == "search":
            merged["search"] = _search(before["search"], value, changes)
        elif key == "local":
            merged["local"] = _local(before["local"], value, changes)
        elif key in ("batch_sizes",):
            merged[key] = _batch_sizes(before[key], value, stored.b_ref, ran_batch_sizes, busy_batch_sizes, changes)
        elif key in ("seeds", "models", "tokens"):
            merged[key] = _superset(key, before[key], value, changes)
        elif key == "settings":
            merged[key] = _settings(before[key], value, changes)
        elif key in _LIMITS:
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < before[key]:
                raise ConfigError(key, value, f"may only be raised by an extension (it is {before[key]!r})")
            if value != before[key]:
                merged[key] = value
                changes.append(f"{key}: {before[key]!r} → {value!r}")
    if not changes:
        raise ConfigError("patch", patch, "changes nothing in the study's spec")
    new = StudySpec.from_dict(merged)  # every field checked as at launch
    old_ids = {s.setting_id for s in stored.resolve_settings()}
    new_settings = [s for s in new.resolve_settings() if s.setting_id not in old_ids]
    pins: dict[str, Any] = {}
    if new_settings and new.recipe == "fixed" and stored.recipe_d_ref_tokens is None:
        from cbscore.recipe import reference_d_tokens

        pins["recipe_d_ref_tokens"] = reference_d_tokens(s.tokens for s in stored.resolve_settings())
        changes.append(f"recipe_d_ref_tokens pinned at {pins['recipe_d_ref_tokens']:,} (the fixed recipe's "
                       "reference D before the new settings: the trials run keep their β2 and τ)")
    # A pin is never replaced: the trials run since were stopped at it.
    known = {k: float(v) for k, v in targets.items()
             if k in old_ids and stored.target_losses is None and k not in (stored.pinned_targets or {})}
    if known:
        pins["pinned_targets"] = {**(stored.pinned_targets or {}), **known}
        changes.append("targets pinned: " + ", ".join(f"{k} {v:.4f}" for k, v in sorted(known.items())))
    return (new.replace(**pins) if pins else new), changes


def _superset(key: str, old: list, value: Any, changes: list[str]) -> list:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ConfigError(key, value, "must be a list")
    value = list(value)
    lost = [v for v in old if v not in value]
    if lost:
        raise ConfigError(key, value, f"must keep every value that ran (it drops {lost})")
    added = [v for v in value if v not in old]
    if added:
        changes.append(f"{key}: + {added}")
    return old + added  # the stored order first: setting ids and cell order stay


def _batch_sizes(old: list[int], value: Any, b_ref: int, ran: Set[int], busy: Set[int],
                 changes: list[str]) -> list[int]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ConfigError("batch_sizes", value, "must be a list")
    value = list(value)
    if b_ref not in value:
        raise ConfigError("batch_sizes", value, f"must keep the reference batch size B_ref = {b_ref}")
    added = [b for b in value if b not in old]
    dropped = [b for b in old if b not in value]
    if [b for b in dropped if b in busy]:
        raise ConfigError("batch_sizes", value, f"drops {[b for b in dropped if b in busy]}, which have trials queued "
                                                "or running; wait for them to end")
    if added:
        changes.append(f"batch_sizes: + {added}")
    hidden = [b for b in dropped if b in ran]
    if hidden:
        changes.append(f"batch_sizes: {hidden} hidden (their trials stay in MLflow, out of the plan and the fit)")
    if [b for b in dropped if b not in ran]:
        changes.append(f"batch_sizes: - {[b for b in dropped if b not in ran]} (not run)")
    return value


def _settings(old: list[dict], value: Any, changes: list[str]) -> list[dict]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ConfigError("settings", value, "must be a list of {model, tokens}")
    value = [dict(v) if isinstance(v, Mapping) else v for v in value]
    return _superset("settings", old, value, changes)


def _search(old: dict, value: Any, changes: list[str]) -> dict:
    if not isinstance(value, Mapping):
        raise ConfigError("search", value, "must be a mapping")
    out = dict(old)
    for key, v in value.items():
        if key not in SEARCH_FIELDS:
            if key in old and v == old[key]:
                continue
            raise ConfigError(f"search.{key}", v, f"cannot change in an extension (it is {old.get(key)!r}); "
                                                  f"an extension may change search.{' and search.'.join(SEARCH_FIELDS)}")
        if key == "lrs":
            if old["kind"] != "grid":
                raise ConfigError("search.lrs", v, "adds rates to a grid search only (this study's search is "
                                                   f"{old['kind']!r}: raise search.n_trials)")
            out["lrs"] = sorted(_superset("search.lrs", list(old["lrs"]), v, changes))
        else:
            if old["kind"] != "optuna":
                raise ConfigError("search.n_trials", v, "raises an Optuna search's trial count only (this "
                                                        "study's search is a grid: add search.lrs)")
            if isinstance(v, bool) or not isinstance(v, int) or v < old["n_trials"]:
                raise ConfigError("search.n_trials", v, f"may only be raised (it is {old['n_trials']})")
            if v != old["n_trials"]:
                out["n_trials"] = v
                changes.append(f"search.n_trials: {old['n_trials']} → {v}")
    return out


def _local(old: dict | None, value: Any, changes: list[str]) -> dict:
    """A local study's warm-up phase switched on: ``warmup_run`` false → true with its schedule.
    Every other ``local`` field decides what the base runs and branches measured; a schedule
    that has been launched is what its arms ran, so it cannot change either."""
    if old is None:
        raise ConfigError("local", value, "applies to kind local only")
    if not isinstance(value, Mapping):
        raise ConfigError("local", value, "must be a mapping")
    out = dict(old)
    changed: dict[str, Any] = {}
    for key, v in value.items():
        if key in LOCAL_FIELDS:
            continue
        if key not in old:
            raise ConfigError(f"local.{key}", v, "is not a local field")
        if v != old[key] and not (isinstance(v, (list, tuple)) and list(v) == list(old[key])):
            changed[key] = v
    if changed:  # every field named at once, and what to do instead
        # Not even an added k or checkpoint: Δ is a multiple of lcm(k·B0)·T, so a new k can move every
        # checkpoint's window, and a base run wrote snapshots only at the checkpoints it was given.
        one = len(changed) == 1
        was = (repr(old[next(iter(changed))]) if one else
               ", ".join(f"local.{k} {old[k]!r}" for k in changed))
        raise ConfigError(", ".join(f"local.{k}" for k in changed), next(iter(changed.values())) if one else changed,
                          f"decides what the base runs and branches measured ({'it is' if one else 'they are'} "
                          f"{was}); an extension may change local.{' and local.'.join(LOCAL_FIELDS)} only: for "
                          "other local fields, launch a new local study (another name), whose base runs train again")
    run = value.get("warmup_run", old.get("warmup_run", False))
    if not isinstance(run, bool):
        raise ConfigError("local.warmup_run", run, "must be true or false")
    schedule = value.get("warmup_schedule", old.get("warmup_schedule") or [])
    if isinstance(schedule, (str, bytes, Mapping)) or not hasattr(schedule, "__iter__") \
            or not all(hasattr(e, "__iter__") and not isinstance(e, (str, bytes, Mapping)) for e in schedule):
        raise ConfigError("local.warmup_schedule", schedule, "must be a list of [tokens_from, batch_size, lr_multiplier]")
    schedule = [list(e) for e in schedule]
    if old.get("warmup_run"):
        if run is not True or schedule != [list(e) for e in old["warmup_schedule"]]:
            raise ConfigError("local.warmup_schedule" if run is True else "local.warmup_run",
                              schedule if run is True else run,
                              f"the warm-up and its controls were launched with {old['warmup_schedule']!r}: their "
                              "arms ran on it, so it stays; launch a new study for another schedule")
        return out
    if run is True:
        from cbscore.study.local_spec import LocalSpec

        out["warmup_run"], out["warmup_schedule"] = True, schedule
        checked = LocalSpec.from_dict(out)  # the fields named as at launch, before the words below
        changes.append("local.warmup_run: the warm-up and its small- and large-batch controls, switches "
                       + ", ".join(f"{b} at {t:,} tokens (lr ×{m:.3g})" for t, b, m in checked.warmup_schedule))
    elif "warmup_schedule" in value and schedule:
        raise ConfigError("local.warmup_run", run, "must be true with local.warmup_schedule")
    return out
