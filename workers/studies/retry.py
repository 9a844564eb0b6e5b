"""``cbs study retry``: failed trials and censored cells run again as new trials beside the old
ones, through the runner that starts them (:meth:`workers.studies.runner.Runner.retry`)."""

from __future__ import annotations

import dataclasses
import math
import time

from cbscore.errors import ConfigError
from cbscore.study import StudySpec, TrialRecord
from workers.studies.records import build_records, in_spec


def retry_study(runner, study: str, *, failed: bool = True, censored: bool = False, budget_factor: float = 2.0,
                author: str = "") -> list[str]:
    """Run again, as new trials beside the old ones (``{trial_id}.retry{k}``: the old run stays as
    it ended), every ``failed`` trial of ``study`` (``failed``) and every censored trial of a
    cell that nothing reached (``censored``) at ``budget_factor`` times its cap and budget. The
    reason and who asked are the new runs' ``retry_of``/``retry_reason``/``retried_by`` tags.
    A done study runs again. Returns the new trial ids."""
    from cbscore.train.config import TrainConfig
    from workers.studies.records import trial_spec

    if not (failed or censored):
        raise ConfigError("retry", "nothing", "name what to retry: failed trials, censored cells, or both")
    if isinstance(budget_factor, bool) or not isinstance(budget_factor, (int, float)) or not 1 < budget_factor <= 16:
        raise ConfigError("budget_factor", budget_factor, "must be a number in (1, 16]: the censored cells' "
                                                          "new cap and budget as a multiple of the old")
    parent = runner._open_study(study)
    spec = StudySpec.from_dict(runner.tracker.study_spec(parent))
    exp_id, parent_id = parent.info.experiment_id, parent.info.run_id
    runs = runner.tracker.trial_runs(exp_id, parent_id)
    by_run = {r.info.run_id: r for r in runs}
    records = in_spec(spec, build_records(runs, runner.ledger.leases(study), runner.tracker))
    # A trial retried before is retried through its newest retry: ``{base}.retry{k}``.
    def split(trial_id: str) -> tuple[str, int]:
        base, _, k = trial_id.partition(".retry")
        return base, int(k) if k.isdigit() else 0

    newest: dict[str, int] = {}
    for r in records:
        base, k = split(r.trial_id)
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
    started = []
    now = time.time()
    for r, factor, why in chosen:
        base, k = split(r.trial_id)
        if k != newest[base]:  # an older attempt of a trial retried already
            continue
        old = trial_spec(by_run[r.run_id])
        max_steps = old.max_steps if old.max_steps is None or factor == 1 else int(math.ceil(factor * old.max_steps))
        max_tokens = old.max_tokens if factor == 1 else int(factor * old.max_tokens)
        config = TrainConfig.from_dict({**old.train_config, "max_tokens": max_tokens, "max_steps": max_steps})
        ts = dataclasses.replace(old, trial_id=f"{base}.retry{k + 1}", max_tokens=max_tokens, max_steps=max_steps,
                                 train_config=config.to_dict())
        if runner._start(ts, exp_id, parent_id):
            run = runner.tracker.find_trial(exp_id, ts.trial_id)
            if run is not None:
                runner.tracker.set_tags(run.info.run_id, {"retry_of": r.trial_id, "retry_reason": why[:250],
                                                        "retried_by": author, "retried_s": f"{now:.3f}"})
            started.append(ts.trial_id)
    if started and parent.data.tags.get("status") == "done":
        runner.tracker.reopen_study(parent_id)
    runner.advance(study)
    return started
