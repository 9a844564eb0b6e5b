"""Chart builders on known data: traces, log₂ axes, and where B* lands."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app import charts
from app.charts import LossCurve, PowerLaw, ScalingPoint, SettingCurve, StepsPoint

# S(B) = 1000 + 256000/B: S_min = 1000 steps, B_noise = 256 sequences.
A, BB = 1000.0, 256_000.0


def _curve(**overrides) -> SettingCurve:
    points = tuple(StepsPoint(batch_size=b, steps=A + BB / b, hover=f"B={b}", run_id=f"run{b}")
                   for b in (64, 128, 256, 512, 1024))
    fields = dict(label="s1", points=points + (StepsPoint(batch_size=2048, steps=5000.0, censored=True),),
                  fit_a=A, fit_b=BB, b_star=358.4, b_star_low=300.0, b_star_high=420.0)
    fields.update(overrides)
    return SettingCurve(**fields)


def _trace(fig, name):
    matches = [t for t in fig.data if t.name == name]
    assert matches, f"no trace named {name!r} in {[t.name for t in fig.data]}"
    return matches[0]


def test_powers_of_two_span_the_values():
    assert charts.powers_of_two(100, 1000) == [64, 128, 256, 512, 1024]
    assert charts.powers_of_two(256, 256) == [256]
    assert charts.powers_of_two(0, 10) == []


def test_compact_labels():
    assert charts.compact(2048) == "2048"
    assert charts.compact(65536) == "65.5k"
    assert charts.compact(2_000_000) == "2M"
    assert charts.compact(0.5) == "0.5"


def test_steps_figure_axes_are_log_base_two():
    fig = charts.steps_to_target_figure([_curve()], b_ref=256, overhead=0.2)
    for axis in (fig.layout.xaxis, fig.layout.yaxis):
        assert axis.type == "log"
        ticks = list(axis.tickvals)
        assert ticks and all(math.log2(t) == int(math.log2(t)) for t in ticks)
    # x spans the measured batch sizes (64..2048) and B_ref, with a margin.
    lo, hi = fig.layout.xaxis.range
    assert 10**lo < 64 and 10**hi > 2048


def test_steps_figure_draws_points_fit_linear_band_and_b_star():
    fig = charts.steps_to_target_figure([_curve()], b_ref=256, overhead=0.2)
    points = _trace(fig, "s1")
    assert list(points.x) == [64, 128, 256, 512, 1024]
    np.testing.assert_allclose(points.y, [A + BB / b for b in (64, 128, 256, 512, 1024)])
    assert list(points.customdata)[0] == "run64"
    censored = _trace(fig, "s1 (censored)")
    assert list(censored.x) == [2048] and censored.marker.symbol == "triangle-up-open"

    fit = _trace(fig, "s1: fit a + b/B")
    np.testing.assert_allclose(fit.y, A + BB / np.asarray(fit.x))

    # Linear scaling from B_ref: S_lin(B) = S(B_ref)·B_ref/B with S(B_ref) from the fit = 2000.
    linear = _trace(fig, "s1: linear from B_ref")
    np.testing.assert_allclose(np.asarray(linear.y) * np.asarray(linear.x), 2000.0 * 256)
    band = [t for t in fig.data if t.fill == "tonexty"]
    assert len(band) == 1
    np.testing.assert_allclose(np.asarray(band[0].y) * np.asarray(band[0].x), 1.2 * 2000.0 * 256)

    star = _trace(fig, "s1: B*")
    assert list(star.x) == [358.4]
    assert star.y[0] == pytest.approx(A + BB / 358.4)
    assert star.error_x.array[0] == pytest.approx(420.0 - 358.4)
    assert star.error_x.arrayminus[0] == pytest.approx(358.4 - 300.0)


def test_b_star_on_fitted_curve_meets_the_overhead_line():
    """With the closed form B* = (1 + r)·B_ref + r·B_noise the star sits on the (1 + r) line."""
    b_star = 1.2 * 256 + 0.2 * BB / A
    fig = charts.steps_to_target_figure([_curve(b_star=b_star)], b_ref=256, overhead=0.2)
    star = _trace(fig, "s1: B*")
    assert star.y[0] == pytest.approx(1.2 * (A + BB / 256) * 256 / b_star)


def test_normalized_view_divides_by_fitted_reference_steps():
    fig = charts.steps_to_target_figure([_curve()], b_ref=256, overhead=0.2, normalized=True)
    points = _trace(fig, "s1")
    np.testing.assert_allclose(points.y, [(A + BB / b) / 2000.0 for b in (64, 128, 256, 512, 1024)])
    shared = _trace(fig, "linear scaling from B_ref = 256")
    np.testing.assert_allclose(np.asarray(shared.y) * np.asarray(shared.x), 256.0)
    assert fig.layout.yaxis.title.text.startswith("S(B) / S(B_ref)")


def test_setting_without_fit_shows_points_only_and_is_left_out_of_normalized_view():
    curve = _curve(fit_a=None, fit_b=None, b_star=None, b_star_low=None, b_star_high=None)
    fig = charts.steps_to_target_figure([curve], b_ref=256, overhead=0.2)
    assert {t.name for t in fig.data} == {"s1", "s1 (censored)"}
    fig = charts.steps_to_target_figure([curve], b_ref=256, overhead=0.2, normalized=True)
    assert "s1" not in {t.name for t in fig.data}


def test_scaling_figure_draws_fit_and_published_laws():
    fit = PowerLaw(label="fit", coef=100.0, exponent=0.5)
    paper = PowerLaw(label="paper", coef=93.20, exponent=0.47)
    pts = [ScalingPoint(x=n, b_star=100.0 * n**0.5, low=90.0 * n**0.5, high=110.0 * n**0.5, label=f"N={n}")
           for n in (1.0, 4.0, 16.0)]
    fig = charts.scaling_law_figure(pts, fit=fit, references=[paper], x_title="N (millions)")
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    law = _trace(fig, "fit")
    np.testing.assert_allclose(law.y, 100.0 * np.asarray(law.x) ** 0.5)
    ref = _trace(fig, "paper")
    np.testing.assert_allclose(ref.y, 93.20 * np.asarray(ref.x) ** 0.47)
    assert ref.line.dash == "dash"
    marks = _trace(fig, "B* of each setting")
    np.testing.assert_allclose(marks.y, [100.0, 200.0, 400.0])
    np.testing.assert_allclose(marks.error_y.array, [10.0, 20.0, 40.0])


def test_loss_curve_has_target_line():
    fig = charts.loss_curve_figure([LossCurve(label="t1", tokens=(1e6, 2e6), losses=(5.0, 4.0))], target_loss=4.2)
    assert list(fig.data[0].y) == [5.0, 4.0]
    lines = [s for s in fig.layout.shapes if s.type == "line"]
    assert len(lines) == 1 and lines[0].y0 == pytest.approx(4.2) and lines[0].y1 == pytest.approx(4.2)


def test_cell_grid_colours_cells_by_state():
    fig = charts.cell_grid_figure(["s1", "s2"], [64, 128], {("s1", 64): "reached", ("s2", 128): "running"})
    heat = fig.data[0]
    assert [list(r) for r in heat.text] == [["reached", "planned"], ["planned", "running"]]
    names = list(charts.STATE_COLORS)
    n = len(names)
    # Each cell's z sits in the middle of its state's band of the discrete colour scale.
    assert heat.z[0][0] == names.index("reached") + 0.5 and heat.zmax == n
    k = names.index("running")
    assert heat.z[1][1] == k + 0.5
    assert [tuple(e) for e in heat.colorscale[2 * k:2 * k + 2]] == [(k / n, charts.STATE_COLORS["running"]),
                                                                   ((k + 1) / n, charts.STATE_COLORS["running"])]


def test_scaling_figure_draws_one_line_per_fitted_group():
    pts = [ScalingPoint(x=x, b_star=100.0 * x**0.5) for x in (10.0, 40.0)]
    fits = [PowerLaw(label="at fixed D = 2B", coef=100.0, exponent=0.5),
            PowerLaw(label="at fixed D = 8B", coef=150.0, exponent=0.4)]
    fig = charts.scaling_law_figure(pts, fits=fits, x_title="N (millions)")
    lines = [_trace(fig, f.label) for f in fits]
    for line, law in zip(lines, fits):
        np.testing.assert_allclose(line.y, law.coef * np.asarray(line.x) ** law.exponent)
    assert lines[0].line.color != lines[1].line.color


def test_every_figure_is_drawn_on_plotly_white_with_the_pages_font():
    import json

    import plotly.graph_objects as go
    import streamlit.elements.plotly_chart  # noqa: F401 (Streamlit makes its own template plotly's default)

    from app import gns_charts

    figures = [charts.steps_to_target_figure([_curve()], b_ref=256, overhead=0.2),
               gns_charts.forecast_overlay_figure(gns_charts.ForecastOverlay(
                   label="x", measured=((8, 100.0), (16, 60.0)), b_run=8, target_step=100.0, b_hat=16.0,
                   factor=None, factor_ci=None))]
    white = json.loads(go.Figure(layout=dict(template="plotly_white")).to_json())["layout"]["template"]
    for fig in figures:
        layout = json.loads(fig.to_json())["layout"]
        assert layout["template"] == white
        assert layout["font"]["family"].startswith("Inter")


def test_a_trace_given_as_a_dict_draws_what_a_go_scatter_draws():
    """charts.scatter hands plotly the trace as a dict (validated once, as the figure adds it): the
    figure is the one ``go.Scatter`` traces give, arrays, nested styles and numpy grids alike."""
    import plotly.graph_objects as go

    props = [dict(x=[1000.0, 2000.0], y=[4.2, 4.1], mode="lines+markers", name="lr 0.01",
                  line=dict(color=charts.PALETTE[1], width=2), marker=dict(size=5),
                  hovertemplate="%{x:.4s} tokens<extra>lr 0.01</extra>"),
             dict(x=np.geomspace(8, 2048, 5), y=np.linspace(1.0, 2.0, 5), fill="tonexty", line=dict(width=0),
                  fillcolor="rgba(0,114,178,0.12)", hoverinfo="skip", error_y=dict(type="data", array=[1, 2, 3, 4, 5]))]
    as_dicts, as_objects = go.Figure(), go.Figure()
    as_dicts.add_traces([charts.scatter(**p) for p in props])
    as_objects.add_traces([go.Scatter(**p) for p in props])
    assert as_dicts.to_json() == as_objects.to_json()
    assert charts.loss_curve_figure([LossCurve(label="a", tokens=(1.0, 2.0), losses=(4.0, 3.5))]).data[0].type == "scatter"


def test_style_sets_the_layout_plotly_s_updates_would_set():
    """_style sets the layout whole (validated once) where it updated it in place: the figure is
    the same, a builder's own axis settings, shapes and annotations kept, ``xaxis``/``yaxis`` as
    ``update_xaxes``/``update_yaxes`` merge them (only key order, and an empty title object, differ)."""
    import json

    import plotly.graph_objects as go

    def built(*, title, by_style):
        fig = go.Figure()
        fig.add_traces([charts.scatter(x=[1.0, 2.0], y=[3.0, 4.0], mode="lines", name="a")])
        fig.add_hline(y=3.5, line=dict(color="#D55E00", dash="dash"), annotation_text="target")
        fig.update_xaxes(gridcolor="#000000", range=[0, 1])  # a builder's own, set before _style
        x, y = charts._axis(title_text="tokens", type="log", range=[0, 3]), charts._axis(autorange="reversed")
        if by_style:
            return charts._style(fig, title=title, height=300, xaxis=x, yaxis=y)
        fig.update_xaxes(title_text="tokens", type="log", range=[0, 3])
        fig.update_yaxes(autorange="reversed")
        fig.layout.template = charts._TEMPLATE
        fig.update_layout(font=charts._FONT, height=300,
                          title=dict(text=title, x=0.0, xanchor="left", font=dict(size=15)) if title else None,
                          margin=dict(l=64, r=24, t=40 if title else 16, b=40),
                          legend=dict(orientation="h", yanchor="top", y=-0.16, xanchor="left", x=0.0,
                                      font=dict(size=12)),
                          hoverlabel=dict(font=dict(family=charts._FONT["family"], size=12)))
        return fig

    for title in ("s1", None):
        styled, updated = (json.loads(built(title=title, by_style=s).to_json()) for s in (True, False))
        if not title:
            assert updated["layout"].pop("title") == {} and "title" not in styled["layout"]
        assert styled == updated
        assert styled["layout"]["xaxis"]["gridcolor"] == "#000000" and styled["layout"]["shapes"]
