"""The Theory page's chart builders (pure, no Streamlit) and the page itself through AppTest."""

from __future__ import annotations

import numpy as np
import pytest

from app import theory_charts
from cbscore.theory import Grid, Problem, run_theory

PAGE_TAUS = tuple(1.0 - 10.0**-x for x in range(1, 7))  # app/app_pages/theory.py


@pytest.fixture(scope="module")
def result():
    grid = Grid(max_steps=300_000)  # the batch sizes and step sizes, at d = 64
    return run_theory(Problem(a=1.5, b=2.5, sigma2=1.0, d=64), grid, b_ref=4, d_samples=(1e3, 1e4, 1e5))


def test_steps_figure_draws_f_of_b_per_d_with_linear_scaling_and_the_empirical_b_star(result):
    fig = theory_charts.steps_per_d_figure(result)
    named = [t for t in fig.data if t.name and t.name.startswith("D = ")]
    assert [t.name for t in named] == ["D = 1e+03", "D = 1e+04", "D = 1e+05"]
    for trace, setting in zip(named, result.settings):
        assert list(trace.y) == [s for s in setting.steps if s is not None]
    stars = [t for t in fig.data if t.marker.symbol == "star"]
    assert [t.x[0] for t in stars] == pytest.approx([s.cbs_empirical for s in result.settings])
    # The dotted line is linear scaling through f(B_ref): f(B_ref)·B_ref/B.
    dotted = [t for t in fig.data if t.line.dash == "dot"][0]
    f_ref = dict(zip(result.settings[0].batch_sizes, result.settings[0].steps))[4]
    assert dotted.y == pytest.approx(f_ref * 4 / np.asarray(dotted.x))


def test_law_figure_draws_the_fitted_laws_and_the_theory_slopes(result):
    fig = theory_charts.law_figure(result)
    points = {t.legendgroup: t for t in fig.data if t.mode == "markers"}
    assert list(points["cbs_empirical"].y) == pytest.approx([s.cbs_empirical for s in result.settings])
    theory = [t for t in fig.data if t.name and t.name.startswith("theory")]
    assert len(theory) == 2
    for t, which in zip(theory, ("averaged", "last")):
        slope = np.diff(np.log(t.y)) / np.diff(np.log(t.x))
        assert slope == pytest.approx(result.theory[which])


def test_loss_curves_cross_the_target_at_the_reported_steps(result):
    setting = result.settings[1]
    fig = theory_charts.loss_curves_figure(result, setting.d_samples)
    assert len(fig.data) == sum(s is not None for s in setting.steps)
    for steps, best, curves in zip(setting.steps, setting.best, result.run.curves):
        if best is not None:
            curve = curves[best]
            assert float(curve(steps)) <= setting.target < float(curve(steps - 1))
    assert fig.layout.shapes[0].y0 == pytest.approx(setting.target)


def test_summary_rows_carry_every_data_size(result):
    rows = theory_charts.summary_rows(result)
    assert [r["D (samples)"] for r in rows] == [1e3, 1e4, 1e5]
    assert [r["B* (points)"] for r in rows] == [s.cbs_empirical for s in result.settings]
    assert rows[0]["f(B_ref=4)"] == pytest.approx(250, abs=1)


def test_theory_page_renders_its_charts(app_test, empty_env):
    at = app_test
    at.run()
    at.switch_page("app_pages/theory.py")
    at.run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    assert len(at.get("plotly_chart")) == 3
    table = [d.value for d in at.dataframe if "B* (points)" in d.value.columns][0]
    # The default is the paper's averaged SGD (the uniform average of the iterates; issue 39).
    from cbscore.theory import Grid, Problem, run_theory

    want = run_theory(Problem(a=1.5, b=2.5, sigma2=1.0, d=512), Grid(iterate="uniform", taus=PAGE_TAUS), b_ref=4,
                      overhead=0.2)
    at_1e4 = [s for s in want.settings if s.d_samples == 10_000][0]
    assert table.set_index("D (samples)").loc[10_000, "B* (points)"] == pytest.approx(at_1e4.cbs_empirical, rel=1e-9)
    (line,) = [m.value for m in at.markdown if "On this grid B_noise" in m.value]
    assert f"D^{want.laws['b_noise'].exponent:.3f}" in line and "D^0.400" in line and "averaged SGD" in line


def test_moving_the_theory_sliders_recomputes_the_table_for_the_new_model(app_test, empty_env):
    """The form's inputs reach the computation: a = 2, d = 64 and the last iterate give the
    table that ``run_theory`` gives for that model, not the default's."""
    from cbscore.theory import Grid, Problem, run_theory

    at = app_test
    at.run()
    at.switch_page("app_pages/theory.py")
    at.run()
    default = [d.value for d in at.dataframe if "B* (points)" in d.value.columns][0]
    at.slider(key="theory.a").set_value(2.0)
    at.select_slider(key="theory.d").set_value(64)
    at.radio(key="theory.iterate").set_value("last")
    at.button[0].click().run()  # the form's Compute button
    assert not at.exception, at.exception
    table = [d.value for d in at.dataframe if "B* (points)" in d.value.columns][0]
    want = run_theory(Problem(a=2.0, b=2.5, sigma2=1.0, d=64), Grid(iterate="last"), b_ref=4, overhead=0.2)
    assert list(table["B* (points)"]) == pytest.approx([s.cbs_empirical for s in want.settings], rel=1e-9)
    assert list(table["B* (points)"]) != pytest.approx(list(default["B* (points)"]), rel=0.01)
