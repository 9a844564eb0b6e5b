"""docs/results/local-cbs/README.md says what its committed fit says (issue 39): every local B* of its
table, whether ε or the noise decided it, and the power-law exponents it quotes, read from
``fit-before-arms.json`` (``cbs study fit local-cpu --json`` after the branches)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

FOLDER = Path(__file__).resolve().parents[1] / "docs/results/local-cbs"


def _table_rows() -> list[list[str]]:
    text = (FOLDER / "README.md").read_text()
    section = text[text.index("## The local CBS"):]
    section = section[:section.index("\n## ", 5)]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines()
            if re.match(r"\|\s*[\d,]+\s*\|", line)]
    assert rows, "the README lost its table of the local CBS"
    return rows


def _claim(cell: str) -> tuple[float, str | None]:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(?:, (ε|noise) decides)?", cell)
    assert m, f"unreadable README cell {cell!r}"
    return float(m.group(1)), m.group(2)


def test_the_readme_table_is_the_committed_fit():
    fit = json.loads((FOLDER / "fit-before-arms.json").read_text())
    rows = _table_rows()
    assert len(rows) == len(fit["checkpoints"])
    for row, cp in zip(rows, fit["checkpoints"], strict=True):
        assert int(row[0].replace(",", "")) == cp["tokens"]
        assert int(row[1].replace(",", "")) == cp["window_tokens"]
        for cell, reading in zip(row[2:5], ("merrill", "noise_aware", "noise_aware_raw"), strict=True):
            value, decider = _claim(cell)
            r = cp[reading]
            assert value == r["local_cbs"], (cp["tokens"], reading)
            if reading == "noise_aware_raw":
                assert (decider == "noise") == cp["noise_decides"]["noise_aware_raw"], (cp["tokens"], cell)
            else:
                assert (decider == "ε") == r["tolerance_decides"], (cp["tokens"], reading, cell)
    assert fit["noise_ever_decided"] == {"noise_aware": False, "noise_aware_raw": True}


@pytest.mark.parametrize("rule,quoted", [("merrill", (0.42, 0.03, 0.80)), ("noise_aware", (0.46, 0.22, 0.70))])
def test_the_quoted_exponents_are_the_fits(rule, quoted):
    curve = json.loads((FOLDER / "fit-before-arms.json").read_text())["curve"][rule]
    text = (FOLDER / "README.md").read_text()
    exponent, lo, hi = quoted
    assert f"t^**{exponent:.2f}** [{lo:.2f}, {hi:.2f}]" in text
    assert round(curve["exponent"], 2) == exponent
    assert [round(v, 2) for v in curve["exponent_ci"]] == [lo, hi]


def test_the_readme_warm_up_claim_is_the_arms_readout():
    comparison = json.loads((FOLDER / "fit.json").read_text())["arms"]["comparison"]
    text = (FOLDER / "README.md").read_text()
    assert comparison["matched"] and comparison["tokens_equal"]
    assert f"in {100 * comparison['fraction_saved']:.1f}% fewer steps" in text
    assert f"{-comparison['loss_difference']:.4f} nats lower" in text


def test_the_noise_aware_rules_simulation_is_quoted_as_committed():
    """The README's figures on where the noise-aware rule decides (``rule-noise/rule-noise.json``,
    ``benchmarks/local_rule_noise.py``), averaged over the checkpoints as the README says."""
    rows = json.loads((FOLDER / "rule-noise/rule-noise.json").read_text())["rows"]

    def mean(key: str, scale: float, seeds: int = 3) -> float:
        sel = [r[key] for r in rows if r["scale"] == scale and r["seeds"] == seeds]
        assert len(sel) == 5  # one row per checkpoint
        return sum(sel) / len(sel)

    text = " ".join((FOLDER / "README.md").read_text().split())
    assert f"in **{round(100 * mean('noise_decides', 1.0))}%** of readouts ({round(100 * mean('noise_decides', 2.0))}% at twice" in text
    exact = [(round(100 * mean("noise_aware_exact", f)), round(100 * mean("merrill_exact", f))) for f in (1.0, 2.0, 4.0)]
    assert (f"exactly right in {exact[0][0]}% of readouts against Merrill's {exact[0][1]}% (×1, three seeds), "
            f"{exact[1][0]}% against {exact[1][1]}% (×2), {exact[2][0]}% against {exact[2][1]}% (×4)") in text
    assert all(na <= m for na, m in exact)  # nowhere nearer the truth on average
