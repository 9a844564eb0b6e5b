"""The Curves page's flags (issue 19), without Streamlit."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from app import fit_view
from cbscore.analysis import analyze_table, read_steps_csv
from tests.cbscore.analysis.synthetic import curve

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"


def test_beyond_intervals_compares_the_gap_with_both_half_widths():
    assert fit_view.beyond_intervals(10.0, (5.0, 15.0), 13.0, (12.0, 14.0))  # 10 outside [12, 14]
    assert not fit_view.beyond_intervals(10.0, (8.0, 14.0), 13.0, (9.0, 15.0))  # each inside the other's
    assert fit_view.beyond_intervals(10.0, (9.0, 11.0), 12.0, None)  # one interval is enough
    assert not fit_view.beyond_intervals(10.0, None, 12.0, None)  # nothing to judge by
    assert not fit_view.beyond_intervals(10.0, (9.0, float("inf")), 30.0, None)


def test_a_reference_point_off_its_curve_is_flagged_and_a_clean_one_is_not():
    sizes = (2, 4, 8, 16, 32, 64, 128)
    rows = []
    for name, ref_factor in (("clean", 1.0), ("fast-ref", 0.6)):
        for b, s in zip(sizes, curve(sizes, 60.0, 15.0)):
            rows.append({"setting": name, "batch_size": b, "steps": s * (ref_factor if b == 2 else 1.0)})
    # A little noise elsewhere so that the intervals are not zero.
    for i, row in enumerate(rows):
        row["steps"] *= 1.0 + 0.01 * ((-1) ** i)
    table = analyze_table(rows, b_ref=2, bootstrap=300)
    flagged = {(setting, sentence.split(" ")[0]) for setting, sentence in fit_view.setting_flags(table)}
    assert ("fast-ref", "B*") in flagged
    assert not any(setting == "clean" and word == "B*" for setting, word in flagged)


def test_cells_with_the_best_rate_at_an_edge_are_flagged():
    point = SimpleNamespace(batch_size=8, lr_at_edge=True)
    setting = SimpleNamespace(setting="s", cbs=None, cbs_ci=None, cbs_empirical=None, points=(point,))
    flags = fit_view.setting_flags(SimpleNamespace(settings=(setting,)))
    assert flags == [("s", "best learning rate at an edge of the grid at B = 8: the optimum may lie beyond it")]
    # with its seeds, the flag says which edge and in how many of them (which way to extend the rates)
    point = SimpleNamespace(batch_size=8, lr_at_edge=True, lr_edge_seeds=((1, "highest"),), seed_cells=((0, 9.0), (1, 8.0)))
    setting = SimpleNamespace(setting="s", cbs=None, cbs_ci=None, cbs_empirical=None, points=(point,))
    assert fit_view.setting_flags(SimpleNamespace(settings=(setting,))) == [
        ("s", "best learning rate at an edge of the grid at B = 8 (the highest rate, 1 of 2 seeds): the optimum may "
              "lie beyond it")]


def test_the_committed_refits_flag_what_their_readmes_say():
    """docs/results/*/README.md: in `reproduce` no B* moves beyond its interval without B_ref and
    four of five fitted B* disagree with the empirical one; in `demo` tiny-0.1M at 50k does both."""
    flags = {}
    # (`reproduce` and `demo` here are the runs before issue 27's, kept under their earlier/ folders)
    for study, folder in (("reproduce", RESULTS / "reproduce" / "earlier"), ("demo", RESULTS / "demo" / "earlier")):
        table = analyze_table(read_steps_csv(folder / "steps.csv"), b_ref=2, bootstrap=1000)
        flags[study] = [(s, sentence.split(" ")[0]) for s, sentence in fit_view.setting_flags(table)]
    assert flags["reproduce"] == [(s, "fitted") for s in
                                  ("tiny-0.1M_D400K", "tiny-0.1M_D50K", "tiny-0.3M_D50K", "tiny-0.8M_D50K")]
    assert flags["demo"] == [("tiny-0.1M_D50K", "B*"), ("tiny-0.1M_D50K", "fitted"), ("tiny-0.3M_D50K", "fitted")]
