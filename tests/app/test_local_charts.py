"""The local-CBS readout (``workers.studies.local_fit.local_readout``, pure) on branches whose losses are
known, and the Local CBS page's figures and table built from it (``app.local_charts``)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from app import local_charts
from cbscore.analysis import StepsRow, analyze_table
from cbscore.study import StudySpec, TrialRecord
from workers.studies.local_fit import local_readout

B0 = 4


def spec() -> StudySpec:
    """Checkpoints at 1,024 and 2,048 tokens, k ∈ {1, 2, 4}, D = 4,096 tokens, ε = 0.01."""
    return StudySpec.from_dict(dict(name="loc", kind="local", models=["tiny-0.1M"], tokens=[4096], context_tokens=16,
                                    local={"base_batch_size": B0, "checkpoint_count": 2, "multipliers": [1, 2, 4]}))


#: Smoothed training loss after Δ per (checkpoint, k): at 1,024 tokens k = 2 is 0.005 worse (within
#: ε = 0.01) and k = 4 0.05 worse; at 2,048 every k is within 0.004 (k* at the grid's top).
LOSSES = {(1024, 1): 5.0, (1024, 2): 5.005, (1024, 4): 5.05, (2048, 1): 4.5, (2048, 2): 4.502, (2048, 4): 4.504}


def records() -> tuple[list[TrialRecord], dict[str, list[float]]]:
    recs, curves = [], {}
    for (t, k), loss in LOSSES.items():
        tid = f"loc.t{t}.k{k}.s0"
        recs.append(TrialRecord(trial_id=tid, cell_id="c", setting_id="s", role="branch", batch_size=k * B0, lr=0.01,
                                status="finished", final_eval_loss=loss + 0.1, run_id=tid))
        curves[tid] = [loss + 0.3, loss + 0.1] + [loss] * 10  # the last 10% (one value) is the loss
    recs.append(TrialRecord(trial_id="loc.base.s0", cell_id="b", setting_id="s", role="base", batch_size=B0, lr=0.01,
                            status="finished", run_id="base"))
    return recs, curves


@pytest.fixture
def fit():
    recs, curves = records()
    return local_readout(spec(), recs, lambda r: curves[r.trial_id], {0: ([64.0, 128.0], [3.0, 5.0])})


def test_the_readout_applies_both_rules_at_every_checkpoint(fit):
    first, second = fit.checkpoints
    assert first.merrill.k_star == 2.0 and first.merrill.bracket == (8.0, 16.0)
    assert second.merrill.k_star == 4.0 and second.merrill.lower_bound
    # one seed, a flat window end (no spread): the noise-aware tolerance is its floor ε, on the held-out loss
    assert first.noise_aware.k_star == 2.0 and second.noise_aware.local_cbs == 16.0
    # B* doubles from t = 1,024 to 2,048: the power law through both points has exponent 1
    curve = fit.curve["merrill"]
    assert curve.exponent == pytest.approx(1.0) and curve.coef == pytest.approx(8 / 1024)
    assert curve.exponent_ci is None  # two checkpoints: no degrees of freedom left
    warm = fit.warmup["merrill"].plan
    assert warm.constant_steps == 4096 // 64 and warm.batch_schedule[0][1] == 2 * B0  # the first doubling
    assert warm.steps < warm.constant_steps and warm.steps_saved == warm.constant_steps - warm.steps


def test_a_diverged_multiplier_ends_the_grid_read_at_its_checkpoint():
    recs, curves = records()
    recs = [r if r.trial_id != "loc.t1024.k2.s0" else TrialRecord(**{**r.to_dict(), "status": "diverged"}) for r in recs]
    out = local_readout(spec(), recs, lambda r: curves[r.trial_id])
    first = out.checkpoints[0]
    assert first.multipliers == (1.0,) and first.merrill is None
    assert "k = 2: diverged; larger k are not read" in first.notes
    assert out.curve["merrill"] is None and out.notes[0].startswith("merrill: a power law over tokens needs")


def test_the_figure_draws_both_rules_with_brackets_and_fits_on_log_axes(fit):
    fig = local_charts.local_cbs_figure(fit)
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    traces = {t.name: t for t in fig.data}
    merrill = traces[local_charts.RULE_LABELS["merrill"]]
    assert list(merrill.x) == [1024.0, 2048.0] and list(merrill.y) == [8.0, 16.0]
    assert list(merrill.error_y.array) == [8.0, 0.0]  # up to the next k; none above the grid's top
    assert list(merrill.marker.symbol) == ["circle", "triangle-up"]  # the top of the grid: a lower bound
    line = next(t for n, t in traces.items() if n.startswith("merrill fit"))
    assert all(math.isclose(y, 8 / 1024 * x, rel_tol=1e-9) for x, y in zip(line.x, line.y))
    assert "warm-up batch (Merrill's curve)" in traces
    assert list(traces["base run's B_simple (seed 0)"].y) == [3.0, 5.0]


def test_the_table_and_the_branch_figure_say_what_the_readout_says(fit):
    rows = local_charts.readout_rows(fit)
    assert [r["Merrill B*"] for r in rows] == [8.0, 16.0]
    assert [r["Merrill bracket"] for r in rows] == ["[8, 16)", "≥ 16"]
    # one seed, no spread at the window's end: the floor ε decided; these branches logged no raw loss
    assert [r["noise-aware: noise decided"] for r in rows] == [False, False]
    assert [r["noise-aware (raw weights) B*"] for r in rows] == [None, None]
    fig = local_charts.branch_loss_figure(fit.checkpoints[0], epsilon=0.01)
    assert list(fig.data[0].y) == [pytest.approx(LOSSES[(1024, k)]) for k in (1, 2, 4)]
    assert local_charts.warmup_summary(fit).startswith("Start at B0 = 4; switch to 8 at")


def test_the_global_cbs_of_studies_of_the_same_model_and_data_is_drawn_at_their_d(fit):
    here = spec()
    same = StudySpec.from_dict(dict(name="glob", kind="custom", settings=[{"model": "tiny-0.1M", "tokens": 15000},
                                                                         {"model": "tiny-0.3M", "tokens": 15000}],
                                    batch_sizes=[4, 8], b_ref=4, context_tokens=16))
    other_t = same.replace(name="glob512", context_tokens=512)
    wanted = local_charts.comparable_settings(here, {"glob": same, "glob512": other_t, "loc": here})
    assert wanted == [("glob", "tiny-0.1M_D15K")]  # same model, T and data only; never a local study
    # The fit of "glob" (S = 1000·(1 + B_noise/B) exactly at each setting; B_noise 20 and 80).
    rows = [StepsRow(setting=name, batch_size=b, steps=1000.0 * (1 + noise / b), n_params=n, tokens=15000)
            for name, n, noise in (("tiny-0.1M_D15K", 1e5, 20.0), ("tiny-0.3M_D15K", 3e5, 80.0)) for b in (2, 4, 8, 16)]
    table = analyze_table(rows, b_ref=4, overhead=0.2, bootstrap=0)
    cbs = table.settings[0].cbs
    assert cbs == pytest.approx(1.2 * 4 + 0.2 * 20.0)  # (1 + r)·B_ref + r·B_noise
    points = local_charts.global_points({"glob": table}, wanted)
    assert points == [{"study": "glob", "setting": "tiny-0.1M_D15K", "tokens": 15000.0, "cbs": cbs}]
    fig = local_charts.local_cbs_figure(fit, global_cbs=points)
    star = next(t for t in fig.data if t.name == "global B* of glob (tiny-0.1M_D15K)")
    assert list(star.x) == [15000.0] and list(star.y) == [cbs] and star.marker.symbol == "star"
    # a setting the fit gave no B* is not drawn
    unfitted = dataclasses.replace(table, settings=(dataclasses.replace(table.settings[0], cbs=None),))
    assert local_charts.global_points({"glob": unfitted}, wanted) == []


def test_app_kinds_one_per_kind():
    """The app's side of the study kinds: one entry per kind, local CBS only for local, a schedule
    study's own pages and report files; an unknown kind refused naming the field and value."""
    import pytest

    from app.kinds import APP_KINDS, app_kind, has_local_cbs
    from cbscore.errors import ConfigError
    from cbscore.study.kinds import STUDY_KINDS

    assert tuple(APP_KINDS) == tuple(STUDY_KINDS)
    assert [k for k in APP_KINDS if has_local_cbs(k)] == ["local"] and not has_local_cbs("nonsense")
    assert [k for k, a in APP_KINDS.items() if a.curves and a.scaling and a.report_table and a.report_readout] \
        == ["schedule"]
    with pytest.raises(ConfigError) as e:
        app_kind("grid")
    assert (e.value.field, e.value.value) == ("kind", "grid")
