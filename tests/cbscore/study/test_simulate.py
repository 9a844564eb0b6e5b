"""The study simulator: the real planner against simulated trials whose B* is known (issue 10)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cbscore.errors import ConfigError, DataError
from cbscore.study import StudySpec, load_preset
from cbscore.study.simulate import (
    SimConfig,
    TruthCurve,
    format_report,
    paper_truth,
    read_truth,
    simulate,
    write_truth_csv,
)


@pytest.mark.parametrize("preset", ["paper-chinchilla", "paper-fixed-d", "paper-fixed-n"])
def test_paper_presets_find_the_truths_b_star_without_noise(preset):
    """σ = 0: the planner's budgets, caps, pruning and skips leave B* where the full grid puts it,
    and within 2% of the paper's curves (what is left is the learning-rate grid's coarseness)."""
    spec = load_preset(preset)
    report = simulate(spec, paper_truth(spec), SimConfig(noise_sigma=0.0))
    for s in report.summary():
        assert s["fit_failures"] == 0
        assert s["cbs_study_median"] == pytest.approx(s["cbs_grid_median"], rel=1e-6), s
        assert abs(s["bias_vs_truth"]) < 0.02, s
        assert s["censored_cells"] == [] and s["skipped_cells"] == []
    d = report.to_json_dict()
    # The study stops every trial at its target and prunes: it spends less than the full grid run to
    # each trial's own target, and far less than the fixed-budget grid (the dry run's upper bound).
    assert d["tokens_study_mean"] < d["tokens_grid_to_target_mean"] < d["tokens_fixed_budget_grid"]


def sweep_spec(**changes) -> StudySpec:
    base = dict(name="sweep", kind="custom", settings=[{"model": "tiny-0.1M", "tokens": 2_000_000}],
                batch_sizes=[2 ** k for k in range(1, 14)], b_ref=16, context_tokens=128,
                search={"kind": "grid", "lrs": [0.002, 0.004, 0.008, 0.016, 0.032, 0.064]})
    base.update(changes)
    return StudySpec.from_dict(base)


@pytest.mark.parametrize("ratio", [0.1, 0.3, 1.0, 3.0, 10.0, 30.0])
def test_no_bias_from_b_noise_a_tenth_to_thirty_times_b_ref(ratio):
    """A synthetic sweep: whatever B_noise is against B_ref, the planner's rules leave B* within 2%
    of the truth curve's at σ = 0 (every learning rate equally good: only the planner can bias it),
    and exactly where the full grid puts it when the learning rates differ (the grid's own
    coarseness, which moves both alike, is up to 5% here at k = 0.1)."""
    spec = sweep_spec()
    truth = {spec.resolve_settings()[0].setting_id: TruthCurve(s_min=100.0, b_noise=ratio * spec.b_ref)}
    s = simulate(spec, truth, SimConfig(noise_sigma=0.0, lr_penalty=0.0)).summary()[0]
    assert s["fit_failures"] == 0 and s["censored_cells"] == [] and s["skipped_cells"] == []
    assert abs(s["cbs_study_median"] / s["cbs_truth"] - 1) < 0.02, s
    s = simulate(spec, truth, SimConfig(noise_sigma=0.0)).summary()[0]
    assert s["cbs_study_median"] == pytest.approx(s["cbs_grid_median"], rel=1e-6), s


def test_noise_spreads_b_star_and_the_study_matches_the_full_grid_seed_by_seed():
    spec = load_preset("paper-fixed-d")
    report = simulate(spec, paper_truth(spec), SimConfig(noise_sigma=0.1), seeds=6)
    for s in report.summary():
        assert s["spread_rel_sd"] > 0.01  # noise reaches B*
        assert s["cbs_study_p05"] < s["cbs_study_median"] < s["cbs_study_p95"]
    # Same draws for the study and the grid: where no cell is censored the two agree to rounding
    # (pruning never stops the rates the fit across rates reads, a censored one is re-run).
    for run in report.seeds:
        for o in run.settings:
            if not o.censored_cells and o.cbs_study is not None:
                assert o.cbs_study == pytest.approx(o.cbs_grid, rel=1e-6)
    # The fit across learning rates against the paper's minimum over them, both against the truth:
    # the minimum of noisy values is biased low (about −3% here), the fit a fraction of that.
    rows = report.summary()
    fit = np.mean([abs(s["bias_vs_truth"]) for s in rows])
    low = np.mean([abs(s["bias_vs_truth_min"]) for s in rows])
    assert all(s["bias_vs_truth_min"] < 0 for s in rows)
    assert fit < 0.5 * low, (fit, low)
    assert all(0 <= s["share_off_grid_2pct"] <= 1 and s["p95_abs_vs_grid"] >= 0 for s in rows)


def test_the_paper_presets_wider_caps_spend_less_and_leave_b_star_on_the_full_grid():
    """budget_margin 0.5 (the paper presets') against the spec default 0.25, same draws: fewer
    censored first attempts and re-runs, so fewer tokens, and B* equal to the full grid in every seed."""
    spec = load_preset("paper-fixed-d")
    assert spec.budget_margin == 0.5
    runs = {m: simulate(spec.replace(budget_margin=m), paper_truth(spec), SimConfig(noise_sigma=0.1), seeds=4)
            for m in (0.25, 0.5)}
    for run in runs[0.5].seeds:
        for o in run.settings:
            assert o.cbs_study == pytest.approx(o.cbs_grid, rel=1e-6), (run.seed, o.setting_id)
    assert runs[0.5].to_json_dict()["tokens_study_mean"] < 0.99 * runs[0.25].to_json_dict()["tokens_study_mean"]


def test_a_tight_budget_margin_censors_cells_and_says_so():
    """With no slack, noise puts some cells past their cap: they are reported as lower bounds."""
    spec = load_preset("paper-chinchilla").replace(budget_margin=0.0)
    report = simulate(spec, paper_truth(spec), SimConfig(noise_sigma=0.2), seeds=4)
    assert any(s["censored_cells"] for s in report.summary())
    assert "censored (lower bounds) at B =" in format_report(report)


def test_truth_from_a_curves_csv_and_from_a_steps_table(tmp_path):
    spec = load_preset("paper-fixed-d")
    truth = paper_truth(spec)
    path = tmp_path / "truth.csv"
    write_truth_csv(truth, spec, path)
    again = read_truth(path, spec)
    for sid, curve in truth.items():
        assert again[sid].b_noise == pytest.approx(curve.b_noise, rel=1e-5)
    # A cbs fit steps table, used as given (not refitted): exact points of S = 50·(1 + 300/B), matched
    # by n_params and tokens, are the truth's own values at those batch sizes.
    s0 = spec.resolve_settings()[0]
    rows = ["setting,batch_size,steps,n_params,tokens"] + [
        f"paper-85M,{b},{50 * (1 + 300 / b)!r},{s0.n_params},{s0.tokens}" for b in (64, 128, 256, 512, 1024, 4096)]
    table = tmp_path / "steps.csv"
    table.write_text("\n".join(rows) + "\n")
    one = spec.replace(kind="custom", models=(), tokens=(), settings=[{"model": s0.model, "tokens": s0.tokens}])
    got = read_truth(table, one)[s0.setting_id]
    for b in (64, 128, 256, 512, 1024, 4096):
        assert got.steps(b) == pytest.approx(50 * (1 + 300 / b), rel=1e-12)


def test_a_truth_without_a_setting_is_refused_by_name(tmp_path):
    spec = load_preset("paper-fixed-d")
    path = tmp_path / "truth.csv"
    path.write_text("setting,s_min,b_noise\nsomething-else,10,100\n")
    with pytest.raises(DataError, match="no curve for setting '85M_D3.072B'"):
        read_truth(path, spec)
    path.write_text("setting,s_min,b_noise\n85M_D3.072B,ten,100\n")
    with pytest.raises(DataError, match="line 2: s_min and b_noise must be numbers"):
        read_truth(path, spec)


def test_bad_simulation_settings_are_refused_by_name():
    with pytest.raises(ConfigError, match="^noise: "):
        SimConfig(noise_sigma=-1)
    with pytest.raises(ConfigError, match="^workers: "):
        SimConfig(workers=0)
    spec = load_preset("paper-fixed-d").replace(search={"kind": "optuna"})
    with pytest.raises(ConfigError, match="^search.kind: "):
        simulate(spec, paper_truth(load_preset("paper-fixed-d")))


def test_the_simulator_checks_each_cells_trainer_config_once_and_refuses_what_the_trainer_would(monkeypatch):
    """Its planner builds no trainer config per trial (it trains none): each cell's is built once per
    simulation, all seeds together, and one the trainer refuses stops the simulation by name."""
    import cbscore.study.cell_trials as cell_trials

    spec = load_preset("paper-fixed-d")
    real, built = cell_trials.build_train_config, []

    def counted(spec_, setting, **kw):
        built.append((setting.setting_id, kw["batch_size"]))
        if kw["batch_size"] == 1024 and refuse:
            raise ConfigError("micro_batch_size", 3, "must divide batch_size=1024")
        return real(spec_, setting, **kw)

    monkeypatch.setattr(cell_trials, "build_train_config", counted)
    refuse = False
    simulate(spec, paper_truth(spec), SimConfig(noise_sigma=0.1), seeds=2)
    cells = [(s.setting_id, b) for s in spec.resolve_settings() for b in spec.batch_sizes]
    assert built == cells
    refuse = True
    with pytest.raises(ConfigError, match="^micro_batch_size: "):
        simulate(spec, paper_truth(spec), SimConfig(noise_sigma=0.1))


def test_cli_prints_the_table_and_json(capsys, tmp_path, monkeypatch):
    from cbs import main

    monkeypatch.setenv("CBS_HOME", str(tmp_path))
    assert main(["study", "simulate", "paper-fixed-d", "--truth", "paper", "--seeds", "2", "--noise", "0.05"]) == 0
    out = capsys.readouterr().out
    assert "simulated study 'paper-fixed-d': 2 seed(s), noise σ = 0.05" in out
    assert "85M_D3.072B" in out and "fixed-budget grid" in out
    assert main(["study", "simulate", "paper-fixed-d", "--truth", "paper", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert len(d["settings"]) == 5 and np.isfinite(d["tokens_study_mean"])
    assert main(["study", "simulate", "paper-fixed-d", "--truth", str(tmp_path / "nope.csv")]) != 0
    assert "--truth" in capsys.readouterr().err


def test_cli_first_seed_draws_the_studies_from_that_seed(capsys, tmp_path, monkeypatch):
    """``--first-seed I --seeds 1`` is study I of a run from seed 0: fresh draws for a design chosen
    on the first studies, and the same draws as the longer run where they overlap."""
    from cbs import main

    monkeypatch.setenv("CBS_HOME", str(tmp_path))
    args = ["study", "simulate", "paper-fixed-d", "--truth", "paper", "--json"]
    assert main([*args, "--seeds", "2"]) == 0
    both = json.loads(capsys.readouterr().out)
    assert main([*args, "--seeds", "1", "--first-seed", "1"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert main([*args, "--seeds", "1"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert second["tokens_study_mean"] != first["tokens_study_mean"]
    assert both["tokens_study_mean"] == pytest.approx((first["tokens_study_mean"] + second["tokens_study_mean"]) / 2)
    assert main([*args, "--first-seed", "-1"]) == 2
    assert "--first-seed" in capsys.readouterr().err


@pytest.mark.parametrize("curves", [None, "lab"])
def test_a_planner_that_reads_only_what_changed_plans_as_a_fresh_one(monkeypatch, curves):
    """The simulator keeps one Planner per study: it reads only the records that changed since its
    last call and plans again only the cells whose records or inputs changed. Every plan of a
    simulated study, with stop_far_rates comparing running trials at equal tokens, equals the plan
    of a fresh planner (cbscore.study.planner.plan, which keeps nothing) given the same records."""
    from pathlib import Path

    import cbscore.study.planner as planner_module

    calls = {"n": 0, "stops": 0}
    incremental = planner_module.Planner.plan

    def checked(self, records, now, **kw):
        got = incremental(self, records, now, **kw)
        calls["n"] += 1
        calls["stops"] += bool(got.stop)
        if calls["n"] % 7 == 0 or got.stop or got.start:
            fresh = planner_module.Planner(self.spec, configs=self.configs)  # (the simulator's builds no trainer configs)
            assert incremental(fresh, list(records), now, **kw) == got
        return got

    monkeypatch.setattr(planner_module.Planner, "plan", checked)
    path = None if curves is None else str(Path(__file__).resolve().parents[3] / "docs/results/cheaper-search/lab-curves.json")
    spec = load_preset("paper-fixed-n")
    simulate(spec, paper_truth(spec), SimConfig(noise_sigma=0.1, curves=path), seeds=1)
    assert calls["n"] > 100 and calls["stops"] > 5  # the planner's state was exercised, stops among them


def test_skipping_the_wakes_where_nothing_trails_changes_no_study(monkeypatch):
    """The simulator does not ask the planner at an equal-token wake where no running trial trails
    another of its cell and seed by far_rate_margin (nothing can be stopped there). On the lab's curves,
    where stop_far_rates stops trials, the studies are those of a simulator that asks at every wake."""
    from pathlib import Path

    import cbscore.study.simulate as simulate_module

    curves = str(Path(__file__).resolve().parents[3] / "docs/results/cheaper-search/lab-curves.json")
    spec = load_preset("paper-fixed-n")
    config = SimConfig(noise_sigma=0.1, curves=curves)
    skipped = simulate(spec, paper_truth(spec), config, seeds=2, first_seed=3).to_json_dict()
    calls = {"n": 0}

    def always(*args):
        calls["n"] += 1
        return True

    monkeypatch.setattr(simulate_module, "_may_stop_far_rate", always)
    every = simulate(spec, paper_truth(spec), config, seeds=2, first_seed=3).to_json_dict()
    assert calls["n"] > 100  # the wakes it skips are many
    assert skipped["tokens_study_mean"] == every["tokens_study_mean"]
    assert [s["cbs_study_median"] for s in skipped["settings"]] == [s["cbs_study_median"] for s in every["settings"]]
    assert skipped["settings"] == every["settings"]


def test_cli_noise_lab_truth_shape_lr_law_and_coverage(capsys, tmp_path, monkeypatch):
    """``--noise lab`` selects the measured parts (each flag overrides its part), ``--truth-shape``,
    ``--lr-law``, ``--train-seeds`` and ``--coverage`` reach the report; ``--noise SIGMA`` is the
    per-trial σ alone, as before."""
    from cbs import main

    monkeypatch.setenv("CBS_HOME", str(tmp_path))
    assert main(["study", "simulate", "paper-fixed-d", "--truth", "paper", "--noise", "lab", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["seed_common_sigma"], d["seed_cell_sigma"], d["noise_sigma"], d["lr_penalty"]) == (0.066, 0.027, 0.030, 0.198)
    assert main(["study", "simulate", "paper-fixed-d", "--truth", "paper", "--noise", "lab", "--seed-common-sigma", "0",
                 "--lr-penalty", "0.1", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["seed_common_sigma"], d["seed_cell_sigma"], d["lr_penalty"]) == (0.0, 0.027, 0.1)
    assert main(["study", "simulate", "paper-fixed-d", "--truth", "paper", "--noise", "0.05", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["seed_common_sigma"], d["seed_cell_sigma"], d["noise_sigma"], d["lr_penalty"]) == (0.0, 0.0, 0.05, 0.1)
    assert d["lr_law"] == "η* ∝ B^0.5" and d["truth"] == "S_min·(1 + B_noise/B)" and d["laws"] == []
    assert main(["study", "simulate", "demo", "--truth", str(_demo_truth(tmp_path)),
                 "--noise", "lab", "--seeds", "2", "--train-seeds", "2", "--coverage", "30",
                 "--truth-shape", "penalty:0.5,0.5", "--lr-law", "peak:8,-0.3"]) == 0
    out = capsys.readouterr().out
    assert "per seed across every B 0.066, per seed × batch size 0.027, per trial 0.03" in out
    assert "η* ∝ B^0.5 to B = 8, then ∝ B^-0.3" in out and "(1 + p·max(0, log2(2·B_ref/B)))" in out
    assert "95% covers" in out and "30 resamples" in out
    for bad, name in ((["--noise", "loud"], "--noise"), (["--lr-law", "steep"], "--lr-law"),
                      (["--truth-shape", "penalty:x"], "--truth-shape"), (["--train-seeds", "0"], "--train-seeds"),
                      (["--seed-cell-sigma", "-1"], "seed_cell_sigma")):
        assert main(["study", "simulate", "paper-fixed-d", "--truth", "paper", *bad]) != 0
        assert name in capsys.readouterr().err


def _demo_truth(tmp_path):
    """One B_noise for each of the demo preset's settings, as ``setting,s_min,b_noise`` rows."""
    spec = load_preset("demo")
    path = tmp_path / "demo-truth.csv"
    write_truth_csv({s.setting_id: TruthCurve(s_min=100.0, b_noise=4.0 * (i + 1))
                     for i, s in enumerate(spec.resolve_settings())}, spec, path)
    return path


def test_the_report_judges_a_design_by_the_three_criteria_against_the_truth(capsys):
    # Issue 40's criteria. At zero noise the study equals its full grid and both the truth (structural
    # bias met), so the precision-adjusted cost is the plain cost against the oracle; with noise the
    # structural criterion cannot be judged and says so.
    from cbs import main

    assert main(["study", "simulate", "paper-fixed-d", "--truth", "paper", "--noise", "0", "--seeds", "1", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["criterion_structural_bias"] is True and d["criterion_median_bias"] is True
    assert d["precision_adjusted_to_oracle"] == pytest.approx(d["ratio_to_oracle_median"], rel=1e-6)
    assert d["criterion_precision"] is (d["precision_adjusted_to_oracle"] <= 3.0)
    for s in d["settings"]:  # cost × (RMSE study / RMSE full grid)², the two RMSEs equal at zero noise
        cost = s["tokens_study_mean"] / s["tokens_oracle_mean"]
        assert s["precision_adjusted"] == pytest.approx(
            cost * (s["rmse_ln_cbs_study"] / s["rmse_ln_cbs_grid"]) ** 2, rel=1e-9)
        # (to float noise: the study's and the grid's fits read the same crossings in another order)
        assert s["rmse_ln_cbs_study"] == pytest.approx(s["rmse_ln_cbs_grid"], rel=1e-5)
        assert s["precision_adjusted"] == pytest.approx(cost, rel=1e-5)
    assert main(["study", "simulate", "paper-fixed-d", "--truth", "paper", "--seeds", "2"]) == 0
    out = capsys.readouterr().out
    assert "1 no structural bias (|median bias| ≤ 0.5% at zero noise): — (this run has noise; run with --noise 0)" in out
    assert "3 precision per token, study/oracle × (RMSE ln B* / full grid's)²: " in out
