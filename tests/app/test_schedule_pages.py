"""Issue 45 on the pages: a ``schedule`` study that really ran (trained in this process on the test
token store and a real MLflow store by the workers' own code, as ``tests/workers/test_schedule_study.py``)
drawn by the pure builders of :mod:`app.schedule_charts` and on the Curves and Scaling laws pages
through AppTest: S(B) per schedule side by side, B_noise and B* with their intervals, and WSD's
classical and revised E(S) fits with the comparison ``cbs fit --es`` prints.

One study serves every check (its runs are the cost): constant+EWA and WSD from the same stable runs,
B = 4, 8, 16 and two seeds, so that WSD has six (B, seed) points: enough for both E(S) forms' AICc
(n > k + 1 with k = 3) and leave-one-out errors."""

from __future__ import annotations

import json
import math

import numpy as np

from cbscore.study import StudySpec
from tests.workers.conftest import DATA, mlflow_template, mlflow_uri, token_store, worker_env  # noqa: F401


def _spec(name: str) -> StudySpec:
    """tiny-0.1M at T = 16, D = 2,048 tokens, B = 4, 8, 16, one rate, seeds 0 and 1; horizons D/2 to 4D
    (ratio 2): per (B, seed) one stable run of 4D and four WSD decay branches from its snapshots."""
    return StudySpec.from_dict(dict(
        name=name, kind="schedule", models=["tiny-0.1M"], tokens=[2048], context_tokens=16, batch_sizes=[4, 8, 16],
        seeds=[0, 1], b_ref=4, warmup_fraction=0.1, eval_windows=16, search={"kind": "grid", "lrs": [0.01]},
        data=dict(DATA), decay={"schedules": ["constant_ewa", "wsd"], "horizon_low": 0.5, "horizon_high": 4.0,
                                "wsd_ratio": 2.0, "cosine_ratio": 2.0}))


def _figure(at, i: int) -> dict:
    return json.loads(at.get("plotly_chart")[i].proto.spec)


def test_a_schedule_study_that_ran_is_drawn_per_schedule_on_the_curves_and_scaling_pages(
        app_test, worker_env, token_store):  # noqa: F811
    from app import schedule_charts
    from cbscore.analysis import es_points, fit_wsd_es
    from cbscore.analysis._wsd_fit import classical_e, quadratic_e
    from tests.workers.test_extend_retry import drain
    from workers.query import api
    from workers.studies.local_study import delete_study_artifacts

    name = "schpage"
    api.launch_study(_spec(name))
    drain(name)
    assert api.study_status(name).status == "done"
    fit = api.study_schedule_fit(name, bootstrap=200)
    assert list(fit.schedules) == ["constant_ewa", "wsd"]
    wsd = fit.schedules["wsd"]

    # ---- the pure builders, against the readout they are handed
    steps = schedule_charts.steps_figure(fit)
    for schedule, entry in fit.schedules.items():
        points = [p for p in entry.points if p.steps is not None]
        [marks] = [t for t in steps.data if t.name == schedule]
        assert list(marks.x) == [p.batch_size for p in points] and list(marks.y) == [p.steps for p in points]
        if entry.fit is not None:
            f = entry.fit
            [line] = [t for t in steps.data if t.name == f"{schedule} fit"]
            assert np.allclose(line.y, f.s_min_steps + f.b_steps_sequences / np.asarray(line.x))  # S(B) = S_min + b/B
    rows = {r["schedule"]: r for r in schedule_charts.fit_rows(fit)}
    assert set(rows) == {"constant_ewa", "wsd"}
    for schedule, entry in fit.schedules.items():
        assert rows[schedule]["target (nats)"] == entry.target_loss_nats and rows[schedule]["runs"] == len(entry.runs)
        if entry.fit is not None:
            assert rows[schedule]["B*"] == entry.fit.cbs and rows[schedule]["B_noise"] == entry.fit.b_noise
    # WSD's E(S): the same points and fit as `cbs fit --es` (es_points on its rows, fit_wsd_es)
    b, s = schedule_charts.es_points_of(wsd)
    assert (b, s) == next(iter(es_points([r.to_json_dict() for r in wsd.runs]).values()))
    assert len(s) == 6, wsd.runs  # every (B, seed) reached its target at some horizon
    es = wsd.es_fit
    assert es.to_dict() == fit_wsd_es(b, s).to_dict()
    assert es.classical.aicc is not None and es.quadratic.aicc is not None
    figure = schedule_charts.es_figure(b, s, es)
    [points] = [t for t in figure.data if t.name == "WSD runs"]
    assert np.allclose(points.y, np.asarray(b) * np.asarray(s))  # E = B·S
    [classical] = [t for t in figure.data if t.name.startswith("classical")]
    assert np.allclose(classical.y, classical_e(classical.x, **es.classical.params))
    [revised] = [t for t in figure.data if t.name.startswith("revised")]
    assert np.allclose(revised.y, quadratic_e(revised.x, **es.quadratic.params))
    by_form = {r["form"].split(" ")[0]: r for r in schedule_charts.es_rows(es)}
    assert by_form["classical"]["AICc"] == es.classical.aicc and by_form["classical"]["B_noise"] == es.b_noise
    assert by_form["revised,"]["B_opt"] == es.b_opt and by_form["revised,"]["B_min"] == es.b_min
    assert es.reason in schedule_charts.es_verdict(es)

    # ---- the pages, on the study's own readout (at the pages' bootstrap)
    app_test.run()
    app_test.switch_page("app_pages/curves.py").run()
    assert not app_test.exception, app_test.exception
    assert not app_test.error, [e.value for e in app_test.error]
    page_fit = api.study_schedule_fit(name, bootstrap=1000)
    drawn = {t["name"]: t for t in _figure(app_test, 0)["data"]}
    for schedule, entry in page_fit.schedules.items():
        assert drawn[schedule]["y"] == [p.steps for p in entry.points if p.steps is not None]
    table = app_test.dataframe[0].value
    assert list(table["schedule"]) == ["constant_ewa", "wsd"]
    for schedule, entry in page_fit.schedules.items():
        row = table[table["schedule"] == schedule].iloc[0]
        assert row["target (nats)"] == entry.target_loss_nats
        if entry.fit is not None and entry.fit.cbs is not None:
            assert math.isclose(row["B*"], entry.fit.cbs)

    app_test.switch_page("app_pages/scaling.py").run()
    assert not app_test.exception, app_test.exception
    assert not app_test.error, [e.value for e in app_test.error]
    subheaders = [h.value for h in app_test.subheader]
    assert "E(S) under WSD: the classical and the revised fit" in subheaders
    es_table = app_test.dataframe[1].value
    assert math.isclose(es_table.iloc[0]["AICc"], page_fit.schedules["wsd"].es_fit.classical.aicc)
    assert any(page_fit.schedules["wsd"].es_fit.reason in m.value for m in app_test.markdown)
    es_drawn = _figure(app_test, 1)
    assert {t["name"] for t in es_drawn["data"]} >= {"WSD runs", "E_min at S_opt"}
    assert delete_study_artifacts(name)
