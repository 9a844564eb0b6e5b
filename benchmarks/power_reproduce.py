"""Power analysis of a reproduction design in the study simulator (issue 27): how likely is the
lab's own CPU study to see B* grow with D, before two hours of CPU are spent on it?

For each design (a study spec) and each true D-exponent γ of the noise scale (0, 0.2 and the
paper's 0.47, Zhang et al. 2025, §4), the simulator (:mod:`cbscore.study.simulate`: the real
planner, log-normal noise σ on each trial's steps to target, a learning-rate penalty
``m(η) = 1 + k·ln²(η/η*)``) runs ``--seeds`` studies against the truth

    B_noise(D) = B_noise,0·(D/D_0)^γ,   S(B) = S_min·(1 + B_noise/B),   S(B_ref) = D/(B_ref·T)

(McCandlish et al. 2018, eq. 2.11), B_noise,0 = 13.8 sequences of 128 tokens at D_0, the geometric
middle of the fixed-N arm's D (the pilots in ``../shared/pilots/d16-fixed-recipe``: 15.1 / 11.5 /
15.2 from B ≥ 4), and the same curve for every model of the fixed-D arm (α_N = 0; the paper found
N^0.09, hardly any). The exponent is put on B_noise, not on B* = (1 + r)·B_ref + r·B_noise
(DESIGN.md §1): at this scale B* is mostly (1 + r)·B_ref, so its exponent is B_noise's diluted
(about γ·r·B_noise/B*), and the paper's 0.47 for B* is a regime where B_noise ≫ B_ref, where the two
exponents agree.

Each simulated study gives the lab's B* per setting (the pages' estimator: the fit across rates,
``fit_steps`` with censored bounds) and so its B_noise. Per study the D-exponents are the
least-squares slopes of ln B_noise and of ln B* on ln D over the fixed-N arm, the N-exponent of B*
likewise over the fixed-D arm. A study's 95% interval is taken as slope ± 1.96·SE, SE the spread of
the slope over the γ = 0 studies of the same design (the lab's intervals cover at about their
nominal rate: issue 19's coverage tests). Power = the share of studies whose interval excludes 0
from above; the verdict's power = the share where both β_D and β_D − α_N of B* do. Cost = the
simulated study's training tokens; wall time = tokens over the throughput measured on this machine
(``--tokens-per-s``).

σ is calibrated, not guessed: ``--calibrate`` runs one-seed copies of a design at several σ and
prints the spread of ln B_noise per setting, to be matched to the lab's own one-seed bootstrap
intervals (about 0.2 in ln B_noise: ``docs/results/reproduce/fit.json``, the pilots' READMEs).

What the simulator does not model is stated in the README it writes: a systematic handicap of the
smallest batch (the pilots' S(2)/S(4) growing with D) or a recipe that moves with D; only noise.

    .venv/bin/python benchmarks/power_reproduce.py DESIGN.yaml [...] --seeds 40 --out docs/results/reproduce-design
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cbscore.study import StudySpec  # noqa: E402
from cbscore.study.simulate import SimConfig, TruthCurve, simulate  # noqa: E402

#: The pilots' B_noise (sequences of 128 tokens) from B ≥ 4: 15.1 / 11.5 / 15.2 at 50k / 200k / 800k
#: (second pilot), flat in D; their geometric mean.
B_NOISE_0 = 13.8
GAMMAS = (0.0, 0.2, 0.47)
CALIBRATION_SIGMAS = (0.05, 0.1, 0.15, 0.2, 0.3)


def truth_for(spec: StudySpec, gamma: float) -> dict[str, TruthCurve]:
    """The truth of the module docstring: B_noise ∝ D^γ through B_noise,0 at D_0 (the geometric
    middle of the fixed-N arm), the same curve for every model."""
    settings = spec.resolve_settings()
    fixed_n, _ = arms(spec)
    d_0 = math.exp(np.mean([math.log(settings[i].tokens) for i in fixed_n]))
    b_noise_0 = B_NOISE_0 * 128 / spec.context_tokens  # the same noise scale in tokens
    out = {}
    for s in settings:
        b_noise = b_noise_0 * (s.tokens / d_0) ** gamma
        s_ref = s.tokens / (spec.b_ref * spec.context_tokens)
        out[s.setting_id] = TruthCurve(s_min=s_ref / (1 + b_noise / spec.b_ref), b_noise=b_noise)
    return out


def arms(spec: StudySpec) -> tuple[list[int], list[int]]:
    """Indices of the fixed-N arm (the most common model, over D) and the fixed-D arm (the D shared
    by most models, over N)."""
    settings = spec.resolve_settings()
    models = [s.n_params for s in settings]
    n_main = max(set(models), key=models.count)
    fixed_n = [i for i, s in enumerate(settings) if s.n_params == n_main]
    ds = [s.tokens for s in settings]
    d_main = max(set(ds), key=lambda d: len({s.n_params for s in settings if s.tokens == d}))
    fixed_d = [i for i, s in enumerate(settings) if s.tokens == d_main]
    return fixed_n, (fixed_d if len(fixed_d) >= 2 else [])


def slope(x: list[float], y: list[float]) -> float | None:
    """Least-squares slope of ln y on ln x; None where a B* is missing."""
    if len(x) < 2 or any(v is None or not v > 0 for v in y):
        return None
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def _b_noise(cbs: float | None, spec: StudySpec) -> float | None:
    """B_noise of a fitted B* (the closed form inverted: B* came from the fit's B_noise)."""
    if cbs is None:
        return None
    return (cbs - (1 + spec.overhead) * spec.b_ref) / spec.overhead


def _interval_power(est: np.ndarray, se: float) -> float:
    return float(np.mean(est - 1.96 * se > 0)) if est.size else float("nan")


def run_design(path: str, seeds: int, sigma: float, tokens_per_s: float, progress) -> dict:
    """Every γ of :data:`GAMMAS` for one design: power, cost and wall time (module docstring)."""
    spec = StudySpec.from_yaml(Path(path).read_text())
    settings = spec.resolve_settings()
    fixed_n, fixed_d = arms(spec)
    d_n = [settings[i].tokens for i in fixed_n]
    out = {"design": Path(path).name, "spec": spec.name, "noise_sigma": sigma, "seeds": seeds,
           "settings": [s.setting_id for s in settings], "fixed_n": [settings[i].setting_id for i in fixed_n],
           "fixed_d": [settings[i].setting_id for i in fixed_d], "by_gamma": {}}
    est: dict[float, dict[str, np.ndarray]] = {}
    for gamma in GAMMAS:
        t0 = time.perf_counter()
        report = simulate(spec, truth_for(spec, gamma), SimConfig(noise_sigma=sigma, workers=2), seeds=seeds)
        rows = []
        for study in report.seeds:
            cbs = [o.cbs_study for o in study.settings]
            rows.append((slope(d_n, [_b_noise(cbs[i], spec) for i in fixed_n]),
                         slope(d_n, [cbs[i] for i in fixed_n]),
                         slope([settings[i].n_params for i in fixed_d], [cbs[i] for i in fixed_d]) if fixed_d else 0.0))
        ok = [r for r in rows if None not in r]
        est[gamma] = {"gamma_d": np.array([r[0] for r in ok]), "beta_d": np.array([r[1] for r in ok]),
                      "alpha_n": np.array([r[2] for r in ok])}
        tokens = np.array([s.tokens_study for s in report.seeds], dtype=float)
        out["by_gamma"][str(gamma)] = {
            "fit_failures": seeds - len(ok),
            "b_noise_exponent_median": float(np.median(est[gamma]["gamma_d"])) if ok else None,
            "cbs_exponent_median": float(np.median(est[gamma]["beta_d"])) if ok else None,
            "tokens_median": float(np.median(tokens)),
            "tokens_p95": float(np.percentile(tokens, 95)),
            "wall_min_median": float(np.median(tokens)) / tokens_per_s / 60.0,
            "wall_min_p95": float(np.percentile(tokens, 95)) / tokens_per_s / 60.0,
            "max_trial_tokens": max(s.max_trial_tokens for s in report.seeds),
            "studies_with_an_edge_cell": int(sum(any(o.edge for o in s.settings) for s in report.seeds)),
        }
        progress(f"{out['design']} γ = {gamma}: {time.perf_counter() - t0:.0f} s")
    null = est[0.0]
    se = {k: float(np.std(v, ddof=1)) for k, v in null.items()}
    se_gap = float(np.std(null["beta_d"] - null["alpha_n"], ddof=1)) if fixed_d else se["beta_d"]
    out["se"] = {"b_noise_exponent": se["gamma_d"], "cbs_exponent": se["beta_d"], "cbs_exponent_minus_alpha_n": se_gap}
    for gamma in GAMMAS:
        e, row = est[gamma], out["by_gamma"][str(gamma)]
        row["power_b_noise_exponent"] = _interval_power(e["gamma_d"], se["gamma_d"])
        row["power_cbs_exponent"] = _interval_power(e["beta_d"], se["beta_d"])
        row["power_verdict"] = float(np.mean((e["beta_d"] - 1.96 * se["beta_d"] > 0)
                                             & (e["beta_d"] - e["alpha_n"] - 1.96 * se_gap > 0))) if e["beta_d"].size else None
        # A negative that rules the effect out: the B_noise exponent's upper bound below 0.2.
        row["share_b_noise_upper_below_0_2"] = float(np.mean(e["gamma_d"] + 1.96 * se["gamma_d"] < 0.2))
    return out


def calibrate(path: str, seeds: int, progress) -> dict:
    """Spread over seeds of ln B_noise per setting for a one-seed copy of ``path`` at each σ of
    :data:`CALIBRATION_SIGMAS` (γ = 0): what the lab's one-seed bootstrap intervals should match."""
    spec = StudySpec.from_yaml(Path(path).read_text())
    spec = spec.replace(seeds=(0,))
    out = {}
    for sigma in CALIBRATION_SIGMAS:
        report = simulate(spec, truth_for(spec, 0.0), SimConfig(noise_sigma=sigma, workers=2), seeds=seeds)
        sds = []
        for i, _ in enumerate(report.seeds[0].settings):
            bn = [_b_noise(s.settings[i].cbs_study, spec) for s in report.seeds]
            bn = np.array([b for b in bn if b is not None and b > 0])
            if bn.size > 2:
                sds.append(float(np.std(np.log(bn), ddof=1)))
        out[str(sigma)] = float(np.median(sds)) if sds else None
        progress(f"calibration σ = {sigma}: median sd of ln B_noise {out[str(sigma)]}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("designs", nargs="+", help="study specs (YAML) to analyse")
    p.add_argument("--seeds", type=int, default=40, help="simulated studies per design and γ")
    p.add_argument("--noise", type=float, default=0.2, help="σ of each trial's log steps to target (see --calibrate)")
    p.add_argument("--calibrate", action="store_true", help="print the spread of ln B_noise per σ and stop")
    p.add_argument("--tokens-per-s", type=float, default=12_000.0,
                   help="training tokens per second of the whole study on this machine (two trials at once)")
    p.add_argument("--out", help="folder for power.json (or calibration.json)")
    args = p.parse_args(argv)
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    if args.calibrate:
        result = {Path(d).name: calibrate(d, args.seeds, say) for d in args.designs}
        print(json.dumps(result, indent=1))
        name = "calibration.json"
    else:
        result = {"tokens_per_s": args.tokens_per_s,
                  "designs": [run_design(d, args.seeds, args.noise, args.tokens_per_s, say) for d in args.designs]}
        for r in result["designs"]:
            print(f"\n{r['design']} (σ = {r['noise_sigma']}, {r['seeds']} studies per γ; SE of the B_noise "
                  f"exponent {r['se']['b_noise_exponent']:.3f}, of B*'s {r['se']['cbs_exponent']:.3f})")
            print("  true γ  B_noise exp.  P(>0)  B* exp.  P(>0)  P(verdict)  P(B_noise upper < 0.2)"
                  "  tokens median / p95  wall min median / p95")
            for gamma, row in r["by_gamma"].items():
                num = lambda v: float("nan") if v is None else v  # noqa: E731 - 0.0 is a number, not missing
                print(f"  {float(gamma):6.2f}  {num(row['b_noise_exponent_median']):12.3f}  "
                      f"{row['power_b_noise_exponent']:5.2f}  {num(row['cbs_exponent_median']):7.3f}  "
                      f"{row['power_cbs_exponent']:5.2f}  {num(row['power_verdict']):10.2f}  "
                      f"{row['share_b_noise_upper_below_0_2']:22.2f}  "
                      f"{row['tokens_median'] / 1e6:8.1f}M / {row['tokens_p95'] / 1e6:5.1f}M  "
                      f"{row['wall_min_median']:9.0f} / {row['wall_min_p95']:4.0f}")
        name = "power.json"
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        tmp = Path(args.out) / f"{name}.tmp"
        tmp.write_text(json.dumps(result, indent=1) + "\n")
        os.replace(tmp, Path(args.out) / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
