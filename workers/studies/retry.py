"""``cbs study retry``: which trials run again, and as what (:meth:`workers.studies.runner.Runner.retry`
starts them). Pure functions of a study's records and trial specs.

A retry is a new trial beside the old one, ``{trial_id}.retry{k}`` (the old run stays as it ended): every
``failed`` trial, and every censored trial of a cell that nothing reached at ``budget_factor`` times
its cap and budget. A trial retried before is retried through its newest retry.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from cbscore.errors import ConfigError
from cbscore.study import TrialRecord, TrialSpec


def check_retry(*, failed: bool, censored: bool, budget_factor: float) -> None:
    """Refuse a retry of nothing, or a ``budget_factor`` outside (1, 16], naming the field."""
    if not (failed or censored):
        raise ConfigError("retry", "nothing", "name what to retry: failed trials, censored cells, or both")
    if isinstance(budget_factor, bool) or not isinstance(budget_factor, (int, float)) or not 1 < budget_factor <= 16:
        raise ConfigError("budget_factor", budget_factor, "must be a number in (1, 16]: the censored cells' "
                                                          "new cap and budget as a multiple of the old")


def split_retry_id(trial_id: str) -> tuple[str, int]:
    """``("{base}", k)`` of ``{base}.retry{k}`` (``k`` = 0 for a trial never retried)."""
    base, _, k = trial_id.partition(".retry")
    return base, int(k) if k.isdigit() else 0


def retry_choices(records: Sequence[TrialRecord], *, failed: bool, censored: bool,
                  budget_factor: float) -> list[tuple[TrialRecord, float, str]]:
    """The trials to run again, each with its budget factor (1 for a failed trial) and the reason
    its new run is tagged with; only the newest retry of each trial is chosen."""
    newest: dict[str, int] = {}
    for r in records:
        base, k = split_retry_id(r.trial_id)
        newest[base] = max(newest.get(base, 0), k)
    chosen: list[tuple[TrialRecord, float, str]] = []
    if failed:
        chosen += [(r, 1.0, f"failed ({r.note})" if r.note else "failed") for r in records if r.status == "failed"]
    if censored:
        cells: dict[str, list[TrialRecord]] = {}
        for r in records:
            cells.setdefault(r.cell_id, []).append(r)
        for cell in cells.values():
            if (all(r.terminal for r in cell) and not any(r.status == "reached" for r in cell)
                    and any(r.status == "censored" for r in cell)):
                chosen += [(r, float(budget_factor), f"censored at its cap of {r.max_steps} steps in a cell nothing "
                            f"reached; cap and budget ×{budget_factor:g}")
                           for r in cell if r.status == "censored"]
    # an older attempt of a trial retried already is not retried again
    def newest_of_its_trial(r: TrialRecord) -> bool:
        base, k = split_retry_id(r.trial_id)
        return k == newest[base]

    return [(r, factor, why) for r, factor, why in chosen if newest_of_its_trial(r)]


def retried_spec(old: TrialSpec, factor: float) -> TrialSpec:
    """``old`` as its next retry: id ``{base}.retry{k+1}``, cap and token budget × ``factor``."""
    from cbscore.train.config import TrainConfig

    base, k = split_retry_id(old.trial_id)
    max_steps = old.max_steps if old.max_steps is None or factor == 1 else int(math.ceil(factor * old.max_steps))
    max_tokens = old.max_tokens if factor == 1 else int(factor * old.max_tokens)
    config = TrainConfig.from_dict({**old.train_config, "max_tokens": max_tokens, "max_steps": max_steps})
    return dataclasses.replace(old, trial_id=f"{base}.retry{k + 1}", max_tokens=max_tokens, max_steps=max_steps,
                               train_config=config.to_dict())
