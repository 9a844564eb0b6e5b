"""Curves, Scaling laws, Studies and Import through AppTest, on a real MLflow store.

The seeded study follows ``S(B) = S_min·(1 + B_noise/B)`` exactly (tests/app/store_seed.py), so
the pages must show the known fit of every setting (``store_seed.expected_fit``): ``B* = (1 + r)·B_ref
+ r·B_noise`` where every cell reached, the seeded values' fit with the missed cell as a lower bound
where one did not, both within ``store_seed.REL`` (what the fit across rates and the reference
cell's target move the measured S(B) by).
"""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from tests.app.conftest import STUDY
from tests.app.store_seed import REL, expected_cbs, expected_fit


def _open(at, page: str):
    at.run()
    at.switch_page(f"app_pages/{page}.py")
    at.run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    return at


def _results(at):
    frames = [d.value for d in at.dataframe if "B* (seq)" in d.value.columns]
    assert frames, "no results table"
    return frames[0].set_index("setting")


def _array(value) -> np.ndarray:
    """A figure array from Plotly's JSON: a list, or a typed array ``{"dtype", "bdata"}``."""
    if isinstance(value, dict):
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
    return np.asarray(value, dtype=float)


def _figure(at, index: int = 0) -> dict:
    return json.loads(at.get("plotly_chart")[index].proto.spec)


def test_curves_page_shows_the_known_b_star_of_every_setting(app_test, app_env):
    at = _open(app_test, "curves")
    assert at.selectbox(key="curves.study").value == STUDY
    results = _results(at)
    *missed, last = app_env.values()
    # The last setting reached in every cell: its B* is the closed form, 89.6. The others' largest batch
    # size (256) is censored at its step cap, above the seeded curve; it stays in the fit as a lower
    # bound (held to the steps at B = 128: S never grows with B) and pulls B_noise down (64 → 52.5,
    # 128 → 89.8): B* 48.9 and 56.4, not 51.2 and 64.
    assert expected_fit(last).cbs(0.2, 32) == pytest.approx(expected_cbs(last, 32))
    assert [expected_fit(s).cbs(0.2, 32) for s in missed] == pytest.approx([48.9, 56.36], abs=0.05)
    for setting, seeded in app_env.items():
        assert results.loc[setting, "B* (seq)"] == pytest.approx(expected_fit(seeded).cbs(0.2, 32), rel=REL)
        low, high = results.loc[setting, "95% low"], results.loc[setting, "95% high"]
        assert low <= results.loc[setting, "B* (seq)"] <= high
    # The chart: one star per setting at B*, on log axes ticked at powers of two.
    fig = _figure(at)
    stars = {t["name"]: t["x"][0] for t in fig["data"] if t.get("name", "").endswith(": B*")}
    assert stars == pytest.approx({f"{s}: B*": expected_fit(v).cbs(0.2, 32) for s, v in app_env.items()}, rel=REL)
    assert fig["layout"]["xaxis"]["type"] == "log" and 32 in fig["layout"]["xaxis"]["tickvals"]
    # A point's hover says how S(B) was read: the fit across the cell's rates, its fewest steps beside.
    hovers = [h for t in fig["data"] for h in (t.get("hovertext") or []) if isinstance(h, str)]
    assert "<b>B = 8</b>: S = 720 steps<br>fit across learning rates of 3 reached / 3 trials (fewest: 720 steps)" in [
        h.split("<br>lr")[0] for h in hovers]
    # The batch size where no trial reached (B = 256 of the smaller settings, censored at its step
    # cap, and its two censored rates again when re-run at twice it) is a note with its lower bound.
    (notes,) = [e for e in at.expander if e.label.startswith("What the data cannot support")]
    first = next(iter(app_env))
    assert (f"setting '{first}': batch size 256: no trial reached the target (4 censored, 1 diverged, 0 other); "
            "censored at ≥ ") in notes.markdown[0].value


def test_curves_recompute_when_r_and_b_ref_change(app_test, app_env):
    at = _open(app_test, "curves")
    at.slider(key=f"{STUDY}.overhead").set_value(0.5).run()
    results = _results(at)
    for setting, seeded in app_env.items():
        assert results.loc[setting, "B* (seq)"] == pytest.approx(expected_fit(seeded).cbs(0.5, 32), rel=REL)
    at.select_slider(key=f"{STUDY}.b_ref").set_value(64).run()
    results = _results(at)
    for setting, seeded in app_env.items():
        assert results.loc[setting, "B* (seq)"] == pytest.approx(expected_fit(seeded).cbs(0.5, 64), rel=REL)


def test_scaling_page_fits_the_law_across_settings(app_test, app_env):
    at = _open(app_test, "scaling")
    laws = [d.value for d in at.dataframe if "α (N exponent)" in d.value.columns][0]
    # The law in N: least squares of log B* on log N over the three settings, weighted as a random-effects
    # meta-regression, 1/(v + τ²) with v a setting's bootstrap variance of log B* and τ² the settings'
    # scatter about the law beyond it. Here τ² ≈ 0.1 (the censored settings' B* are pulled off any
    # power law) dwarfs every v (≤ 0.012): the weights are within 7% of equal, and the law within
    # 1% of the ordinary least squares of the known B* (0.7% for both α and c).
    from tests.app.store_seed import spec_for

    settings = spec_for(STUDY).resolve_settings()
    n = np.array([s.n_params for s in settings], dtype=float)
    b_star = np.array([expected_fit(app_env[s.setting_id]).cbs(0.2, 32) for s in settings])
    slope, intercept = np.polyfit(np.log(n), np.log(b_star), 1)
    # The settings share a tokens-per-parameter ratio (D = 10·N): one Chinchilla law, nothing else.
    assert [d.tokens / d.n_params for d in settings] == [10.0, 10.0, 10.0]
    (row,) = [r for _, r in laws.iterrows()]
    assert row["law"] == "B* = c·N^α with D ∝ N (10 tokens per parameter)"
    assert row["settings"] == ", ".join(s.setting_id for s in settings)
    assert row["α (N exponent)"] == pytest.approx(slope, rel=0.02)
    assert row["c"] == pytest.approx(np.exp(intercept) * 1e6**slope, rel=0.02)  # N in millions
    slope = row["α (N exponent)"]  # the chart and the forecast draw the law of the table, exactly
    # The chart draws the fitted law of every group (here the one Chinchilla law, N in millions) and
    # the paper's Chinchilla law for comparison.
    fig = _figure(at, 0)
    (fitted,) = [t for t in fig["data"] if t.get("name", "").startswith("this data, with D ∝ N")]
    np.testing.assert_allclose(_array(fitted["y"]), row["c"] * _array(fitted["x"]) ** slope, rtol=1e-6)
    paper = [t for t in fig["data"] if t.get("name", "").startswith("paper, Chinchilla")][0]
    np.testing.assert_allclose(_array(paper["y"]), 93.20 * _array(paper["x"]) ** 0.47)
    # The forecast calculator answers from the fitted law in N when D is left empty.
    at.text_input(key=f"{STUDY}.forecast.n").set_value("3M")
    at.text_input(key=f"{STUDY}.forecast.d").set_value("")
    at.button(key=f"FormSubmitter:{STUDY}.forecast-Forecast").click().run()
    assert not at.error, [e.value for e in at.error]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Paper, Chinchilla law"] == f"{93.20 * 3**0.47:,.0f}"
    forecast = metrics["B* forecast (sequences)"]
    assert float(forecast.replace(",", "")) == pytest.approx(row["c"] * 3**slope, abs=0.5)


def test_studies_page_shows_cells_running_trials_and_workers(app_test, app_env):
    at = _open(app_test, "studies")
    assert at.selectbox(key="studies.study").value == STUDY
    metrics = {m.label: m.value for m in at.metric}
    # 54 in the grid and 4 re-runs (the censored rates of the two B = 256 cells where none reached)
    # ended; the planner also plans 6 it has not run: the reference cells' other two rates reach the
    # seeded target exactly at the end of their (1 + margin)·D, not the cell's fitted target (0.05%
    # lower), so they are run on to it.
    assert metrics["Running"] == "2" and metrics["Trials ended"] == "58 / 64"
    grid = _figure(at, 0)["data"][0]
    assert grid["type"] == "heatmap" and grid["y"] == list(app_env)
    # The two running trials sit in the first trial cells of the first setting.
    assert grid["text"][0] == ["running", "running", "finished", "reached", "reached", "censored"]
    assert [s.value for s in at.subheader if s.value.startswith("Running")] == ["Running trials (2)"]
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")[1:] if "studies.overlay" not in c.proto.id]
    curves = [c for c in charts if c["layout"]["yaxis"]["title"]["text"].startswith("held-out loss")]
    assert len(curves) == 2
    target_lines = [s for s in curves[0]["layout"]["shapes"] if s["type"] == "line"]
    # The target is the reference cell's loss at D over its rates (DESIGN.md §1): the vertex of the
    # parabola in ln η through the reference runs' losses at D (TARGET at the middle rate,
    # TARGET·SLOWER^DECAY at the others), 3.99952 since the rates' ln-spacings differ (1.20, 1.10).
    from tests.app.store_seed import DECAY, GNS_RATIO, SLOWER, TARGET, spec_for

    losses_at_d = TARGET * np.array([SLOWER**DECAY, 1.0, SLOWER**DECAY])
    c2, c1, c0 = np.polyfit(np.log(spec_for(STUDY).search.lrs), losses_at_d, 2)
    assert target_lines[0]["y0"] == pytest.approx(c0 - c1 * c1 / (4 * c2), rel=1e-6)
    assert target_lines[0]["y0"] < TARGET
    # each running trial's gradient noise scale against tokens (seeded: B_noise / 3 of its setting)
    noise = [c for c in charts if c["layout"]["yaxis"]["title"]["text"].startswith("B_simple")]
    assert len(noise) == 2
    first = next(iter(app_env.values()))
    ys = _array(noise[0]["data"][0]["y"])
    assert len(ys) > 0 and ys == pytest.approx([first.b_noise / GNS_RATIO] * len(ys))
    assert any("No worker answers" in i.value for i in at.info)


def test_pages_without_studies_say_what_to_do(app_test, empty_env):
    for page in ("studies", "curves", "scaling"):
        at = _open(app_test, page)
        assert any("No studies yet — launch one on the Launch page" in i.value for i in at.info), page


def test_unreachable_tracking_server_is_a_message_not_a_traceback(app_test, empty_env, monkeypatch):
    monkeypatch.setenv("CBS_TRACKING_URI", "http://127.0.0.1:9")
    at = _open(app_test, "curves")
    (warning,) = at.warning
    assert "The tracking store is unreachable at `http://127.0.0.1:9` — start it with `cbs tracking`" in warning.value


def test_import_page_fits_an_uploaded_table(app_test, empty_env):
    rows = ["setting,batch_size,steps,n_params,tokens"]
    for setting, n, b_noise in (("a", 1e8, 400.0), ("b", 4e8, 1600.0)):
        for b in (64, 128, 256, 512, 1024, 2048):
            rows.append(f"{setting},{b},{1000 * (1 + b_noise / b)},{n:.0f},{20 * n:.0f}")
    at = _open(app_test, "import_table")
    at.file_uploader(key="import.file").set_value(("published.csv", "\n".join(rows).encode(), "text/csv")).run()
    assert not at.exception and not at.error
    results = _results(at)
    assert results.loc["a", "B* (seq)"] == pytest.approx(1.2 * 256 + 0.2 * 400)
    assert results.loc["b", "B* (seq)"] == pytest.approx(1.2 * 256 + 0.2 * 1600)
    laws = [d.value for d in at.dataframe if "α (N exponent)" in d.value.columns][0]
    expected = np.log((1.2 * 256 + 0.2 * 1600) / (1.2 * 256 + 0.2 * 400)) / np.log(4.0)
    assert laws.iloc[0]["α (N exponent)"] == pytest.approx(expected)


def test_import_page_names_the_bad_cell(app_test, empty_env):
    at = _open(app_test, "import_table")
    csv = b"setting,batch_size,steps\na,64,1000\na,-128,500\n"
    at.file_uploader(key="import.file").set_value(("bad.csv", csv, "text/csv")).run()
    (error,) = at.error
    assert error.value == ("bad.csv line 3 (row 2), column 'batch_size': must be a positive integer, "
                           "but got '-128'.")


def test_cancel_buttons_call_the_workers(app_test, app_env):
    from unittest import mock

    at = _open(app_test, "studies")
    with mock.patch("workers.query.api.cancel_study", return_value=3) as cancel:
        at.button(key="studies.cancel_study").click().run()
    cancel.assert_called_once_with(STUDY)
    assert any(s.value == f"Cancelled {STUDY}: 3 unfinished trial(s) stopped." for s in at.success)
    running = sorted(r for r in at.selectbox(key="studies.cancel_pick").options)
    assert len(running) == 2 and all(r.endswith(".s1") for r in running)
    at.selectbox(key="studies.cancel_pick").set_value(running[0])
    with mock.patch("workers.query.api.cancel_trial", return_value="stopping") as cancel_trial:
        at.button(key="studies.cancel_one").click().run()
    cancel_trial.assert_called_once_with(running[0])


def test_curves_page_overlays_the_noise_scale_forecast_with_its_calibration(app_test, app_env):
    import re

    from tests.app.store_seed import GNS_RATIO, expected_calibration

    at = _open(app_test, "curves")
    # The seeded B_simple is B_noise / 3 in every setting, so B̂ = B_noise / 3. The last setting's fit
    # is its seeded curve (ratio 3); the others' censored B = 256 pulls their fitted B_noise down
    # below 3, so c, the geometric mean over settings, is 2.50, not 3.
    c = expected_calibration(app_env)
    assert c == pytest.approx(2.50, abs=0.005)
    factor = r"c = measured B_noise / B̂ = \*\*([0-9.]+)\*\*"
    (shown,) = [float(m) for t in at.markdown for m in re.findall(factor, t.value)]
    assert shown == pytest.approx(c, abs=0.005)  # 3 significant digits
    overlays = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    overlays = [f for f in overlays if any(t.get("name", "").startswith("calibrated: c·B̂") for t in f["data"])]
    assert len(overlays) == len(app_env)
    for fig in overlays:
        setting = fig["layout"]["title"]["text"]
        seeded = app_env[setting]
        measured = next(t for t in fig["data"] if t.get("name") == "measured S(B)")
        cal = next(t for t in fig["data"] if t.get("name", "").startswith("calibrated: c·B̂"))
        xs, ys = _array(cal["x"]), _array(cal["y"])
        # the calibrated forecast S_min·(1 + c·B̂/B) through the reference run's point (32, S(32))
        b_noise = c * seeded.b_noise / GNS_RATIO
        np.testing.assert_allclose(ys, seeded.steps(32) * (1 + b_noise / xs) / (1 + b_noise / 32), rtol=2 * REL)
        for b, s in zip(_array(measured["x"]), _array(measured["y"])):
            assert s == pytest.approx(seeded.steps(int(b)), rel=REL)


def test_scaling_page_plots_forecast_against_measured_b_star(app_test, app_env):
    from tests.app.store_seed import GNS_RATIO, expected_calibration

    at = _open(app_test, "scaling")
    table = [d.value for d in at.dataframe if "B̂ (seq)" in d.value.columns][0].set_index("setting")
    for setting, seeded in app_env.items():
        b_hat = seeded.b_noise / GNS_RATIO
        assert table.loc[setting, "B̂ (seq)"] == pytest.approx(b_hat)
        # measured B_noise / B̂: 3 where the fit is the seeded curve, less where a censored cell pulls it
        assert table.loc[setting, "ratio"] == pytest.approx(expected_fit(seeded).b_noise / b_hat, rel=REL)
    assert table["ratio"].iloc[-1] == pytest.approx(GNS_RATIO, rel=REL)
    fig = next(json.loads(c.proto.spec) for c in at.get("plotly_chart")
               if any(t.get("name") == "forecast = measured" for t in json.loads(c.proto.spec)["data"]))
    cal = next(t for t in fig["data"] if t.get("name") == "calibrated forecast (c·B̂)")
    # x: (1 + r)·B_ref + r·c·B̂ with the study's c; y: the fitted B*
    c = expected_calibration(app_env)
    assert _array(cal["x"]) == pytest.approx([1.2 * 32 + 0.2 * c * s.b_noise / GNS_RATIO for s in app_env.values()],
                                             rel=REL)
    assert _array(cal["y"]) == pytest.approx([expected_fit(s).cbs(0.2, 32) for s in app_env.values()], rel=REL)


def test_extend_and_retry_buttons_call_the_workers_and_a_bad_patch_is_refused_by_field(app_test, app_env):
    from unittest import mock

    at = _open(app_test, "studies")
    patch = at.text_area(key=f"studies.extend.{STUDY}")
    assert "batch_sizes:" in patch.value and "seeds:" in patch.value  # prefilled from the study's spec
    # refused for real (nothing is written before the rules pass): the message names the field
    patch.set_value("b_ref: 2\n").run()
    at.button(key="studies.extend_go").click().run()
    assert any(e.value.startswith("**Reference batch size B_ref** (`b_ref`): decides what the trials already run "
                                  "measured") and e.value.endswith("but got `2`.") for e in at.error), \
        [e.value for e in at.error]
    with mock.patch("workers.query.api.extend_study", return_value=(None, ["seeds: + [7]"])) as extend:
        at.text_area(key=f"studies.extend.{STUDY}").set_value("seeds: [0, 1, 7]\n").run()
        at.button(key="studies.extend_go").click().run()
    extend.assert_called_once_with(STUDY, "seeds: [0, 1, 7]\n", author=mock.ANY)
    assert any(s.value == "Extended: seeds: + [7]" for s in at.success)
    with mock.patch("workers.query.api.retry_study", return_value=[]) as retry:
        at.button(key="studies.retry_censored").click().run()
    retry.assert_called_once_with(STUDY, failed=False, censored=True, budget_factor=2.0, author=mock.ANY)
    assert any(i.value == "Nothing to run again: no censored cell." for i in at.info)


def test_the_studies_page_overlays_the_loss_curves_of_every_trial_of_a_setting(app_test, app_env):
    import json

    from workers.query import api

    def overlay(at):
        (fig,) = [json.loads(c.proto.spec) for c in at.get("plotly_chart") if "studies.overlay.chart" in c.proto.id]
        return [t for t in fig["data"] if t.get("mode") == "lines+markers"], fig

    at = _open(app_test, "studies")
    records = api.study_records(STUDY)
    traces, _ = overlay(at)  # every trial of every setting at once, each its own curve
    assert len(traces) == len(records) == 60
    setting = sorted({r.setting_id for r in records})[0]
    at.selectbox(key="studies.overlay.setting").set_value(setting).run()
    assert not at.exception, at.exception
    mine = [r for r in records if r.setting_id == setting]
    traces, fig = overlay(at)
    assert len(traces) == len(mine) > 10
    assert {t["name"] for t in traces} == {f"B {r.batch_size} · lr {r.lr:.3g} · s{r.seed}" for r in mine}
    assert all(len(t["x"]) > 0 for t in traces)  # training tokens on the x-axis
    assert [s for s in fig["layout"]["shapes"] if s["type"] == "line"]  # the setting's target
    at.multiselect(key="studies.overlay.outcomes").set_value(["diverged"]).run()
    traces, _ = overlay(at)
    assert len(traces) == len([r for r in mine if r.status == "diverged"]) > 0
