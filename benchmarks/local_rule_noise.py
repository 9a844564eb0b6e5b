"""Where can the noise-aware local-CBS rule decide, and is it then nearer the truth? (issue 39, part 2)

The CPU re-run of ``docs/results/local-cbs/`` found that on the branch average the noise never set
the noise-aware rule's tolerance: ``z·SE(L_i − L_j)`` stayed under the floor ε = 0.01 nats at every
checkpoint, so the rule read as Merrill's. This simulation asks where it would decide, and what it
does there. Per checkpoint of the committed fit (``fit-before-arms.json``):

- **truth**: the measured mean held-out loss of each multiplier ``k`` over seeds (branch average),
  and the true local B* = Merrill's rule (Merrill et al. 2025, arXiv 2505.23971, §3) on those
  means with the same ε;
- **noise**: ``L[k, s] = mean[k] + a[s] + e[k, s]``, with the seed shift ``a`` shared by every
  ``k`` of a base run (it cancels in the paired differences both rules read) and ``e`` normal with
  the checkpoint's measured residual sd (two-way fit of k and seed, ``(K−1)(S−1)`` dof), scaled by
  ``f``;
- per ``(f, seeds)``: the share of readouts whose tolerance the noise set (``noise_decides``), the
  share whose local B* equals the truth, and the mean |log2| error, for Merrill's rule and the
  noise-aware rule (``z`` one-sided 95%, floor ε).

    .venv/bin/python benchmarks/local_rule_noise.py --draws 2000 --out docs/results/local-cbs/rule-noise
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cbscore.local import merrill_local_cbs, noise_aware_local_cbs  # noqa: E402

FIT = ROOT / "docs/results/local-cbs/fit-before-arms.json"
SCALES = (0.5, 1.0, 2.0, 4.0, 8.0)
SEEDS = (2, 3, 5, 8)


def residual_sd(table: np.ndarray) -> float:
    """The sd of ``e`` in ``L[k, s] = m[k] + a[s] + e[k, s]`` (two-way additive fit; (K−1)(S−1) dof)."""
    k, s = table.shape
    resid = table - table.mean(axis=1, keepdims=True) - table.mean(axis=0, keepdims=True) + table.mean()
    return float(np.sqrt((resid ** 2).sum() / ((k - 1) * (s - 1))))


def run(draws: int, seed: int = 0) -> dict:
    fit = json.loads(FIT.read_text())
    eps, z, b0 = fit["epsilon"], fit["z"], fit["base_batch_size"]
    rng = np.random.default_rng(seed)
    out = []
    for cp in fit["checkpoints"]:
        ks = np.asarray(cp["multipliers"], float)
        table = np.asarray(cp["eval_loss"], float)  # (K, S) branch-averaged held-out losses
        mean, sd = table.mean(axis=1), residual_sd(table)
        truth = merrill_local_cbs(ks, mean, base_batch_size=b0, epsilon=eps).local_cbs
        for f in SCALES:
            for n in SEEDS:
                stats = {"merrill": [0, 0.0], "noise_aware": [0, 0.0]}
                decided = 0
                for _ in range(draws):
                    # (K, n): the truth plus a seed shift per base run and independent noise
                    sample = (mean[:, None] + rng.normal(0.0, 0.05, size=(1, n))
                              + rng.normal(0.0, f * sd, size=(len(ks), n)))
                    m = merrill_local_cbs(ks, sample, base_batch_size=b0, epsilon=eps)
                    a = noise_aware_local_cbs(ks, sample, base_batch_size=b0, epsilon_floor=eps, z=z)
                    decided += a.noise_decides
                    for name, r in (("merrill", m), ("noise_aware", a)):
                        stats[name][0] += r.local_cbs == truth
                        stats[name][1] += abs(math.log2(r.local_cbs / truth))
                out.append({"tokens": cp["tokens"], "residual_sd": sd, "scale": f, "seeds": n, "truth": truth,
                            "noise_decides": decided / draws,
                            **{f"{name}_exact": v[0] / draws for name, v in stats.items()},
                            **{f"{name}_mean_abs_log2": v[1] / draws for name, v in stats.items()}})
    return {"epsilon": eps, "z": z, "draws": draws, "rows": out}


def format_rows(result: dict) -> list[str]:
    lines = [f"ε = {result['epsilon']} nats, z = {result['z']:.3f}, {result['draws']} draws per row; "
             "exact: share of readouts equal to the true local B*; |log2|: mean |log2(readout/truth)|"]
    lines.append(f"{'t (tokens)':>10} {'sd':>7} {'×sd':>4} {'seeds':>5} {'truth':>5}  {'noise decides':>13}  "
                 f"{'Merrill exact':>13} {'|log2|':>6}  {'noise-aware exact':>17} {'|log2|':>6}")
    for r in result["rows"]:
        lines.append(f"{r['tokens']:>10,} {r['residual_sd']:7.4f} {r['scale']:4g} {r['seeds']:5d} {r['truth']:5g}  "
                     f"{100 * r['noise_decides']:12.1f}%  {100 * r['merrill_exact']:12.1f}% "
                     f"{r['merrill_mean_abs_log2']:6.3f}  {100 * r['noise_aware_exact']:16.1f}% "
                     f"{r['noise_aware_mean_abs_log2']:6.3f}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=2000, help="simulated readouts per row (default 2000)")
    parser.add_argument("--out", default=None, help="folder for rule-noise.json and rule-noise.txt")
    args = parser.parse_args(argv)
    if args.draws < 1:
        parser.error(f"--draws must be positive, but got {args.draws}")
    result = run(args.draws)
    lines = format_rows(result)
    print("\n".join(lines))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "rule-noise.json").write_text(json.dumps(result, indent=1) + "\n")
        (out / "rule-noise.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
