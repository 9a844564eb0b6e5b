import io
import json

import numpy as np
import pytest

from cbscore.analysis import analyze_table, read_steps_csv
from cbscore.errors import CbsError, ConfigError, DataError

from .schema import check_fit_json
from .synthetic import PAPER_BATCH_SIZES, table_rows

N = [85e6, 151e6, 302e6, 604e6, 1.2e9]
D = [1.741e9, 3.072e9, 6.144e9, 12.288e9, 24.576e9]


def _csv(text: str) -> io.StringIO:
    f = io.StringIO(text)
    f.name = "steps.csv"
    return f


def test_noise_free_table_gives_exact_numbers_and_a_valid_json_object():
    rows = table_rows([{"setting": "x", "s_min": 2000.0, "b_noise": 700.0}])
    analysis = analyze_table(rows, bootstrap=200)
    obj = analysis.to_json_dict()
    check_fit_json(obj)
    json.dumps(obj, allow_nan=False)  # strictly JSON
    (s,) = obj["settings"]
    assert s["batch_sizes"] == list(PAPER_BATCH_SIZES)
    assert (s["s_min"], s["b_noise"], s["cbs"]) == pytest.approx((2000.0, 700.0, 447.2), rel=1e-9)
    assert s["cbs_ci"] == pytest.approx([447.2, 447.2], rel=1e-9)  # zero residuals
    assert s["n_params"] is None and s["r2"] == pytest.approx(1.0)
    assert s["lower_bounds"] == [] and s["skipped"] == []
    assert obj["scaling"] == {"n": [], "d": [], "chinchilla": [], "joint": None}
    assert ("scaling law in n_params at fixed tokens: no two settings with different n_params share tokens"
            in obj["errors"])


def test_refusal_is_recorded_under_errors_and_leaves_nulls():
    rows = table_rows([{"setting": "x", "s_min": 2000.0, "b_noise": 700.0}], batch_sizes=(64, 128))
    obj = analyze_table(rows, bootstrap=10).to_json_dict()
    check_fit_json(obj)
    s = obj["settings"][0]
    assert s["batch_sizes"] == [64, 128] and s["cbs"] is None and s["cbs_ci"] is None
    assert "setting 'x': fewer than 3 distinct batch sizes (got 2)" in obj["errors"]


def test_outcomes_are_counted_never_entered_and_a_batch_size_with_none_reached_is_reported():
    rows = table_rows([{"setting": "x", "s_min": 2000.0, "b_noise": 700.0}])
    rows += [
        {"setting": "x", "batch_size": 64, "steps": "", "outcome": "censored"},
        {"setting": "x", "batch_size": 16384, "steps": "1.0", "outcome": "diverged"},  # steps ignored
        {"setting": "x", "batch_size": 32768, "steps": None, "outcome": "Pruned"},
    ]
    analysis = analyze_table(rows, bootstrap=0)
    s = analysis.setting("x")
    assert s.s_min == pytest.approx(2000.0) and s.cbs_ci is None
    by_b = {p.batch_size: p for p in s.points}
    assert (by_b[64].n_censored, by_b[16384].n_diverged, by_b[32768].n_other) == (1, 1, 1)
    assert by_b[16384].steps == pytest.approx(2000.0 * (1 + 700 / 16384))
    assert s.batch_sizes == PAPER_BATCH_SIZES
    assert any("batch size 32768: no trial reached the target" in e for e in analysis.errors)


def test_same_seed_same_numbers_and_settings_do_not_share_randomness():
    one = [{"setting": "a", "s_min": 1000.0, "b_noise": 500.0}]
    two = one + [{"setting": "b", "s_min": 3000.0, "b_noise": 900.0}]
    rows_one, rows_two = table_rows(one, sigma=0.05, seed=1), table_rows(two, sigma=0.05, seed=1)
    a1 = analyze_table(rows_one, bootstrap=300, seed=4).setting("a")
    a2 = analyze_table(rows_two, bootstrap=300, seed=4).setting("a")
    assert np.array_equal(a1.bootstrap.cbs_samples, a2.bootstrap.cbs_samples)
    a3 = analyze_table(rows_one, bootstrap=300, seed=5).setting("a")
    assert not np.array_equal(a1.bootstrap.cbs_samples, a3.bootstrap.cbs_samples)


def test_paper_shaped_chinchilla_table():
    # Five Chinchilla settings of the paper's models (DESIGN.md §1), nine batch sizes, five
    # learning rates per batch size (the worse ones slower), a censored trial at B = 64 and a
    # diverged one at B = 16384; B_noise grows like D^0.5 so B* spans ~500 to ~1,900 sequences.
    specs = [
        {"setting": f"chinchilla-{name}", "n_params": n, "tokens": d,
         "s_min": 1500.0 * (d / D[0]) ** 0.3, "b_noise": 1000.0 * (d / D[0]) ** 0.5}
        for name, n, d in zip(["85M", "151M", "302M", "604M", "1.2B"], N, D)
    ]
    rows = table_rows(specs, sigma=0.08, seed=0, trials=5)
    for spec in specs:
        meta = {"n_params": spec["n_params"], "tokens": spec["tokens"]}
        rows.append({"setting": spec["setting"], "batch_size": 64, "steps": "", "outcome": "censored", **meta})
        rows.append({"setting": spec["setting"], "batch_size": 16384, "steps": "", "outcome": "diverged", **meta})
    analysis = analyze_table(rows, bootstrap=500)
    obj = analysis.to_json_dict()
    check_fit_json(obj)
    cbs = [s["cbs"] for s in obj["settings"]]
    assert cbs == sorted(cbs)  # B* grows with scale
    for s, spec in zip(obj["settings"], specs):
        true = 1.2 * 256 + 0.2 * spec["b_noise"]
        assert s["cbs"] == pytest.approx(true, rel=0.1)
        assert s["cbs_empirical"] == pytest.approx(s["cbs"], rel=0.25)
        assert s["r2"] > 0.99
    # D ∝ N (about 20 tokens per parameter): one Chinchilla law in N, "N and D together"; no law at
    # fixed N or fixed D (no two settings share either), and no joint law.
    assert obj["scaling"]["n"] == [] and obj["scaling"]["d"] == [] and obj["scaling"]["joint"] is None
    (law,) = obj["scaling"]["chinchilla"]
    assert law["fixed"]["tokens_per_param"] == pytest.approx(20.4, rel=0.01)
    assert law["exponent_ci"][0] < law["exponent"] < law["exponent_ci"][1]
    # B_noise ∝ D^0.5 ∝ N^0.5, so B* = 1.2·256 + 0.2·B_noise grows like N to a power below 0.5.
    assert 0.2 < law["exponent"] < 0.5
    assert law["coefficient_paper_units"] == pytest.approx(law["coef"] * 1e6 ** law["exponent"], rel=1e-9)
    assert any("joint scaling law: N and D vary together" in e for e in obj["errors"])
    forecast = analysis.scaling.forecast(n_params=2.4e9)
    assert forecast.cbs > cbs[-1] and forecast.law == "n" and forecast.fixed == "n and d together (D ∝ N)"


def test_read_steps_csv_types_rows_and_keeps_extra_columns():
    rows = read_steps_csv(_csv(
        "\ufeffsetting, batch_size ,steps,n_params,tokens,context,outcome,lr,run_id\n"
        "s,64,1200.5,8.5e7,1.741e9,512,reached,0.001,abc\n"
        "\n"
        "s,128,,8.5e7,1.741e9,512,censored,0.01,def\n"
    ))
    assert rows[0]["setting"] == "s" and rows[0]["batch_size"] == 64 and rows[0]["steps"] == 1200.5
    assert rows[0]["n_params"] == 8.5e7 and rows[0]["context"] == 512 and rows[0]["lr"] == 0.001
    assert rows[1]["outcome"] == "censored" and rows[1]["steps"] is None


@pytest.mark.parametrize(
    "text, message",
    [
        ("setting,batch_size,steps\ns,64,100\ns,abc,90\n", "steps.csv line 3 (row 2), column 'batch_size'"),
        ("setting,batch_size,steps\ns,64,fast\n", "steps.csv line 2 (row 1), column 'steps': must be a positive finite number, but got 'fast'."),
        ("setting,batch_size,steps\ns,64,-3\n", "column 'steps'"),
        ("setting,batch_size,steps\ns,64,nan\n", "column 'steps'"),
        ("setting,batch_size,steps\ns,64.5,100\n", "column 'batch_size': must be a positive integer"),
        ("setting,batch_size,steps\n,64,100\n", "column 'setting'"),
        ("setting,batch_size,steps\ns,64,\n", "line 2 (row 1), column 'steps': is empty"),
        ("setting,batch_size,steps,outcome\ns,64,,exploded\n", "column 'outcome'"),
        ("setting,batch_size,steps,n_params\ns,64,100,0\n", "column 'n_params'"),
        ("setting,batch_size\ns,64\n", "missing required column 'steps'"),
        ("setting,batch_size,steps\ns,64\n", "line 2 (row 1): has 2 cells but the header has 3"),
        ("", "the file is empty"),
        ("setting,batch_size,steps\n", "no data rows"),
    ],
)
def test_csv_errors_name_row_and_column(text, message):
    with pytest.raises(DataError) as info:
        read_steps_csv(_csv(text))
    assert message in str(info.value)
    assert isinstance(info.value, CbsError)


def test_missing_file_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        read_steps_csv(tmp_path / "absent.csv")


def test_analyze_table_validates_rows_settings_and_options():
    with pytest.raises(DataError, match=r"row 2, column 'n_params': setting 's' has n_params 1e\+08 in row 1"):
        analyze_table([
            {"setting": "s", "batch_size": 64, "steps": 10, "n_params": 1e8},
            {"setting": "s", "batch_size": 128, "steps": 8, "n_params": 2e8},
        ])
    with pytest.raises(DataError, match="row 1: missing column 'steps'"):
        analyze_table([{"setting": "s", "batch_size": 64}])
    with pytest.raises(DataError, match="no rows"):
        analyze_table([])
    rows = table_rows([{"setting": "x", "s_min": 2000.0, "b_noise": 700.0}])
    with pytest.raises(ConfigError, match="overhead"):
        analyze_table(rows, overhead=0)
    with pytest.raises(ConfigError, match="bootstrap"):
        analyze_table(rows, bootstrap=-1)


def test_b_ref_not_measured_keeps_the_fitted_cbs_and_refuses_empirical_outside_range():
    rows = table_rows([{"setting": "x", "s_min": 2000.0, "b_noise": 700.0}], batch_sizes=(512, 1024, 2048, 4096))
    analysis = analyze_table(rows, b_ref=256, bootstrap=0)
    s = analysis.setting("x")
    assert s.cbs == pytest.approx(447.2)  # closed form with S(B_ref) from the fit
    assert s.cbs_empirical is None
    assert any("outside the measured batch sizes" in e for e in analysis.errors)


def test_sensitivity_table_spans_overheads_and_measured_b_refs():
    rows = table_rows([{"setting": "x", "s_min": 2000.0, "b_noise": 700.0}])
    s = analyze_table(rows, bootstrap=50).setting("x")
    grid = {(row.b_ref, row.overhead): row for row in s.sensitivity}
    assert set(grid) == {(float(b), r) for b in PAPER_BATCH_SIZES for r in (0.1, 0.2, 0.3, 0.5)}
    assert grid[512.0, 0.5].cbs == pytest.approx(1.5 * 512 + 0.5 * 700)
    assert grid[16384.0, 0.2].cbs_empirical is None and "above B_ref" in grid[16384.0, 0.2].empirical_note


def test_free_alpha_is_reported_beside_without_changing_the_paper_fit():
    rows = table_rows([{"setting": "x", "s_min": 2000.0, "b_noise": 700.0}])
    plain = analyze_table(rows, bootstrap=0).setting("x")
    free = analyze_table(rows, bootstrap=0, free_alpha=True).setting("x")
    assert free.cbs == plain.cbs and free.fit_free.alpha == pytest.approx(1.0, rel=1e-6)
    assert free.cbs_free == pytest.approx(447.2, rel=1e-6)


def test_unbounded_cbs_interval_is_null_at_that_end_with_a_reason():
    # S(B) still falls nearly like 1/B up to B = 16384 (S_min = 20 steps, B_noise = 50,000) with
    # 20% noise: the point fit resolves a tiny S_min but about half the resamples fit it to 0.
    rng = np.random.default_rng(4)
    b = np.asarray(PAPER_BATCH_SIZES, dtype=float)
    steps = (20.0 + 1e6 / b) * np.exp(0.2 * rng.standard_normal(9))
    rows = [{"setting": "x", "batch_size": int(bb), "steps": s} for bb, s in zip(b, steps)]
    analysis = analyze_table(rows, bootstrap=500)
    obj = analysis.to_json_dict()
    check_fit_json(obj)
    s = obj["settings"][0]
    assert s["cbs"] is not None and s["cbs_ci"][0] is not None and s["cbs_ci"][1] is None
    assert any(e.startswith("setting 'x': the CBS interval has no upper end") for e in obj["errors"])
    assert analysis.setting("x").extrapolated  # B* far above the largest measured batch size


def test_censored_cells_are_lower_bounds_named_in_the_notes_and_the_json():
    # B = 16384 and 32768: every trial censored at its cap (the study export's budget_steps
    # column, or steps given on a censored row); the smallest cap bounds S(B) from below.
    rows = table_rows([{"setting": "x", "s_min": 2000.0, "b_noise": 700.0}], batch_sizes=PAPER_BATCH_SIZES[:-1])
    rows += [
        {"setting": "x", "batch_size": 16384, "steps": "", "outcome": "censored", "budget_steps": 1800},
        {"setting": "x", "batch_size": 16384, "steps": "", "outcome": "censored", "budget_steps": "1900"},
        {"setting": "x", "batch_size": 16384, "steps": "", "outcome": "diverged"},
        {"setting": "x", "batch_size": 32768, "steps": "950", "outcome": "censored"},
    ]
    analysis = analyze_table(rows, bootstrap=0, skipped={"x": [65536]})
    s = analysis.setting("x")
    assert s.lower_bounds == ((16384, 1800.0), (32768, 950.0)) and s.skipped == (65536,)
    assert 16384 not in s.batch_sizes  # not a measured point...
    assert s.fit.lower_bounds == ((16384.0, 1800.0), (32768.0, 950.0))  # ...but in the fit as a bound
    assert ("setting 'x': batch size 16384: no trial reached the target (2 censored, 1 diverged, 0 other); "
            "censored at ≥ 1,800 steps, a lower bound; kept in the fit as a lower bound") in analysis.errors
    assert "setting 'x': batch size 65536: skipped by the planner (never run); not measured" in analysis.errors
    obj = analysis.to_json_dict()
    check_fit_json(obj)
    assert obj["settings"][0]["lower_bounds"] == [
        {"batch_size": 16384, "steps_at_least": 1800}, {"batch_size": 32768, "steps_at_least": 950},
    ]
    assert obj["settings"][0]["skipped"] == [65536]


def test_seed_column_makes_s_a_mean_over_seeds_of_the_minimum_over_learning_rates():
    rows = read_steps_csv(_csv(
        "setting,batch_size,steps,seed,lr\n"
        + "".join(f"s,{b},{1000 * (1 + 500 / b) * f},{seed},{lr}\n"
                  for b in (64, 256, 1024, 4096) for seed, f0 in ((0, 0.9), (1, 1.1))
                  for lr, f in ((0.001, f0), (0.01, 1.5 * f0)))
    ))
    assert rows[0]["seed"] == 0 and rows[2]["seed"] == 1 and rows[0]["budget_steps"] is None
    s = analyze_table(rows, bootstrap=100).setting("s")
    assert [p.seed_steps for p in s.points][0] == pytest.approx((900 * (1 + 500 / 64), 1100 * (1 + 500 / 64)))
    assert s.steps[0] == pytest.approx(np.sqrt(0.9 * 1.1) * 1000 * (1 + 500 / 64))
    assert s.bootstrap.methods == ("seeds",) * 4
    with pytest.raises(DataError, match=r"column 'seed': must be a non-negative integer, but got '-1'"):
        read_steps_csv(_csv("setting,batch_size,steps,seed\ns,64,100,-1\n"))
