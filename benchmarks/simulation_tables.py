"""Re-run the committed simulations and print their tables (``docs/results/simulate-paper/``,
``docs/results/cheaper-search/order/``, ``docs/results/cheaper-search/far-rates/``,
``docs/results/cheaper-search/prior/``, ``docs/results/cheaper-search/budget-margin/``).

    python benchmarks/simulation_tables.py paper [--write]   # the three paper presets at σ = 0, 0.1, 0.25 (200 seeds)
    python benchmarks/simulation_tables.py order [--write]   # search.order grid against predicted, σ = 0.1
    python benchmarks/simulation_tables.py far [--write] [--fraction F]   # stop_far_rates off and on, both curve models
    python benchmarks/simulation_tables.py prior [--write]   # search.lr_prior off and on, truth at the grid middle or the prior
    python benchmarks/simulation_tables.py margin [--write]  # budget_margin 0.25 against the paper presets' 0.5
    python benchmarks/simulation_tables.py chained --part zero|lab|high [--preset P] [--seeds N] [--search F=V] [--write]
                                                             # the chained bracket against the grid (issue 40)
    python benchmarks/simulation_tables.py rules --part zero|lab [--preset P] [--seeds N] [--write]
                                                             # search.predict, prune_at_equal_tokens, lr_prior (issue 40)

Each run is ``cbs study simulate PRESET --truth paper --noise σ --seeds N`` (in-process, the same
code); ``--write`` stores its JSON and text report under the results folder, as the READMEs there
name them. The table is printed as Markdown. Simulation only; nothing is trained.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROOT = Path(__file__).resolve().parents[1]
PRESETS = ("paper-chinchilla", "paper-fixed-d", "paper-fixed-n")


LAB_CURVES = ROOT / "docs/results/cheaper-search/lab-curves.json"


_SPEC = object()  # "the spec's own value" where None is a value (lr_prior)


def run(preset: str, noise: float, seeds: int, order: str | None = None, far: bool | None = None,
        curves: Path | None = None, fraction: float | None = None, predict: bool | None = None,
        prior: float | None | object = _SPEC, optimum: float | None = None, margin: float | None = None) -> dict:
    """One ``cbs study simulate`` as JSON (``--order``, ``--stop-far-rates``, ``--curves``,
    ``--far-rate-fraction``, ``--predict``, ``--lr-prior``, ``--lr-optimum``)."""
    from cbscore.study import simulate as sim
    from cbscore.study.presets import load_preset
    from cbscore.study.sim_trials import SimConfig

    spec = load_preset(preset)
    if order is not None:
        spec = spec.replace(search=dataclasses.replace(spec.search, order=order))
    if far is not None:
        spec = spec.replace(stop_far_rates=far)
    if fraction is not None:
        spec = spec.replace(far_rate_fraction=fraction)
    if predict is not None:
        spec = spec.replace(experimental=dataclasses.replace(spec.experimental, predict=predict))
    if margin is not None:
        spec = spec.replace(budget_margin=margin)
    if prior is not _SPEC:
        spec = spec.replace(experimental=dataclasses.replace(spec.experimental, lr_prior=prior))
    config = SimConfig(noise_sigma=noise, curves=None if curves is None else str(curves), lr_optimum_ref=optimum)
    return sim.simulate(spec, sim.paper_truth(spec), config, seeds=seeds).to_json_dict()


def _keep(folder: Path, stem: str, d: dict) -> None:
    from cbscore.study.simulate import format_report

    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{stem}.json").write_text(json.dumps(d, indent=1) + "\n")
    (folder / f"{stem}.txt").write_text(format_report(d) + "\n")


def pct(v: float | None) -> str:
    return "—" if v is None else f"{v:+.1%}"


def _ratio(d: dict) -> str:
    """Study/oracle: the median over seeds and the worst seed."""
    return f"{d['ratio_to_oracle_median']:.2f}× ({d['ratio_to_oracle_max']:.2f}×)"


def _bias(d: dict) -> str:
    """The range over settings of the median B* against the truth."""
    s = d["settings"]
    return f"{min(x['bias_vs_truth'] for x in s):+.1%} to {max(x['bias_vs_truth'] for x in s):+.1%}"


def _off(d: dict) -> str:
    """The worst setting's share of seeds more than 2% off the full grid."""
    return f"{max(x['share_off_grid_2pct'] for x in d['settings']):.0%}"


def _worst(d: dict) -> str:
    """The worst seed's |study/grid − 1| over every setting."""
    return f"{max((abs(x['worst_vs_grid']) for x in d['settings'] if x['worst_vs_grid'] is not None), default=0.0):.1%}"


def paper_table(write: bool) -> None:
    folder = ROOT / "docs/results/simulate-paper"
    runs = {}
    for preset in PRESETS:
        # 200 seeds: the median of 50 has a sampling error of about 1.2% at σ = 0.1, too close to
        # the ±2% it is held to (a second draw of the noise moved settings from +1.4% to +2.9%).
        for noise, seeds in ((0.0, 1), (0.1, 200), (0.25, 200)):
            d = runs[(preset, noise)] = run(preset, noise, seeds)
            if write:
                _keep(folder, f"{preset}-noise{noise:g}", d)
    print("| preset | setting | B* truth | σ = 0 vs truth | σ = 0.1 vs truth (fit / min) | σ = 0.1 seeds > 2% off grid "
          "| σ = 0.1 p95 \\|off\\| | σ = 0.25 vs truth (fit / min) | σ = 0.25 seeds > 2% off | σ = 0.25 p95 \\|off\\| |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for preset in PRESETS:
        rows = [{s["setting"]: s for s in runs[(preset, n)]["settings"]} for n in (0.0, 0.1, 0.25)]
        for name, s0 in rows[0].items():
            s1, s2 = rows[1][name], rows[2][name]
            print(f"| {preset} | {name} | {s0['cbs_truth']:.0f} | {pct(s0['bias_vs_truth'])} | "
                  f"{pct(s1['bias_vs_truth'])} / {pct(s1['bias_vs_truth_min'])} | {s1['share_off_grid_2pct']:.0%} | "
                  f"{s1['p95_abs_vs_grid']:.1%} | {pct(s2['bias_vs_truth'])} / {pct(s2['bias_vs_truth_min'])} | "
                  f"{s2['share_off_grid_2pct']:.0%} | {s2['p95_abs_vs_grid']:.1%} |")
    for (preset, noise), d in runs.items():
        if noise:
            print(f"- {preset} σ = {noise:g}: study {d['tokens_share_of_fixed_budget_grid']:.1%} of the fixed-budget grid, "
                  f"{d['tokens_study_mean'] / d['tokens_grid_to_target_mean']:.0%} of the grid run to target, "
                  f"study/oracle {d['ratio_to_oracle_median']:.2f}×")


def order_table(write: bool) -> None:
    folder = ROOT / "docs/results/cheaper-search/order"
    print("| preset | search.order | seeds | study/oracle (median, worst) | fit-window floor/oracle | median B* vs truth "
          "(range over settings) | seeds > 2% off grid (worst setting) | worst \\|study/grid − 1\\| |")
    print("|---|---|---|---|---|---|---|---|")
    for seeds in (50, 200):
        for preset in PRESETS:
            for order in ("grid", "predicted"):
                d = run(preset, 0.1, seeds, order, far=False)  # the table of order alone (stop_far_rates: off)
                if write:
                    _keep(folder, f"{preset}-order-{order}" + ("" if seeds == 50 else f"-{seeds}seeds"), d)
                s = d["settings"]
                worst = max((abs(x["worst_vs_grid"]) for x in s if x["worst_vs_grid"] is not None), default=0.0)
                print(f"| {preset} | {order} | {seeds} | {d['ratio_to_oracle_median']:.2f}× ({d['ratio_to_oracle_max']:.2f}×) | "
                      f"{d['fit_window_to_oracle_median']:.2f}× | {min(x['bias_vs_truth'] for x in s):+.1%} to "
                      f"{max(x['bias_vs_truth'] for x in s):+.1%} | {max(x['share_off_grid_2pct'] for x in s):.0%} | "
                      f"{worst:.1%} |")


def far_table(write: bool, fraction: float | None = None) -> None:
    """stop_far_rates off and on at σ = 0.1: 50 seeds on both curve models, 200 on the lab's;
    ``fraction``: ``far_rate_fraction`` (the spec's default when ``None``; files are written for
    the default only)."""
    folder = ROOT / "docs/results/cheaper-search/far-rates"
    write = write and fraction is None
    print("| preset | stop_far_rates | curves | seeds | study/oracle (median, worst) | fit-window floor/oracle | "
          "median B* vs truth (range over settings) | seeds > 2% off grid (worst setting) | worst \\|study/grid − 1\\| |")
    print("|---|---|---|---|---|---|---|---|---|")
    for preset in PRESETS:
        for far, curves, seeds in ((False, None, 50), (True, None, 50), (True, LAB_CURVES, 50), (True, LAB_CURVES, 200)):
            d = run(preset, 0.1, seeds, far=far, curves=curves, fraction=fraction)
            name = "lab" if curves is not None else "power-law"
            if write:
                _keep(folder, f"{preset}-far-{'on' if far else 'off'}-{name}-{seeds}seeds", d)
            s = d["settings"]
            worst = max((abs(x["worst_vs_grid"]) for x in s if x["worst_vs_grid"] is not None), default=0.0)
            print(f"| {preset} | {'on' if far else 'off'} | {name if far else '—'} | {seeds} | "
                  f"{d['ratio_to_oracle_median']:.2f}× ({d['ratio_to_oracle_max']:.2f}×) | "
                  f"{d['fit_window_to_oracle_median']:.2f}× | {min(x['bias_vs_truth'] for x in s):+.1%} to "
                  f"{max(x['bias_vs_truth'] for x in s):+.1%} | {max(x['share_off_grid_2pct'] for x in s):.1%} | "
                  f"{worst:.1%} |", flush=True)


def prior_table(write: bool) -> None:
    """``search.lr_prior`` (the paper presets' 0.00316) against the grid's middle, at σ = 0.1 and 50
    seeds: with the simulated truth's η* at the grid's middle (the prior one grid step off) and at
    the prior itself, with ``search.predict`` off (the default) and on (where the first cell runs
    only three rates around it)."""
    folder = ROOT / "docs/results/cheaper-search/prior"
    print("| preset | η* at B_ref (truth) | search.predict | first prediction | study/oracle (median, worst) | "
          "tokens vs the grid middle | median B* vs truth (range over settings) | seeds > 2% off grid (worst setting) | "
          "worst \\|study/grid − 1\\| |")
    print("|---|---|---|---|---|---|---|---|---|")
    for preset in PRESETS:
        for optimum in (None, 0.00316):
            for predict in (False, True):
                base = None
                for prior in (None, 0.00316):
                    d = run(preset, 0.1, 50, predict=predict, prior=prior, optimum=optimum)
                    if write:
                        _keep(folder, f"{preset}-truth-{'middle' if optimum is None else optimum}-predict-"
                                      f"{'on' if predict else 'off'}-prior-{'middle' if prior is None else prior}", d)
                    base = base or d["tokens_study_mean"]
                    print(f"| {preset} | {'grid middle' if optimum is None else optimum} | {'on' if predict else 'off'} | "
                          f"{'grid middle' if prior is None else f'lr_prior {prior}'} | {_ratio(d)} | "
                          f"{d['tokens_study_mean'] / base:.3f}× | {_bias(d)} | {_off(d)} | {_worst(d)} |", flush=True)


def margin_table(write: bool) -> None:
    """``budget_margin`` 0.25 (the spec default) against 0.5 (the paper presets' since stop 36): at
    σ = 0.1 on 200 seeds of power-law curves and 50 of the lab's, and at σ = 0.25 on 50."""
    folder = ROOT / "docs/results/cheaper-search/budget-margin"
    print("| preset | σ | curves | seeds | budget_margin | study/oracle (median, worst) | tokens vs 0.25 | "
          "median B* vs truth (range over settings) | seeds > 2% off grid (worst setting) | "
          "p95 \\|study/grid − 1\\| (worst setting) | worst \\|study/grid − 1\\| |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for preset in PRESETS:
        for noise, curves, seeds in ((0.1, None, 200), (0.1, LAB_CURVES, 50), (0.25, None, 50)):
            base = None
            for margin in (0.25, 0.5):
                d = run(preset, noise, seeds, curves=curves, margin=margin)
                name = "lab" if curves is not None else "power-law"
                if write:
                    _keep(folder, f"{preset}-noise{noise:g}-{name}-{seeds}seeds-margin{margin:g}", d)
                base = base or d["tokens_study_mean"]
                p95 = max(x["p95_abs_vs_grid"] for x in d["settings"])
                print(f"| {preset} | {noise:g} | {name} | {seeds} | {margin:g} | {_ratio(d)} | "
                      f"{d['tokens_study_mean'] / base:.3f}× | {_bias(d)} | {_off(d)} | {p95:.1%} | {_worst(d)} |",
                      flush=True)


#: σ = 0 judges of structural bias (issue 40, criterion 1): ``(name, γ, peak, truth shape, k)``:
#: η*(B) ∝ B^γ, or √B up to 4·B_ref and B^-0.3 past it (Li et al. 2024, arXiv 2405.14578); a knee
#: that moves with D (``--truth-shape knee:0.3``); a learning-rate curvature k of 0.3 (the lab's 0.198).
CHAINED_LAWS = (("sqrt", 0.5, None, None, None), ("0.3", 0.3, None, None, None), ("0.7", 0.7, None, None, None),
                ("peak", 0.5, "peak", None, None), ("sqrt-knee", 0.5, None, "knee:0.3", None),
                ("sqrt-k0.3", 0.5, None, None, 0.3))


def run_search(preset: str, kind: str, config, seeds: int, shape: str | None = None, reference: str = "grid",
               ratio: float = 2.0, margin: float | None = None, search: dict | None = None) -> dict:
    """One ``cbs study simulate`` of ``preset`` with its search as given (``grid``) or ``chained``
    (its reference cell's ``reference_rates``: ``grid`` or ``bracket``; ``search``: more of the
    chained search's fields, ``{name: value}``)."""
    from cbscore.study import simulate as sim
    from cbscore.study.presets import load_preset

    spec = load_preset(preset)
    if kind != spec.search.kind:
        spec = spec.replace(search=dataclasses.replace(spec.search, kind=kind, reference_rates=reference,
                                                       bracket_ratio=ratio),
                            experimental=dataclasses.replace(spec.experimental, lr_prior=None,
                                                             predict=False if kind == "chained" else spec.experimental.predict))
    if search and kind == "chained":
        spec = spec.replace(search=dataclasses.replace(spec.search, **search))
    if margin is not None:
        spec = spec.replace(budget_margin=margin)
    truth = sim.paper_truth(spec)
    if shape is not None:
        truth = sim.apply_truth_shape(truth, spec, shape)
    return sim.simulate(spec, truth, config, seeds=seeds).to_json_dict()


#: The rules issue 40 judges for leaving the product: ``(name, search changes, spec changes)``.
RULES = (("predict", {"predict": True}, {}), ("equal-tokens", {}, {"prune_at_equal_tokens": True}),
         ("predict-equal-tokens", {"predict": True}, {"prune_at_equal_tokens": True}),
         ("no-prior", {"lr_prior": None}, {}))


def rules_table(write: bool, part: str, presets: tuple[str, ...], seeds: int) -> None:
    """``search.predict``, ``prune_at_equal_tokens`` and ``search.lr_prior`` against the criteria:
    ``zero`` (σ = 0 under every law of :data:`CHAINED_LAWS`) or ``lab`` (the lab's noise, ``seeds``)."""
    import time

    from cbscore.study import simulate as sim
    from cbscore.study.presets import load_preset
    from cbscore.study.sim_trials import LAB_NOISE, SimConfig

    folder = ROOT / "docs/results/cheaper-search/chained/rules"
    print("| preset | rule | noise | η*(B) law / truth shape | seeds | study/oracle (median) | RMSE ln B* study / grid "
          "| precision-adjusted | median B* vs truth (range over settings) | criteria 1 / 2 / 3 | wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for preset in presets:
        # (At the lab's noise the two rules alone: their pair and lr_prior are judged at σ = 0.)
        for rule, search, changes in (RULES if part == "zero" else RULES[:2]):
            base = load_preset(preset)
            spec = base.replace(experimental=dataclasses.replace(base.experimental, **search, **changes))
            if part == "zero":
                cases = [(f"noise0-{name}", SimConfig(noise_sigma=0.0, lr_penalty=k or LAB_NOISE["lr_penalty"],
                                                      lr_optimum_exponent=gamma,
                                                      lr_peak_batch=None if peak is None else 4 * 256), 1, shape, name)
                         for name, gamma, peak, shape, k in CHAINED_LAWS]
            else:
                cases = [(f"lab-{seeds}seeds", SimConfig(**LAB_NOISE), seeds, None, "sqrt")]
            for stem, config, n, shape, law in cases:
                t0 = time.perf_counter()
                truth = sim.paper_truth(spec)
                if shape is not None:
                    truth = sim.apply_truth_shape(truth, spec, shape)
                d = sim.simulate(spec, truth, config, seeds=n).to_json_dict()
                wall = time.perf_counter() - t0
                if write:
                    _keep(folder, f"{preset}-{rule}-{stem}", d)
                s = d["settings"]
                rmse = tuple(sum((x[k] or 0.0) ** 2 for x in s) ** 0.5 for k in ("rmse_ln_cbs_study", "rmse_ln_cbs_grid"))
                adj = d.get("precision_adjusted_to_oracle")
                crit = " / ".join("—" if d.get(k) is None else ("met" if d[k] else "NOT") for k in
                                  ("criterion_structural_bias", "criterion_median_bias", "criterion_precision"))
                print(f"| {preset} | {rule} | {'0' if part == 'zero' else 'lab'} | {law} | {n} | "
                      f"{d['ratio_to_oracle_median']:.2f}× | {rmse[0]:.3f} / {rmse[1]:.3f} | "
                      f"{'—' if adj is None else f'{adj:.2f}×'} | {_bias(d)} | {crit} | {wall:.0f} |", flush=True)


def chained_table(write: bool, part: str, presets: tuple[str, ...], seeds: int,
                  kinds: tuple[str, ...] = ("chained", "grid"), laws: tuple[str, ...] = ("sqrt", "peak"),
                  reference: str = "grid", ratio: float = 2.0, margin: float | None = None,
                  search: dict | None = None) -> None:
    """The chained bracket against the grid (issue 40): ``zero`` (σ = 0, the lab's learning-rate
    curvature, every law of :data:`CHAINED_LAWS`, one seed), ``lab`` (the lab's calibrated noise,
    ``seeds`` studies) or ``high`` (σ = 0.25 per trial beside the lab's seed parts, 50 studies)."""
    import time

    from cbscore.study.sim_trials import LAB_NOISE, SimConfig

    folder = ROOT / "docs/results/cheaper-search/chained"
    print("| preset | search | noise | η*(B) law / truth shape | seeds | study/oracle (median) | RMSE ln B* study / grid "
          "| precision-adjusted | median B* vs truth (range over settings) | criteria 1 / 2 / 3 | wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for preset in presets:
        for kind in kinds:
            if part == "zero":
                cases = [(f"noise0-{name}", SimConfig(noise_sigma=0.0, lr_penalty=k or LAB_NOISE["lr_penalty"],
                                                      lr_optimum_exponent=gamma,
                                                      lr_peak_batch=None if peak is None else 4 * 256), 1, shape, name)
                         for name, gamma, peak, shape, k in CHAINED_LAWS]
            elif part == "lab":
                cases = [c for c in ((f"lab-{seeds}seeds", SimConfig(**LAB_NOISE), seeds, None, "sqrt"),
                                     (f"lab-peak-{seeds}seeds", SimConfig(**LAB_NOISE, lr_peak_batch=4 * 256), seeds,
                                      None, "peak")) if c[-1] in laws]
            else:
                cases = [("noise0.25-50seeds", SimConfig(**{**LAB_NOISE, "noise_sigma": 0.25}), 50, None, "sqrt")]
            for stem, config, n, shape, law in cases:
                t0 = time.perf_counter()
                d = run_search(preset, kind, config, n, shape, reference, ratio, margin, search)
                wall = time.perf_counter() - t0
                variant = "-refbracket" if kind == "chained" and reference == "bracket" else ""
                variant += f"-ratio{ratio:g}" if kind == "chained" and ratio != 2.0 else ""
                variant += f"-margin{margin:g}" if margin is not None else ""
                variant += "".join(_stem_part(k, v) for k, v in (search or {}).items()) if kind == "chained" else ""
                if write:
                    _keep(folder, f"{preset}-{kind}{variant}-{stem}", d)
                s = d["settings"]
                rmse = tuple(sum((x[k] or 0.0) ** 2 for x in s) ** 0.5 for k in ("rmse_ln_cbs_study", "rmse_ln_cbs_grid"))
                adj = d.get("precision_adjusted_to_oracle")
                crit = " / ".join("—" if d.get(k) is None else ("met" if d[k] else "NOT") for k in
                                  ("criterion_structural_bias", "criterion_median_bias", "criterion_precision"))
                noise = "0" if part == "zero" else "lab" if part == "lab" else "lab + σ 0.25"
                print(f"| {preset} | {kind}{variant} | {noise} | {law} | {n} | "
                      f"{d['ratio_to_oracle_median']:.2f}× | {rmse[0]:.3f} / {rmse[1]:.3f} | "
                      f"{'—' if adj is None else f'{adj:.2f}×'} | {_bias(d)} | {crit} | {wall:.0f} |", flush=True)


def _stem_part(name: str, value) -> str:
    """A search field in a file stem: ``-extension_gain0.2``, ``-chain_centre-vertex``,
    ``-replicate_batch_sizes512_16384``."""
    if isinstance(value, (list, tuple)):
        return f"-{name}" + "_".join(f"{v:g}" for v in value)
    return f"-{name}{value:g}" if isinstance(value, (int, float)) else f"-{name}-{value}"


def _search_fields(items) -> dict:
    """``["extension_gain=0.2", ...]`` as ``{"extension_gain": 0.2}`` (values read as YAML)."""
    import yaml

    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise SystemExit(f"--search: expected FIELD=VALUE, but got {item!r}.")
        out[name.strip()] = yaml.safe_load(value)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("table", choices=("paper", "order", "far", "prior", "margin", "chained", "rules"))
    ap.add_argument("--part", choices=("zero", "lab", "high"), default="lab",
                    help="chained: σ = 0 under every η* law, the lab's noise, or σ = 0.25 beside it")
    ap.add_argument("--preset", action="append", default=None, help="chained: only these presets (repeatable)")
    ap.add_argument("--seeds", type=int, default=200, help="chained --part lab: simulated studies")
    ap.add_argument("--kind", action="append", choices=("chained", "grid"), default=None,
                    help="chained: only these search kinds (repeatable)")
    ap.add_argument("--reference", choices=("grid", "bracket"), default="grid",
                    help="chained: what the reference cell runs (search.reference_rates)")
    ap.add_argument("--ratio", type=float, default=2.0, help="chained: search.bracket_ratio")
    ap.add_argument("--budget-margin", type=float, default=None, help="chained: the spec's budget_margin instead")
    ap.add_argument("--law", action="append", choices=("sqrt", "peak"), default=None,
                    help="chained --part lab: only these η* laws (repeatable)")
    ap.add_argument("--search", action="append", default=None, metavar="FIELD=VALUE",
                    help="chained: set a field of the chained search (repeatable; the value is read as YAML), "
                         "named in the file stems, e.g. --search extension_gain=0.2")
    ap.add_argument("--write", action="store_true", help="store each run's JSON and text report")
    ap.add_argument("--fraction", type=float, default=None,
                    help="far: far_rate_fraction instead of the spec's default (nothing is written)")
    args = ap.parse_args(argv)
    if args.table == "rules":
        rules_table(args.write, args.part, tuple(args.preset or PRESETS), args.seeds)
    elif args.table == "chained":
        chained_table(args.write, args.part, tuple(args.preset or PRESETS), args.seeds,
                      tuple(args.kind or ("chained", "grid")), tuple(args.law or ("sqrt", "peak")), args.reference,
                      args.ratio, args.budget_margin, _search_fields(args.search or ()))
    elif args.table == "far":
        far_table(args.write, args.fraction)
    else:
        {"paper": paper_table, "order": order_table, "prior": prior_table, "margin": margin_table}[args.table](args.write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
