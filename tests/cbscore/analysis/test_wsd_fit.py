"""The E(S) fits of cbscore.analysis._wsd_fit on curves with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cbscore.analysis._wsd_fit import fit_wsd_es, quadratic_e
from cbscore.errors import ConfigError


def test_a_classical_curve_gives_back_b_noise_and_prefers_the_classical_form():
    # S(B) = 100 + 3000/B: S_min = 100, E_min = 3000 sequences, B_noise = 30
    b = np.array([4, 8, 16, 32, 64, 128, 256], dtype=float)
    s = 100 + 3000 / b
    fit = fit_wsd_es(b, s)
    assert fit.classical.params["s_min"] == pytest.approx(100, rel=1e-6)
    assert fit.b_noise == pytest.approx(30, rel=1e-6)
    assert fit.classical.rss < 1e-12 and fit.better == "classical"


def test_a_quadratic_curve_gives_back_b_opt_and_b_min():
    # E(S) = 0.05·(S − 200)² + 4000: E_min = 4000 at S_opt = 200, so B_opt = 20;
    # E/S is least at S* = √(200² + 4000/0.05) = √120000, B_min = 2·0.05·(S* − 200)
    s = np.array([120, 150, 180, 200, 230, 280, 340, 400], dtype=float)
    e = quadratic_e(s, 0.05, 200, 4000)
    fit = fit_wsd_es(e / s, s)
    assert fit.quadratic.params["s_opt"] == pytest.approx(200, rel=1e-4)
    assert fit.b_opt == pytest.approx(20, rel=1e-4)
    assert fit.b_min == pytest.approx(0.1 * (math.sqrt(120000) - 200), rel=1e-4)
    assert min(e / s) >= fit.b_min * (1 - 1e-9)  # no measured batch below B_min
    assert fit.better == "quadratic" and fit.quadratic.loo_rmse < fit.classical.loo_rmse


def test_four_points_leave_the_comparison_undecided():
    b = np.array([4, 8, 16, 32], dtype=float)
    fit = fit_wsd_es(b, 100 + 3000 / b)
    assert fit.better == "undecided" and "AICc" in fit.reason and fit.b_noise == pytest.approx(30, rel=1e-6)


def test_bad_points_are_refused():
    with pytest.raises(ConfigError, match="points"):
        fit_wsd_es([4, 8], [10, -1])


def test_cbs_fit_es_reads_each_b_and_seeds_fewest_steps(tmp_path, capsys):
    from cbs import main as cbs_main
    from cbscore.analysis import es_points

    # two rates per (B, seed): the fewer steps is the point; S = 100 + 3000/B exactly at the best rate
    lines = ["setting,batch_size,steps,seed,lr,outcome"]
    for b in (4, 8, 16, 32, 64, 128):
        for seed in (0, 1):
            lines += [f"wsd,{b},{100 + 3000 / b},{seed},0.01,reached", f"wsd,{b},{2 * (100 + 3000 / b)},{seed},0.02,reached",
                      f"wsd,{b},,{seed},0.04,diverged"]
    path = tmp_path / "steps.csv"
    path.write_text("\n".join(lines) + "\n")
    from cbscore.analysis import read_steps_csv

    [(b, s)] = es_points(read_steps_csv(str(path))).values()
    assert sorted(zip(b, s)) == sorted((float(x), 100 + 3000 / x) for x in (4, 8, 16, 32, 64, 128) for _ in (0, 1))
    assert cbs_main(["fit", str(path), "--b-ref", "4", "--bootstrap", "0", "--es"]) == 0
    out = capsys.readouterr().out
    assert "E(S) wsd: classical (McCandlish et al. 2018) B_noise = 30;" in out and "better: classical" in out


def test_a_vertex_inside_the_grid_carries_no_note_and_one_at_its_end_says_so():
    """B_opt nearer (in ln B) the lowest batch size measured than any other has data on one side only:
    the note says the minimum is at the grid's end; inside, no note; past the steps, an extrapolation."""
    s = np.array([120, 150, 180, 200, 230, 280, 340, 400], dtype=float)
    inside = fit_wsd_es(quadratic_e(s, 0.05, 200, 4000) / s, s)
    assert inside.notes == ()
    # S_opt at the largest S measured: the smallest batch size is B_opt itself
    s = np.array([400, 330, 280, 240, 210, 190], dtype=float)
    e = quadratic_e(s, 0.05, 400, 4000)
    end = fit_wsd_es(e / s, s)
    assert end.b_opt == pytest.approx(10, rel=1e-4) and min(e / s) == pytest.approx(10)
    (note,) = end.notes
    assert note.startswith("B_opt = 10 sits at the lowest batch size measured (nearer B = 10 than any other)")
    assert note.endswith("measuring B_opt needs smaller batch sizes")
    # S_opt past every S measured: the older note, not both
    beyond = fit_wsd_es(quadratic_e(s, 0.05, 500, 4000) / s, s)
    assert len(beyond.notes) == 1 and "B_opt is an extrapolation" in beyond.notes[0]


def test_the_committed_cosine_runs_e_s_minimum_is_named_at_the_grids_end(capsys):
    """Known answer from a real run (docs/results/ablation-schedule/cosine-4d/README.md): the revised
    form fits cosine to 4·D better, but its B_opt (4.1) sits at B = 4, the lowest batch size run."""
    from pathlib import Path

    from cbs import main

    table = Path(__file__).parents[3] / "docs/results/ablation-schedule/cosine-4d/steps.csv"
    assert main(["fit", str(table), "--b-ref", "4", "--overhead", "0.2", "--es"]) == 0
    out = capsys.readouterr().out
    assert "better: quadratic" in out
    assert "note: B_opt = 4.1" in out and "sits at the lowest batch size measured (nearer B = 4 than any other)" in out
