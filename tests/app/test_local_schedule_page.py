"""Issue 24 on the Local CBS page: *Launch the schedule* is disabled with the reason until the
curve is fitted, hands the study to the workers when clicked, and once the arms ran the page
tables them with the sentence on whether the warm-up matched the small-batch control. The
workers' reads are replaced by fits of known curves (``workers.studies.local_fit.local_readout`` on
records of known losses); the page, its builders and the readout are real."""

from __future__ import annotations

import math
from unittest import mock

import pandas as pd
import pytest

from app import local_charts, local_form
from cbscore.local import LocalStudyReadout
from cbscore.study import StudySpec
from tests.app.test_local_charts import records as branch_records
from tests.app.test_local_charts import spec as curve_spec
from tests.workers.test_local_warmup import _arm_record
from workers.query.api import StudySummary
from workers.studies.local_fit import local_readout

PAGE = "app_pages/local_cbs.py"
BUTTON = "local.launch_schedule"


def _summary() -> StudySummary:
    return StudySummary(name="loc", kind="local", created_s=0.0, status="done", counts={"finished": 7}, n_trials=7,
                        tokens_spent=0, b_ref=4, overhead=None, experiment_id="1", run_id="r", owner="local")


def _page(app_test, fit: LocalStudyReadout, spec: StudySpec):
    with mock.patch("workers.query.api.list_studies", return_value=[_summary()]), \
            mock.patch("workers.query.api.study_local_fit", return_value=fit), \
            mock.patch("workers.query.api.study_spec", return_value=spec):
        app_test.run()
        app_test.switch_page(PAGE).run()
    assert not app_test.exception, app_test.exception
    return app_test


def _fit(drop: str | None = None) -> LocalStudyReadout:
    recs, curves = branch_records()
    return local_readout(curve_spec(), [r for r in recs if r.trial_id != drop], lambda r: curves[r.trial_id])


def test_the_button_is_disabled_with_the_reason_until_every_branch_ended(app_test, empty_env):
    at = _page(app_test, _fit(drop="loc.t2048.k4.s0"), curve_spec())
    assert at.button(key=BUTTON).disabled
    assert any(c.value.startswith("Not yet: branches_pending: must be 0") for c in at.caption)


def test_the_button_launches_the_schedule_of_a_fitted_study(app_test, empty_env):
    at = _page(app_test, _fit(), curve_spec())
    assert not at.button(key=BUTTON).disabled
    with mock.patch("workers.query.api.list_studies", return_value=[_summary()]), \
            mock.patch("workers.query.api.study_local_fit", return_value=_fit()), \
            mock.patch("workers.query.api.study_spec", return_value=curve_spec()), \
            mock.patch("workers.query.api.study_owner", return_value="local"), \
            mock.patch("workers.query.api.launch_local_warmup", return_value=(None, ["local.warmup_run: ..."])) as launch:
        at.button(key=BUTTON).click().run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    (name,), kwargs = launch.call_args
    assert name == "loc" and "author" in kwargs
    assert [s.value for s in at.success] == ["Launched: local.warmup_run: ..."]


def test_the_arms_are_tabled_with_the_verdict(app_test, empty_env):
    sqrt2 = math.sqrt(2)
    spec = StudySpec.from_dict({**curve_spec().to_dict(), "local": {
        **curve_spec().local.to_dict(), "warmup_run": True, "warmup_schedule": [[1024, 8, sqrt2], [2048, 16, 2.0]]}})
    recs, curves = branch_records()
    recs += [_arm_record("warmup", 0, 5.004, 32, 4), _arm_record("control-small", 0, 5.0, 64, 4),
             _arm_record("control-large", 0, 5.2, 16, 16)]
    fit = local_readout(spec, recs, lambda r: curves.get(r.trial_id, []))
    at = _page(app_test, fit, spec)
    assert BUTTON not in [b.key for b in at.button]  # launched: the readout instead of the button
    rows = at.dataframe[1].value  # after the checkpoints' table
    assert list(rows["arm"]) == ["warm-up", "small-batch control", "large-batch control"]
    assert list(rows["steps"]) == ["32", "64", "16"] and list(rows["tokens"]) == ["4,096"] * 3
    assert list(rows["batch (sequences)"]) == ["4 → 16", "4", "16"]
    assert list(rows["final held-out loss"]) == pytest.approx([5.004, 5.0, 5.2])
    assert rows.equals(pd.DataFrame(local_charts.arms_rows(fit)))
    # one seed: the tolerance is ε = 0.01; +0.004 is within it
    assert [s.value for s in at.success] == [fit.arms.verdict]
    assert fit.arms.verdict.startswith("The warm-up matched the small-batch control's held-out loss (5.0040 "
                                             "against 5.0000 nats, difference +0.0040 within the tolerance 0.0100) in "
                                             "32 steps against 64 (50.0% fewer); the large-batch control ended at "
                                             "5.2000 nats (1 seed, equal tokens).")


def test_the_launch_preview_lists_the_arms_with_the_trainers_steps():
    spec = StudySpec.from_dict({**curve_spec().to_dict(), "local": {
        **curve_spec().local.to_dict(), "warmup_run": True, "warmup_schedule": [[1024, 8, math.sqrt(2)], [2048, 16, 2.0]]}})
    rows = {r["trial"]: r for r in local_form.local_rows(spec)}
    assert [(rows[f"loc.{role}.s0"]["B (sequences)"], rows[f"loc.{role}.s0"]["steps"])
            for role in ("warmup", "control-small", "control-large")] == [(4, 32), (4, 64), (16, 16)]
    assert rows["loc.t1024.k2.s0"]["steps"] == 512 // 128  # a branch: Δ in steps of k·B0·T
