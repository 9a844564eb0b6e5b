"""The simulator that can fail the estimator (issue 38): the lab's noise components, truths that are
not the fitted form, learning-rate laws, and the coverage of the analysis' intervals."""

from __future__ import annotations

import json
import math
import re
import zlib

import numpy as np
import pytest

from cbscore.analysis import cbs_closed_form, cbs_empirical
from cbscore.errors import ConfigError
from cbscore.study import StudySpec, load_preset
from cbscore.study.sim_trials import SimTrials
from cbscore.study.sim_truth import rule_cbs
from cbscore.study.simulate import (
    LAB_NOISE,
    PenaltyTruth,
    SimConfig,
    TableTruth,
    TruthCurve,
    apply_truth_shape,
    read_truth,
    simulate,
    write_truth_csv,
)


def two_seed_spec(**changes) -> StudySpec:
    base = dict(name="two-seeds", kind="custom", settings=[{"model": "tiny-0.1M", "tokens": 2_000_000}],
                batch_sizes=[8, 16, 32, 64, 128, 256, 512], b_ref=16, context_tokens=128, seeds=[0, 1],
                search={"kind": "grid", "lrs": [0.004, 0.008, 0.016, 0.032]})
    base.update(changes)
    return StudySpec.from_dict(base)


def sim_trials(spec: StudySpec, config: SimConfig, seed: int = 0) -> SimTrials:
    truth = {s.setting_id: TruthCurve(s_min=100.0, b_noise=64.0) for s in spec.resolve_settings()}
    sim = SimTrials(spec=spec, truth=truth, config=config, seed=seed)
    sim.settings = {s.setting_id: s for s in spec.resolve_settings()}
    return sim


# ------------------------------------------------------------------------------------------ truths
def test_the_rule_on_the_fitted_form_gives_its_closed_form():
    """The numerical 20% rule on S_min·(1 + B_noise/B) lands on (1 + r)·B_ref + r·B_noise."""
    for b_noise in (3.0, 64.0, 5000.0):
        curve = TruthCurve(s_min=100.0, b_noise=b_noise)
        closed = float(cbs_closed_form(b_noise, b_ref=16, overhead=0.2))
        assert rule_cbs(curve.steps, 16, 0.2) == pytest.approx(closed, rel=1e-9)
        assert curve.cbs(16, 0.2) == closed


def test_a_steps_table_truth_is_used_as_given_and_its_b_star_is_the_tables_interpolated_one(tmp_path):
    """A table that is not of the fitted form (a kink at B = 32) is interpolated in ln B, never
    refitted; best over rates per seed, seeds averaged in ln S; B* equals the table's empirical B*."""
    spec = two_seed_spec()
    sid = spec.resolve_settings()[0].setting_id
    table = {8: 400.0, 16: 210.0, 32: 115.0, 64: 100.0, 128: 95.0}  # S per batch size (geometric mean of seeds)
    rows = ["setting,batch_size,steps,lr,seed"]
    for b, s in table.items():
        # seed 0 at s·1.1, seed 1 at s/1.1 (their log mean is s); a worse rate beside each
        rows += [f"{sid},{b},{s * 1.1!r},0.01,0", f"{sid},{b},{s * 1.5!r},0.02,0",
                 f"{sid},{b},{s / 1.1!r},0.01,1", f"{sid},{b},{s * 2!r},0.02,1"]
    path = tmp_path / "steps.csv"
    path.write_text("\n".join(rows) + "\n")
    truth = read_truth(path, spec)[sid]
    assert isinstance(truth, TableTruth)
    for b, s in table.items():
        assert truth.steps(b) == pytest.approx(s, rel=1e-12)
    assert truth.steps(math.sqrt(32 * 64)) == pytest.approx(math.sqrt(115.0 * 100.0), rel=1e-12)  # log–log midpoint
    assert truth.steps(256) == pytest.approx(95.0 * (95.0 / 100.0), rel=1e-12)  # the end slope, one doubling on
    assert truth.steps(4) == pytest.approx(400.0 * (400.0 / 210.0), rel=1e-12)
    assert truth.cbs(16, 0.2) == pytest.approx(cbs_empirical(list(table), list(table.values()), 16, 0.2), rel=1e-9)


def test_a_penalty_truth_makes_the_first_doubling_steeper_than_the_fitted_form_allows():
    """S(B_ref)/S(2·B_ref) is at most 2 for S_min·(1 + B_noise/B); the penalty shape exceeds it for a
    large p, and leaves every batch size from 2·B_ref up untouched."""
    base = TruthCurve(s_min=100.0, b_noise=1000.0)
    assert base.steps(16) / base.steps(32) < 2
    truth = PenaltyTruth(base=base, penalty=0.5, b_ref=16)
    assert truth.steps(16) / truth.steps(32) > 2
    assert truth.steps(16) == pytest.approx(1.5 * base.steps(16))
    assert truth.steps(8) == pytest.approx(2.0 * base.steps(8))  # log2(2·16/8) = 2
    for b in (32, 64, 4096):
        assert truth.steps(b) == base.steps(b)
    # Its B*, by the rule on the true curve: S(B_ref) is 1.5× slower, so linear scaling is easier to beat.
    assert truth.cbs(16, 0.2) > base.cbs(16, 0.2)
    assert truth.cbs(16, 0.2) == pytest.approx(rule_cbs(truth.steps, 16, 0.2))


def test_the_penalty_grows_with_d_as_asked_and_leaves_b_noise_alone():
    spec = load_preset("paper-fixed-n")
    from cbscore.study.simulate import paper_truth

    base = paper_truth(spec)
    shaped = apply_truth_shape(base, spec, "penalty:0.2,0.5")
    d0 = min(s.tokens for s in spec.resolve_settings())
    for s in spec.resolve_settings():
        t = shaped[s.setting_id]
        assert t.penalty == pytest.approx(0.2 * (s.tokens / d0) ** 0.5)
        assert t.base is base[s.setting_id]
    assert apply_truth_shape(base, spec, "penalty:0.3")[spec.resolve_settings()[-1].setting_id].penalty == 0.3


@pytest.mark.parametrize("text", ["penalty", "penalty:-1", "penalty:a", "kink:0.2", "penalty:0.1,2,3", "penalty:inf",
                                  "knee:0.3,1", "knee:0.1+knee:0.2", "penalty:0.1+"])
def test_a_bad_truth_shape_is_refused_by_name(text):
    with pytest.raises(ConfigError, match=r"^--truth-shape: .*but got"):
        apply_truth_shape({}, two_seed_spec(), text)


def test_a_shaped_truth_written_out_reads_back_as_the_same_curve(tmp_path):
    spec = two_seed_spec()
    sid = spec.resolve_settings()[0].setting_id
    truth = {sid: PenaltyTruth(base=TruthCurve(s_min=50.0, b_noise=100.0), penalty=0.4, b_ref=16)}
    write_truth_csv(truth, spec, tmp_path / "truth.csv")
    again = read_truth(tmp_path / "truth.csv", spec)[sid]
    for b in spec.batch_sizes:
        assert again.steps(b) == pytest.approx(truth[sid].steps(b), rel=1e-9)


# ------------------------------------------------------------------------------------------- noise
def test_the_lab_noise_is_the_measured_components():
    config = SimConfig(**LAB_NOISE)
    assert (config.seed_common_sigma, config.seed_cell_sigma, config.noise_sigma, config.lr_penalty) == (
        0.066, 0.027, 0.030, 0.198)


def test_with_seed_common_noise_only_two_seeds_differ_by_the_same_amount_at_every_batch_size():
    spec = two_seed_spec()
    sim = sim_trials(spec, SimConfig(seed_common_sigma=0.1, lr_penalty=0.19))
    setting = next(iter(sim.settings.values()))
    gaps = [math.log(sim.need(setting, b, lr, 1) / sim.need(setting, b, lr, 0))
            for b in spec.batch_sizes for lr in spec.search.lrs if sim.need(setting, b, lr, 0) is not None]
    assert len(gaps) > 20 and abs(gaps[0]) > 1e-3
    assert np.allclose(gaps, gaps[0], rtol=0, atol=1e-12)


def test_seed_cell_noise_is_shared_by_the_rates_of_a_cell_only():
    spec = two_seed_spec()
    sim = sim_trials(spec, SimConfig(seed_cell_sigma=0.1))
    sid = spec.resolve_settings()[0].setting_id

    def shift(b, lr, seed):
        return math.log(sim.noise((sid, b, lr, seed)))

    for b in spec.batch_sizes:
        assert np.allclose([shift(b, lr, 0) for lr in spec.search.lrs], shift(b, 0.004, 0), atol=1e-12)
    assert len({round(shift(b, 0.004, 0), 9) for b in spec.batch_sizes}) == len(spec.batch_sizes)
    assert shift(16, 0.004, 0) != pytest.approx(shift(16, 0.004, 1))


def test_the_per_trial_draw_is_the_one_the_simulator_always_drew():
    """Noise parts at 0 add nothing: the per-trial draws (and every figure committed from them) stay."""
    spec = two_seed_spec()
    sim = sim_trials(spec, SimConfig(noise_sigma=0.2), seed=7)
    key = (spec.resolve_settings()[0].setting_id, 32, 0.008, 1)
    z = np.random.default_rng([7, 1, zlib.crc32(repr(key).encode())]).standard_normal()
    assert sim.noise(key) == math.exp(0.2 * float(z))
    both = sim_trials(spec, SimConfig(noise_sigma=0.2, seed_common_sigma=0.05, seed_cell_sigma=0.05), seed=7)
    again = sim_trials(spec, SimConfig(noise_sigma=0.2, seed_common_sigma=0.05, seed_cell_sigma=0.05), seed=7)
    assert both.noise(key) == again.noise(key) != sim.noise(key)


def test_the_seed_common_shift_leaves_the_full_grids_b_star_unchanged():
    """A shift of one seed at every B (its reference runs included) cancels in B_noise: at no other
    noise the full grid's B* is the noiseless one, seed for seed."""
    spec = two_seed_spec()
    truth = {spec.resolve_settings()[0].setting_id: TruthCurve(s_min=100.0, b_noise=64.0)}
    quiet = simulate(spec, truth, SimConfig(), seeds=2)
    shifted = simulate(spec, truth, SimConfig(seed_common_sigma=0.1), seeds=2)
    for a, b in zip(quiet.seeds, shifted.seeds):
        assert b.settings[0].cbs_grid == pytest.approx(a.settings[0].cbs_grid, rel=1e-3)


# ---------------------------------------------------------------------------------- learning rates
@pytest.mark.parametrize("gamma", [0.3, 0.5, 0.7])
def test_a_power_law_of_the_best_rate_moves_it_as_b_to_gamma(gamma):
    config = SimConfig(lr_optimum_exponent=gamma)
    for b in (4, 16, 64, 1024):
        assert config.lr_optimum_factor(b, 16) == pytest.approx((b / 16) ** gamma, rel=1e-12)
    sim = sim_trials(two_seed_spec(), config)
    assert sim.lr_optimum(64) == pytest.approx(sim.lr_optimum(16) * 4 ** gamma)


def test_the_peaked_law_rises_as_root_b_then_falls():
    config = SimConfig(lr_peak_batch=64)
    assert config.lr_optimum_factor(16, 16) == 1.0
    assert config.lr_optimum_factor(64, 16) == pytest.approx(2.0)  # (64/16)^0.5
    assert config.lr_optimum_factor(256, 16) == pytest.approx(2.0 * 4 ** -0.3)
    assert config.lr_optimum_factor(1024, 16) < config.lr_optimum_factor(256, 16) < config.lr_optimum_factor(64, 16)
    # normalised at B_ref even when the peak is below it
    below = SimConfig(lr_peak_batch=8, lr_fall_exponent=-0.5)
    assert below.lr_optimum_factor(16, 16) == 1.0 and below.lr_optimum_factor(64, 16) == pytest.approx(0.5)


@pytest.mark.parametrize("law", [{"lr_optimum_exponent": 0.3}, {}, {"lr_optimum_exponent": 0.7},
                                 {"lr_peak_batch": 1024}], ids=["B^0.3", "B^0.5", "B^0.7", "peak"])
def test_no_structural_bias_at_zero_noise_under_every_learning_rate_law(law):
    """DESIGN.md §1, budgets criterion (1): at zero noise and the lab's curvature, on the fitted form,
    B* within 0.5% of the truth under each law of η*(B), and the study exactly on its full grid."""
    from cbscore.study.simulate import paper_truth

    spec = load_preset("paper-fixed-d")
    for s in simulate(spec, paper_truth(spec), SimConfig(lr_penalty=LAB_NOISE["lr_penalty"], **law)).summary():
        assert abs(s["bias_vs_truth"]) < 0.005, s
        assert s["cbs_study_median"] == pytest.approx(s["cbs_grid_median"], rel=1e-9)


@pytest.mark.parametrize("field, value", [("seed_common_sigma", -0.1), ("seed_cell_sigma", math.nan),
                                          ("seed_cell_sigma", "0.1"), ("lr_peak_batch", 0), ("lr_fall_exponent", math.inf),
                                          ("lr_optimum_exponent", math.nan), ("bootstrap", -1), ("bootstrap", True)])
def test_bad_noise_and_law_settings_are_refused_by_name(field, value):
    with pytest.raises(ConfigError, match=rf"^{field}: .*but got {re.escape(repr(value))}\.$"):
        SimConfig(**{field: value})


# ---------------------------------------------------------------------------------------- coverage
def test_coverage_reads_the_public_analysis_intervals_against_the_truth():
    """With a bootstrap every setting of every study gets the analysis' 95% interval, the summary's
    coverage is the share that holds the true B*, and each law's truth is the law of the true B*
    (one B_noise everywhere: an exponent of 0)."""
    spec = load_preset("reproduce").replace(seeds=(0, 1, 2))
    truth = {s.setting_id: TruthCurve(s_min=1.0, b_noise=8.0) for s in spec.resolve_settings()}
    report = simulate(spec, truth, SimConfig(**LAB_NOISE, bootstrap=40), seeds=2)
    rows = report.summary()
    assert sum(s["intervals"] for s in rows) > 0
    for i, s in enumerate(rows):
        # (an analysis may decline an interval where the data cannot support one: it is not counted)
        outcomes = [run.settings[i] for run in report.seeds if run.settings[i].cbs_ci is not None]
        assert s["intervals"] == len(outcomes) and all(o.cbs_ci[0] <= o.cbs_ci[1] for o in outcomes)
        if outcomes:
            assert s["coverage"] == np.mean([o.cbs_ci[0] <= o.cbs_truth <= o.cbs_ci[1] for o in outcomes])
        outcomes = [run.settings[i] for run in report.seeds]
        study = np.array([o.cbs_study for o in outcomes])
        assert s["rmse_ln_cbs_study"] == pytest.approx(math.sqrt(np.mean(np.log(study / s["cbs_truth"]) ** 2)))
    laws = report.law_summary()
    assert {law["law"].split(" at ")[0] for law in laws} >= {"B* ∝ N^exponent", "B* ∝ D^exponent"}
    for law in laws:
        assert law["exponent_truth"] == pytest.approx(0.0, abs=1e-9)
        assert law["fits"] == 2
    d = json.loads(json.dumps(report.to_json_dict()))
    assert d["seed_common_sigma"] == 0.066 and d["bootstrap"] == 40 and d["laws"]



def documented_simulate_lines() -> list[list[str]]:
    """The ``cbs study simulate`` lines of docs/cli.md's simulator section, as argument lists."""
    import shlex
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "docs/cli.md").read_text()
    section = text.split("### `cbs study simulate`", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [shlex.split(line)[1:] for line in section.replace("\\\n", " ").splitlines() if line.startswith("cbs ")]


@pytest.mark.parametrize("argv", documented_simulate_lines(), ids=lambda a: a[2])
def test_the_documented_simulate_lines_run_and_report_against_the_truth(argv, capsys, tmp_path, monkeypatch):
    """Each line runs from the repository root; its truth is what the flags say: the paper's
    Chinchilla law (exponent 0.47 exactly), or the reproduce table times the penalty."""
    from pathlib import Path

    from cbs import main

    monkeypatch.setenv("CBS_HOME", str(tmp_path))
    monkeypatch.chdir(Path(__file__).resolve().parents[3])
    assert main([*argv, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["seed_common_sigma"] == 0.066 and d["bootstrap"] == 200 and d["seeds"] == 5
    assert all(0 <= s["intervals"] <= 5 and (s["coverage"] is None or 0 <= s["coverage"] <= 1) for s in d["settings"])
    assert sum(s["intervals"] for s in d["settings"]) > 0
    if argv[2] == "paper-chinchilla":
        (law,) = d["laws"]
        assert law["exponent_truth"] == pytest.approx(0.47, abs=1e-9) and law["fits"] == 5
    else:
        spec = load_preset("reproduce")
        truth = apply_truth_shape(read_truth("docs/results/reproduce/steps.csv", spec), spec, "penalty:0.3,0.5")
        assert [s["cbs_truth"] for s in d["settings"]] == [truth[s["setting"]].cbs(4, 0.2) for s in d["settings"]]
        assert "η* ∝ B^0.5 to B = 16, then ∝ B^-0.3" == d["lr_law"]


def test_a_knee_shape_moves_b_noise_with_d_and_the_penalty_leaves_it():
    """``knee:0.3`` on one B_noise everywhere: B_noise ∝ D^0.3, so B* by the rule is the closed form
    at B_noise·(D/D0)^0.3; ``+penalty`` on top changes only batch sizes below 2·B_ref."""
    spec = load_preset("reproduce")
    base = {s.setting_id: TruthCurve(s_min=1.0, b_noise=8.0) for s in spec.resolve_settings()}
    d0 = min(s.tokens for s in spec.resolve_settings())
    knee = apply_truth_shape(base, spec, "knee:0.3")
    both = apply_truth_shape(base, spec, "penalty:0.4,0.5+knee:0.3")
    for s in spec.resolve_settings():
        f = (s.tokens / d0) ** 0.3
        moved = TruthCurve(s_min=1.0, b_noise=8.0 * f)
        assert knee[s.setting_id].cbs(4, 0.2) == pytest.approx(moved.cbs(4, 0.2), rel=1e-9)
        for b in (2, 4, 8, 16, 32):
            assert knee[s.setting_id].steps(b) == pytest.approx(moved.steps(b), rel=1e-12)
        assert both[s.setting_id].steps(8) == pytest.approx(moved.steps(8), rel=1e-12)
        assert both[s.setting_id].steps(4) == pytest.approx(moved.steps(4) * (1 + 0.4 * (s.tokens / d0) ** 0.5))
