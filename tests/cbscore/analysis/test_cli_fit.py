import csv
import json

import pytest

from cbs import main
from cbscore.analysis._table import FIXED_TARGET_NOTE

from .schema import check_fit_json
from .synthetic import table_rows

SPECS = [
    {"setting": "small", "n_params": 85e6, "tokens": 1.741e9, "s_min": 1500.0, "b_noise": 1000.0},
    {"setting": "medium", "n_params": 151e6, "tokens": 3.072e9, "s_min": 1800.0, "b_noise": 1400.0},
    {"setting": "large", "n_params": 302e6, "tokens": 6.144e9, "s_min": 2200.0, "b_noise": 2000.0},
]


def _write(path, rows, extra=None):
    fields = ["setting", "batch_size", "steps", "n_params", "tokens", "lr", "outcome"]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow({"lr": "0.001", "outcome": "reached", **row})
        for row in extra or []:
            writer.writerow(row)
    return path


def test_json_output_matches_the_schema_and_the_library(tmp_path, capsys):
    rows = table_rows(SPECS, sigma=0.03, seed=2)
    path = _write(tmp_path / "steps.csv", rows, extra=[
        {"setting": "small", "batch_size": 16384, "steps": "", "n_params": 85e6, "tokens": 1.741e9,
         "lr": "0.03", "outcome": "diverged"},
    ])
    assert main(["fit", str(path), "--json", "--bootstrap", "200", "--seed", "3"]) == 0
    obj = json.loads(capsys.readouterr().out)
    check_fit_json(obj)
    assert [s["setting"] for s in obj["settings"]] == ["small", "medium", "large"]
    for s, spec in zip(obj["settings"], SPECS):
        assert s["b_noise"] == pytest.approx(spec["b_noise"], rel=0.15)
        assert s["cbs_ci"][0] <= s["cbs"] <= s["cbs_ci"][1]
    # About 20 tokens per parameter throughout: one Chinchilla law in N ("N and D together"), no
    # law at fixed N or fixed D (no two settings share either), no joint law (N and D collinear).
    assert obj["scaling"]["n"] == [] and obj["scaling"]["d"] == [] and obj["scaling"]["joint"] is None
    (law,) = obj["scaling"]["chinchilla"]
    assert law["settings"] == ["small", "medium", "large"] and law["exponent"] > 0
    assert law["exponent_ci"][0] <= law["exponent"] <= law["exponent_ci"][1]
    assert law["units"].startswith("B* = c·N^alpha, N in millions")
    assert obj["errors"] == [
        # 0.001 reached and 0.03 diverged: the best rate is the lowest one tried.
        "setting 'small': the best learning rate sits at an edge of the grid at batch size(s) 16384 (the lowest "
        "rate): the optimum may lie beyond it, and S(B) may be too high there (extend the rates past that edge)",
        "scaling law in n_params with D ∝ N at tokens per parameter = 20.4: interval from "
        "3 settings only, read it as rough",
        "scaling law in n_params at fixed tokens: no two settings with different n_params share tokens",
        "scaling law in tokens at fixed n_params: no two settings with different tokens share n_params",
        "joint scaling law: fewer than 4 settings for the joint law (got 3)",
        FIXED_TARGET_NOTE,
    ]
    # Same seed, same output.
    assert main(["fit", str(path), "--json", "--bootstrap", "200", "--seed", "3"]) == 0
    assert json.loads(capsys.readouterr().out) == obj


def test_options_reach_the_fit(tmp_path, capsys):
    rows = table_rows(SPECS[:1])
    path = _write(tmp_path / "steps.csv", rows)
    assert main(["fit", str(path), "--json", "--b-ref", "512", "--overhead", "0.5", "--bootstrap", "0"]) == 0
    s = json.loads(capsys.readouterr().out)["settings"][0]
    assert s["cbs"] == pytest.approx(1.5 * 512 + 0.5 * 1000.0)
    assert s["cbs_ci"] is None


def test_text_output_has_the_tables(tmp_path, capsys):
    path = _write(tmp_path / "steps.csv", table_rows(SPECS, sigma=0.03, seed=2))
    assert main(["fit", str(path), "--bootstrap", "100", "--free-alpha"]) == 0
    text = capsys.readouterr().out
    assert "setting 'small'" in text and "B* = " in text and "empirical B* = " in text
    assert "sensitivity of B*" in text and "r=0.5" in text
    assert "free exponent: S = a + b·B^-alpha" in text
    assert "B* = c·N^alpha with D ∝ N (20.4 tokens per parameter) (3 settings: small, medium, large): alpha = " in text
    assert "(N in parameters); c = " in text and "(N in millions)" in text
    assert "B* = c·D^beta at fixed N: —" in text and "joint scaling law" in text
    assert "compared with Zhang et al. 2025" in text and "N with D ∝ N (Chinchilla): " in text
    assert "inconclusive on the paper's finding" in text  # no law at fixed N or fixed D here


@pytest.mark.parametrize(
    "content, message",
    [
        ("setting,batch_size,steps\ns,64,100\ns,128,oops\n", "line 3 (row 2), column 'steps'"),
        ("setting,steps\ns,100\n", "missing required column 'batch_size'"),
        ("", "the file is empty"),
    ],
)
def test_invalid_input_exits_2_naming_row_and_column(tmp_path, capsys, content, message):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    assert main(["fit", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cbs fit: error: ") and message in err


def test_missing_file_and_bad_option_exit_2(tmp_path, capsys):
    assert main(["fit", str(tmp_path / "none.csv")]) == 2
    assert "no such file" in capsys.readouterr().err
    path = _write(tmp_path / "steps.csv", table_rows(SPECS[:1]))
    assert main(["fit", str(path), "--overhead", "-1"]) == 2
    assert "overhead" in capsys.readouterr().err


def test_a_huge_field_and_a_duplicate_header_are_named_not_raised(tmp_path):
    """Issue 12: a field over the csv module's 128 KiB limit and a repeated column are input
    errors with the file and line, not a raw ``_csv.Error`` or a silent pick."""
    from cbscore.analysis import read_steps_csv
    from cbscore.errors import DataError

    big = tmp_path / "big.csv"
    big.write_text("setting,batch_size,steps\n" + "a,8," + "9" * 200_000 + "\n")
    with pytest.raises(DataError, match=r"big.csv line \d+: not a readable CSV row"):
        read_steps_csv(big)
    dup = tmp_path / "dup.csv"
    dup.write_text("setting,batch_size,steps,steps\na,8,100,200\n")
    with pytest.raises(DataError, match="column 'steps' appears more than once"):
        read_steps_csv(dup)


def test_forecast_file_is_calibrated_against_the_table(tmp_path, capsys):
    # exact curves whose B_noise is 4× the forecast's B̂ in every setting: c = 4
    rows = table_rows(SPECS, sigma=0.0, seed=0)
    path = _write(tmp_path / "steps.csv", rows)
    forecast = {"forecast": {"settings": [
        {"setting": s["setting"], "b_run": 256, "b_hat": s["b_noise"] / 4, "s_min": 1.0, "e_min": 1.0,
         "target_step": 1.0, "n_values": 10, "cbs": 1.0} for s in SPECS]}}
    (tmp_path / "forecast.json").write_text(json.dumps(forecast))
    assert main(["fit", str(path), "--json", "--bootstrap", "100", "--forecast", str(tmp_path / "forecast.json")]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["calibration"]["factor"] == pytest.approx(4.0, rel=1e-6)
    assert [s["ratio"] for s in obj["calibration"]["settings"]] == pytest.approx([4.0] * 3, rel=1e-6)
    assert main(["fit", str(path), "--bootstrap", "50", "--forecast", str(tmp_path / "forecast.json")]) == 0
    assert "calibration c = measured B_noise / B̂ = 4" in capsys.readouterr().out
    (tmp_path / "bad.json").write_text('{"forecast": {"nope": 1}}')
    assert main(["fit", str(path), "--forecast", str(tmp_path / "bad.json")]) == 2
    assert "--forecast: must hold a 'forecast' object with a 'settings' list" in capsys.readouterr().err


def test_the_gns_calibration_is_given_per_setting_with_its_spread_and_the_forecasts_d_trend(capsys):
    # docs/results/demo-gns (issue 38): c is not one number there; the forecast B̂ grows as D^0.66
    # (3.63 → 9.07 over 4× D) while the measured B_noise grows as D^0.17 (10.88 → 13.84).
    from pathlib import Path

    folder = Path(__file__).resolve().parents[3] / "docs/results/demo-gns"
    assert main(["fit", str(folder / "steps.csv"), "--b-ref", "2", "--bootstrap", "200",
                 "--forecast", str(folder / "forecast.json"), "--json"]) == 0
    cal = json.loads(capsys.readouterr().out)["calibration"]
    ratios = {s["setting"]: s["ratio"] for s in cal["settings"]}
    assert ratios == pytest.approx({"tiny-0.1M_D50K": 3.00, "tiny-0.1M_D200K": 1.53, "tiny-0.3M_D50K": 3.05}, abs=0.01)
    assert cal["spread_ln"] == pytest.approx(0.395, abs=0.001)
    (trend,) = cal["d_trends"]
    assert trend["exponent_forecast"] == pytest.approx(0.66, abs=0.005)
    assert trend["exponent_measured"] == pytest.approx(0.17, abs=0.005) and trend["settings"] == 2
