"""docs/results/reproduce-design/regime/README.md says what its committed power analysis says (issue 39,
part 1): every row of its table read against ``regime.json`` (``benchmarks/power_regime.py``), and the
``reproduce-gpu`` preset is the design the README names."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "docs/results/reproduce-design/regime"


def _rows() -> dict[tuple[str, str], list[str]]:
    text = (FOLDER / "README.md").read_text()
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines()
            if re.match(r"\|\s*regime-", line)]
    assert rows, "the README lost its table"
    return {(r[0], r[1]): r for r in rows}


def _number(text: str) -> float:
    """The number of a table cell: a minus sign or thousands commas, and a unit after it (M, h, %, tokens/s)."""
    number = re.match(r"[-+]?[\d.]+", text.replace("−", "-").replace(",", ""))
    assert number, f"no number in the cell {text!r}"
    return float(number.group())


def test_every_row_of_the_table_is_the_committed_analysis():
    results = json.loads((FOLDER / "regime.json").read_text())["results"]
    rows = _rows()
    assert len(rows) == len(results) == 9
    for r in results:
        row = rows[(r["design"], r["truth"])]
        in_regime = sum(s["regime"] for s in r["settings"].values())
        assert row[2] == f"{in_regime}/{len(r['settings'])}"
        median, p95 = re.fullmatch(r"([\d,]+)M \(([\d,]+)M\)", row[3]).groups()
        assert (_number(median), _number(p95)) == (round(r["tokens_median"] / 1e6), round(r["tokens_p95"] / 1e6))
        assert _number(row[4].split()[0]) == round(r["max_trial_tokens"] / 1e6, 1)
        assert _number(row[5]) == round(r["cpu_hours_median"], 1)
        assert _number(row[6].split()[0].rstrip("M")) == round(r["gpu_tokens_per_s_for_20_min_p95"] / 1e6, 2)
        d_law = next(v for k, v in r["laws"].items() if k.startswith("B* ∝ D"))
        above, covers = (_number(x) for x in row[8].split(" / "))
        assert (above, covers) == (round(100 * d_law["share_ci_above_0"]), round(100 * d_law["coverage"]))
        median_exp = re.search(r": ([+−-]\d\.\d{3}) \[", row[7]).group(1)
        assert _number(median_exp) == round(d_law["median"], 3)


def test_the_reproduce_gpu_preset_is_the_regime_design():
    preset = yaml.safe_load((ROOT / "cbscore/presets/reproduce-gpu.yaml").read_text())
    design = yaml.safe_load((FOLDER / "regime-gpu.yaml").read_text())
    assert preset.pop("name") == "reproduce-gpu" and design.pop("name") == "regime-gpu"
    assert preset == design
    results = json.loads((FOLDER / "regime.json").read_text())["results"]
    gpu = [r for r in results if r["design"] == "regime-gpu"]
    # every setting at 20 tokens per parameter or more; B_noise ≥ 8·B_ref wherever the knee moves
    assert all(s["tokens_per_param"] >= 20 for r in gpu for s in r["settings"].values())
    assert all(s["regime"] for r in gpu if r["truth"] != "flat" for s in r["settings"].values())
