"""``cbs study simulate``: the real planner against simulated trials of a known S(B)
(:mod:`cbscore.study.simulate`): does a design find B*, at what cost against the oracle?"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from cbscore.errors import ConfigError


def register_simulate(sub: argparse._SubParsersAction) -> None:
    """Add ``simulate`` to ``cbs study``'s actions."""
    simulate = sub.add_parser(
        "simulate", help="run the real planner against simulated trials of a known S(B): does the design find B*?")
    simulate.add_argument("spec", metavar="SPEC.yaml|PRESET")
    simulate.add_argument("--truth", required=True, metavar="CURVES.csv|paper",
                          help="S(B) per setting: a cbs fit CSV, a setting,s_min,b_noise CSV, or 'paper' "
                               "(the paper's published laws, for the paper-* presets)")
    simulate.add_argument("--truth-shape", default=None, metavar="penalty:P0[,GAMMA]|knee:GAMMA|BOTH+",
                          help="multiply every truth by a small-batch penalty 1 + p·max(0, log2(2·B_ref/B)), "
                               "p = P0·(D/D0)^GAMMA with D0 the spec's smallest D (the lab's first-doubling shape); "
                               "knee:GAMMA moves each truth to S(B/f), f = (D/D0)^GAMMA (B_noise ∝ D^GAMMA); "
                               "join both with +")
    simulate.add_argument("--noise", default="lab", metavar="SIGMA|lab",
                          help="'lab' (the default): the lab's measured parts of ln S (seed-common 0.066, seed × batch "
                               "size 0.027, per trial 0.030; lr penalty 0.198), or a log-normal σ on each trial's steps "
                               "to target alone (0 for none)")
    simulate.add_argument("--seed-common-sigma", type=float, default=None, metavar="SIGMA",
                          help="σ of a shift of ln S shared by one training seed at every batch size (default 0; "
                               "0.066 with --noise lab, the default)")
    simulate.add_argument("--seed-cell-sigma", type=float, default=None, metavar="SIGMA",
                          help="σ of a shift of ln S per training seed × batch size (default 0; 0.027 with --noise lab, the default)")
    simulate.add_argument("--train-seeds", type=int, default=None, metavar="N",
                          help="override the spec's seeds with 0..N-1 (training seeds per learning rate)")
    simulate.add_argument("--lr-law", default=None, metavar="GAMMA|peak[:B_PEAK[,FALL]]",
                          help="η*(B) ∝ B^GAMMA (default 0.5; e.g. 0.3, 0.7), or 'peak': ∝ B^0.5 up to B_PEAK "
                               "(default 4·B_ref), then ∝ B^FALL (default -0.3)")
    simulate.add_argument("--coverage", type=int, nargs="?", const=200, default=0, metavar="R",
                          help="also analyse each study with R bootstrap resamples (default 200) and report how often "
                               "the 95%% intervals of B* and of the laws' exponents cover the truth")
    simulate.add_argument("--seeds", type=int, default=1, metavar="K", help="simulated studies (default 1)")
    simulate.add_argument("--first-seed", type=int, default=0, metavar="I",
                          help="the first simulated study's seed (default 0): fresh draws for a design chosen on "
                               "studies 0..K-1")
    simulate.add_argument("--lr-penalty", type=float, default=None, metavar="K",
                          help="k of m(η) = 1 + k·ln²(η/η*): the cost of a learning rate off its optimum "
                               "(0.198 with --noise lab, the default; 0.1 with --noise SIGMA)")
    simulate.add_argument("--workers", type=int, default=4, help="trials running at once (default 4)")
    simulate.add_argument("--eval-noise", type=float, default=0.0, metavar="NATS",
                          help="σ of each held-out evaluation's noise in nats (default 0): crossings and the "
                               "reference target are read off noisy evaluations")
    simulate.add_argument("--estimator", choices=("fit", "min"), default="fit",
                          help="S(B) per cell: a fit across learning rates (default, the pages') or the paper's "
                               "minimum; the minimum's bias is reported beside either way")
    simulate.add_argument("--curves", metavar="CURVES.json", default=None,
                          help="the lab's own curve shapes (benchmarks/calibrate_equal_tokens.py --templates): "
                               "what trials stopped at equal tokens are compared and projected on")
    simulate.add_argument("--order", choices=("predicted", "grid"), default=None,
                          help="override the spec's search.order (the order a cell starts its rates in)")
    simulate.add_argument("--predict", choices=("on", "off"), default=None,
                          help="override the spec's experimental.predict (learning rates predicted per cell)")
    simulate.add_argument("--stop-far-rates", choices=("on", "off"), default=None,
                          help="override the spec's stop_far_rates (rates outside the leader's fit window "
                               "stopped at equal tokens; nothing projected)")
    simulate.add_argument("--far-rate-margin", type=float, default=None,
                          help="override the spec's far_rate_margin (nats)")
    simulate.add_argument("--far-rate-fraction", type=float, default=None,
                          help="override the spec's far_rate_fraction")
    simulate.add_argument("--prune-at-equal-tokens", choices=("on", "off"), default=None,
                          help="override the spec's experimental.prune_at_equal_tokens (losing trials stopped at equal tokens)")
    simulate.add_argument("--equal-token-fraction", type=float, default=None, metavar="F",
                          help="override the spec's equal_token_fraction")
    simulate.add_argument("--lr-prior", default=None, metavar="ETA|none",
                          help="override the spec's experimental.lr_prior (the first cell's predicted best rate; "
                               "'none': the grid's geometric middle)")
    simulate.add_argument("--budget-margin", type=float, default=None, metavar="M",
                          help="override the spec's budget_margin (step caps at (1 + M)·S of the next smaller B)")
    simulate.add_argument("--lr-optimum", type=float, default=None, metavar="ETA",
                          help="the simulated truth's best rate at B_ref (default: the grid's geometric middle); "
                               "it moves as √B")
    simulate.add_argument("--json", action="store_true")
    simulate.set_defaults(handler=run_simulate)


def run_simulate(args: argparse.Namespace) -> int:
    """``cbs study simulate``: the planner against a known truth (``cbscore.study.simulate``)."""
    from cbscore.study.simulate import SimConfig, apply_truth_shape, format_report, paper_truth, read_truth, simulate
    from workers.query import api

    spec = api.resolve_spec(args.spec)
    if args.order is not None:
        spec = spec.replace(search=dataclasses.replace(spec.search, order=args.order))
    if args.predict is not None:
        spec = spec.replace(experimental=dataclasses.replace(spec.experimental, predict=args.predict == "on"))
    if args.stop_far_rates is not None:
        spec = spec.replace(stop_far_rates=args.stop_far_rates == "on")
    if args.far_rate_margin is not None:
        spec = spec.replace(far_rate_margin=args.far_rate_margin)
    if args.far_rate_fraction is not None:
        spec = spec.replace(far_rate_fraction=args.far_rate_fraction)
    if args.prune_at_equal_tokens is not None:
        spec = spec.replace(experimental=dataclasses.replace(spec.experimental,
                                                             prune_at_equal_tokens=args.prune_at_equal_tokens == "on"))
    if args.equal_token_fraction is not None:
        spec = spec.replace(equal_token_fraction=args.equal_token_fraction)
    if args.budget_margin is not None:
        spec = spec.replace(budget_margin=args.budget_margin)
    if args.lr_prior is not None:
        spec = spec.replace(experimental=dataclasses.replace(spec.experimental, lr_prior=_lr_prior_arg(args.lr_prior)))
    if args.train_seeds is not None:
        if args.train_seeds < 1:
            raise ConfigError("--train-seeds", args.train_seeds, "must be a positive integer")
        spec = spec.replace(seeds=tuple(range(args.train_seeds)))
    truth = paper_truth(spec) if args.truth == "paper" else read_truth(args.truth, spec)
    if args.truth_shape is not None:
        truth = apply_truth_shape(truth, spec, args.truth_shape)
    if isinstance(args.seeds, bool) or args.seeds < 1:
        raise ConfigError("--seeds", args.seeds, "must be a positive integer")
    config = SimConfig(**_noise_arg(args), workers=args.workers, eval_noise=args.eval_noise,
                       estimator=args.estimator, curves=args.curves, lr_optimum_ref=args.lr_optimum,
                       bootstrap=args.coverage, **_lr_law_arg(args.lr_law, spec.b_ref))

    def progress(done: int, total: int) -> None:
        if sys.stderr.isatty() and total > 1:
            print(f"\rsimulated {done}/{total} studies", end="\n" if done == total else "", file=sys.stderr,
                  flush=True)

    if isinstance(args.first_seed, bool) or args.first_seed < 0:
        raise ConfigError("--first-seed", args.first_seed, "must be a non-negative integer")
    report = simulate(spec, truth, config, seeds=args.seeds, first_seed=args.first_seed, progress=progress)
    print(json.dumps(report.to_json_dict(), indent=2) if args.json else format_report(report))
    return 0


def _noise_arg(args: argparse.Namespace) -> dict:
    """``--noise SIGMA|lab`` with ``--seed-common-sigma``, ``--seed-cell-sigma`` and ``--lr-penalty``
    (each, when given, overrides its part) as :class:`SimConfig` fields."""
    from cbscore.study.simulate import LAB_NOISE

    if args.noise.strip().lower() == "lab":
        parts = dict(LAB_NOISE)
    else:
        try:
            parts = {"noise_sigma": float(args.noise)}
        except ValueError:
            raise ConfigError("--noise", args.noise, "must be a number (σ of ln S per trial) or 'lab'") from None
    for field, value in (("seed_common_sigma", args.seed_common_sigma), ("seed_cell_sigma", args.seed_cell_sigma),
                         ("lr_penalty", args.lr_penalty)):
        if value is not None:
            parts[field] = value
    return parts


def _lr_law_arg(value: str | None, b_ref: int) -> dict:
    """``--lr-law GAMMA|peak[:B_PEAK[,FALL]]`` as :class:`SimConfig` fields (none: the default √B)."""
    if value is None:
        return {}
    text = value.strip().lower()
    try:
        if text.startswith("peak"):
            rest = text[len("peak"):].lstrip(":")
            parts = [float(x) for x in rest.split(",")] if rest else []
            if len(parts) > 2:
                raise ValueError
            return {"lr_peak_batch": parts[0] if parts else 4.0 * b_ref,
                    **({"lr_fall_exponent": parts[1]} if len(parts) == 2 else {})}
        return {"lr_optimum_exponent": float(text)}
    except ValueError:
        raise ConfigError("--lr-law", value, "must be an exponent (0.3, 0.5, 0.7) or peak[:B_PEAK[,FALL]]") from None


def _lr_prior_arg(value: str) -> float | None:
    """``--lr-prior``: a rate, or ``none`` for the grid's geometric middle."""
    if value.strip().lower() == "none":
        return None
    try:
        return float(value)
    except ValueError:
        raise ConfigError("--lr-prior", value, "must be a learning rate or 'none'") from None
