"""The Scaling page's ordering by D at fixed N, with and without the reference point (issue 27):
a rise that only the reference cell carries must read as not holding without it."""

from __future__ import annotations

import pytest

from app.fit_view import d_ordering, d_ordering_sentence
from cbscore.analysis import analyze_table

SIZES = (2, 4, 8, 16, 32)


def _rows(setting: str, n_params: int, tokens: int, s_min: float, b_noise: float, ref_factor: float = 1.0):
    """An exact ``S(B) = S_min·(1 + B_noise/B)`` (McCandlish et al. 2018, eq. 2.11), its B_ref = 2
    point multiplied by ``ref_factor`` (a handicapped reference cell)."""
    return [{"setting": setting, "batch_size": b, "n_params": n_params, "tokens": tokens, "context": 128,
             "steps": s_min * (1 + b_noise / b) * (ref_factor if b == 2 else 1.0), "outcome": "reached"}
            for b in SIZES]


def test_a_rise_that_rests_on_the_reference_point_does_not_hold_without_it():
    rows = (_rows("small-50k", 100_000, 50_000, 20.0, 10.0) + _rows("small-200k", 100_000, 200_000, 80.0, 20.0)
            + _rows("big-50k", 300_000, 50_000, 20.0, 10.0)
            + _rows("big-200k", 300_000, 200_000, 80.0, 9.0, ref_factor=1.6))
    table = analyze_table(rows, b_ref=2, overhead=0.2, bootstrap=0)
    small, big = d_ordering(table)
    assert (small["N"], small["D"], big["N"]) == (100_000, [50_000, 200_000], 300_000)
    assert small["B_noise"]["values"] == pytest.approx([10.0, 20.0], rel=1e-4)
    assert all(small[k]["rises"] for k in ("B*", "B* without B_ref", "B_noise", "B_noise without B_ref"))
    # The handicapped reference point lifts B_noise with it; the other four points alone give 9 < 10.
    assert big["B_noise"]["rises"] and big["B*"]["rises"]
    assert big["B_noise without B_ref"]["values"] == pytest.approx([10.0, 9.0], rel=1e-4)
    assert big["B* without B_ref"]["rises"] is False and big["B_noise without B_ref"]["rises"] is False
    assert "the ordering by D **does not hold without the reference point**" in d_ordering_sentence(big)
    assert "the ordering by D **holds without the reference point**" in d_ordering_sentence(small)
    assert "N = 300,000, D = 50k → 200k" in d_ordering_sentence(big)


def test_a_model_size_with_one_data_size_has_no_ordering():
    rows = _rows("a", 100_000, 50_000, 20.0, 10.0) + _rows("b", 300_000, 200_000, 80.0, 20.0)
    assert d_ordering(analyze_table(rows, b_ref=2, overhead=0.2, bootstrap=0)) == []


def test_the_import_page_says_whether_the_ordering_holds_without_the_reference_point(app_test, empty_env):
    rows = (_rows("big-50k", 300_000, 50_000, 20.0, 10.0)
            + _rows("big-200k", 300_000, 200_000, 80.0, 9.0, ref_factor=1.6))
    header = "setting,batch_size,steps,n_params,tokens,context,outcome"
    text = "\n".join([header] + [",".join(str(r[k]) for k in header.split(",")) for r in rows])
    at = app_test
    at.run()
    at.switch_page("app_pages/import_table.py")
    at.run()
    at.file_uploader(key="import.file").set_value(("held.csv", text.encode(), "text/csv")).run()
    at.select_slider(key="import-held.b_ref").set_value(2).run()  # the page's default is the median size
    assert not at.exception and not at.error, [e.value for e in at.error]
    (line,) = [w.value for w in at.warning if "Ordering" in w.value or "ordering by D" in w.value]
    assert "N = 300,000, D = 50k → 200k: the ordering by D **does not hold without the reference point**" in line


def test_the_committed_reproduction_on_the_import_page_shows_its_laws_and_verdict_beside_the_papers(app_test, empty_env):
    """Issue 27's "done when", re-read in issue 38: docs/results/reproduce/steps.csv, imported at its
    B_ref = 4 and r = 0.2, gives the committed fit's D-exponent at fixed N (fit.json) and its verdict
    (inconclusive, the D-trend named a first-doubling effect), with the paper's exponents in the same
    table and the doublings that carry the trend beside."""
    import json
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "docs/results/reproduce"
    law_d = json.loads((folder / "fit.json").read_text())["scaling"]["d"][0]
    at = app_test
    at.run()
    at.switch_page("app_pages/import_table.py")
    at.run()
    at.file_uploader(key="import.file").set_value(("steps.csv", (folder / "steps.csv").read_bytes(), "text/csv")).run()
    at.select_slider(key="import-steps.b_ref").set_value(4).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    (verdict,) = [s.value for s in at.info if "paper's finding" in s.value]
    assert verdict.startswith("This study is inconclusive on the paper's finding that B* scales with D, not with N")
    assert "carried by the first doubling from B_ref alone (a small-batch effect" in verdict
    assert verdict == json.loads((folder / "fit.json").read_text())["verdict"]["sentence"]
    (trends,) = [d.value for d in at.dataframe if "slope per e-fold" in d.value.columns]
    first = trends[(trends["law"].str.startswith("law in D")) & (trends["ratio"] == "ln S(4)/S(8)")].iloc[0]
    assert first["trend"] == "rises" and first["slope per e-fold"] == pytest.approx(0.084, abs=0.001)
    (paper,) = [d.value for d in at.dataframe if "paper" in d.value.columns]
    row = paper.set_index("exponent").loc["β: D at fixed N"]
    # the page refits the table itself: equal to the committed fit up to float summation order
    assert row["this study"] == pytest.approx(law_d["exponent"], abs=1e-6)
    assert row["paper"] == pytest.approx(0.47, abs=0.01)
    lo, hi = law_d["exponent_ci"]
    assert f"{lo:.3f}" in row["95% interval"] and f"{hi:.3f}" in row["95% interval"]
