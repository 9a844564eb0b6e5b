"""What a simulation reports (:mod:`cbscore.study.simulate`): per setting and seed its
:class:`SettingOutcome`, per seed a :class:`StudyOutcome`, over seeds the :class:`SimulationReport`
with its summary, its JSON and the text of ``cbs study simulate``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from cbscore.study.sim_trials import SimConfig

#: GPU-hours are quoted at this throughput: an H100 SXM's dense bf16 peak at 40% MFU (FLOP/s).
GPU_FLOPS = 989e12 * 0.4


@dataclass(frozen=True, kw_only=True)
class SettingOutcome:
    """One setting of one simulated study."""

    setting_id: str
    cbs_truth: float
    """B* of the truth curve by the paper's rule (:meth:`cbscore.study.sim_truth.Truth.cbs`)."""
    cbs_grid: float | None
    """B* fitted to the full grid's S(B) (every learning rate run to its crossing), with the
    configured estimator."""
    cbs_study: float | None
    """B* fitted to the planner's S(B); ``None`` where the fit refused (``error``)."""
    cbs_grid_min: float | None
    """B* of the full grid with the paper's minimum over rates per cell."""
    cbs_study_min: float | None
    """B* of the study with the paper's minimum over rates per cell."""
    error: str | None
    """Why the study's fit refused, if it did."""
    tokens_study: int
    """Training tokens the planner's study spent on this setting."""
    tokens_grid_to_target: int
    """Tokens of the full grid run to each trial's own crossing (diverged trials to warm-up)."""
    tokens_oracle: int = 0
    """The oracle (:mod:`cbscore.study.costs`): per cell and seed the tokens of the full grid's
    best trial to its stop at the target; D per seed at B_ref."""
    tokens_fit_window: int = 0
    """The fit-window floor (``sim_outcomes._grid_trials``): the tokens of the full grid's trials
    that its fit across rates reads, each to its stop at the target, and three reference rates to D
    per seed. No rule spends less and reads every one of those crossings."""
    censored_cells: tuple[int, ...]
    """Batch sizes that ended with every trial censored (lower bounds)."""
    skipped_cells: tuple[int, ...]
    """Batch sizes the planner never ran."""
    edge: bool = False
    """Whether a cell's best rate was still at an edge of the (extended) grid."""
    cbs_ci: tuple[float, float] | None = None
    """The 95% interval of the study's B* from ``cbscore.analysis.analyze_setting`` (with
    :attr:`SimConfig.bootstrap`); ``None`` without one."""


@dataclass(frozen=True, kw_only=True)
class LawOutcome:
    """One scaling law of one simulated study against the same law fitted to the true B*."""

    law: str
    """The law in words (its variable and what its settings share)."""
    exponent_truth: float
    """The exponent of the law fitted to the settings' true B*."""
    exponent: float
    """The exponent the study's analysis found."""
    exponent_ci: tuple[float, float] | None
    """Its interval (``None`` where the analysis gives none, e.g. two settings)."""


@dataclass(frozen=True, kw_only=True)
class StudyOutcome:
    """One simulated study (one seed)."""

    seed: int
    settings: tuple[SettingOutcome, ...]
    tokens_study: int
    """Tokens the whole study spent."""
    flops_study: float
    """Training FLOPs of those tokens."""
    trials: int
    """Trials started."""
    max_trial_tokens: int
    """Tokens of the largest single trial (what a single-pass corpus must hold)."""
    pruned_tokens_by_rule: Mapping[str, int] = field(default_factory=dict)
    """Tokens of the pruned trials by the rule that stopped them (``plan_result.STOP_RULES``)."""
    laws: tuple[LawOutcome, ...] = ()
    """The scaling laws against the truth's (with :attr:`SimConfig.bootstrap`)."""


@dataclass(frozen=True, kw_only=True)
class SimulationReport:
    """Several seeds of one spec against one truth."""

    spec_name: str
    config: SimConfig
    seeds: tuple[StudyOutcome, ...]
    grid_tokens: int
    """Tokens of the fixed-budget grid (every trial its whole planned budget): the upper bound the
    dry run prints."""
    grid_flops: float
    truth: str = ""
    """The truths' shapes in words (:attr:`cbscore.study.sim_truth.Truth.kind`)."""
    predict: bool = False
    """The spec's ``search.predict``."""
    search: str = "grid"
    """The spec's search in words: ``grid``, or ``chained (reference bracket)`` (``search.kind`` and,
    for a chained search, ``search.reference_rates``)."""
    order: str = "predicted"
    """The spec's ``search.order``."""
    lr_prior: float | None = None
    """The spec's ``search.lr_prior`` (``None``: the grid's geometric middle)."""
    budget_margin: float = 0.25
    """The spec's ``budget_margin`` (step caps at ``(1 + budget_margin)·S`` of the next smaller B)."""
    prune_at_equal_tokens: bool = False
    """The spec's ``prune_at_equal_tokens``."""
    stop_far_rates: bool = False
    """The spec's ``stop_far_rates``."""
    far_rate_margin: float = 0.3
    """The spec's ``far_rate_margin`` (nats)."""
    far_rate_fraction: float = 0.5
    """The spec's ``far_rate_fraction``."""

    def summary(self) -> list[dict]:
        """Per setting: truth, full-grid and study B* (median and spread over seeds), the bias of the
        protocol against the truth for both estimators, the tails of study against grid (share of
        seeds more than 2% off, 95th percentile and worst), tokens."""
        out = []
        for i, first in enumerate(self.seeds[0].settings):
            rows = [s.settings[i] for s in self.seeds]
            study = _finite([r.cbs_study for r in rows])
            grid = _finite([r.cbs_grid for r in rows])
            study_min = _finite([r.cbs_study_min for r in rows])
            rel = study / first.cbs_truth - 1.0
            cis = [(r.cbs_ci, r.cbs_truth) for r in rows if r.cbs_ci is not None]
            vs_grid = np.array([r.cbs_study / r.cbs_grid - 1.0 for r in rows
                                if r.cbs_study is not None and r.cbs_grid is not None])
            worst = float(vs_grid[np.argmax(np.abs(vs_grid))]) if vs_grid.size else None
            out.append({
                "setting": first.setting_id,
                "cbs_truth": first.cbs_truth,
                "cbs_grid_median": _median(grid),
                "cbs_study_median": _median(study),
                "cbs_study_p05": float(np.percentile(study, 5)) if study.size else None,
                "cbs_study_p95": float(np.percentile(study, 95)) if study.size else None,
                "bias_vs_truth": _median(rel),
                "bias_vs_truth_grid": _median(grid / first.cbs_truth - 1.0),
                "bias_vs_truth_min": _median(study_min / first.cbs_truth - 1.0),
                "bias_vs_grid": _median(vs_grid),
                "share_off_grid_2pct": float(np.mean(np.abs(vs_grid) > 0.02)) if vs_grid.size else None,
                "p95_abs_vs_grid": float(np.percentile(np.abs(vs_grid), 95)) if vs_grid.size else None,
                "worst_vs_grid": worst,
                "spread_rel_sd": float(np.std(np.log(study))) if study.size > 1 else 0.0,
                # RMSE of ln B* against the truth over seeds: bias and spread together.
                "rmse_ln_cbs_study": _rmse_log(study, first.cbs_truth),
                "rmse_ln_cbs_grid": _rmse_log(grid, first.cbs_truth),
                "intervals": len(cis),
                "coverage": float(np.mean([lo <= t <= hi for (lo, hi), t in cis])) if cis else None,
                "ci_log_width_median": (float(np.median([math.log(hi / lo) if lo > 0 else math.inf
                                                         for (lo, hi), _ in cis])) if cis else None),
                "fit_failures": sum(1 for r in rows if r.cbs_study is None),
                "edge_seeds": sum(1 for r in rows if r.edge),
                "tokens_study_mean": float(np.mean([r.tokens_study for r in rows])),
                "tokens_grid_to_target_mean": float(np.mean([r.tokens_grid_to_target for r in rows])),
                "tokens_oracle_mean": float(np.mean([r.tokens_oracle for r in rows])),
                "precision_adjusted": _precision_adjusted(
                    float(np.mean([r.tokens_study for r in rows])), float(np.mean([r.tokens_oracle for r in rows])),
                    _rmse_log(study, first.cbs_truth), _rmse_log(grid, first.cbs_truth)),
                "censored_cells": sorted({b for r in rows for b in r.censored_cells}),
                "skipped_cells": sorted({b for r in rows for b in r.skipped_cells}),
            })
        return out

    def criteria(self) -> dict:
        """The three criteria a rule or design must meet to be a default (DESIGN.md §1,
        "Budgets that cannot bias B*"), judged against the truth, never against one noisy grid:

        1. *no structural bias*: at zero noise, every setting's median B* within 0.5% of the truth
           (``None`` when this simulation has noise: it cannot tell);
        2. *median bias* within ±2% of the truth in every setting (meant at the lab's noise and ≥ 200
           seeds; the report says how many it had);
        3. *precision per token*: study/oracle tokens × (RMSE of ln B* / the full grid's RMSE)², at the
           study level with the settings' squared RMSEs summed; ≤ 3× now, 2.5× the goal.
        """
        rows = self.summary()
        quiet = (self.config.noise_sigma == 0 and self.config.seed_common_sigma == 0
                 and self.config.seed_cell_sigma == 0 and self.config.eval_noise == 0)
        biases = [r["bias_vs_truth"] for r in rows]
        known = [b for b in biases if b is not None]
        structural = (all(abs(b) <= STRUCTURAL_BIAS for b in known) and len(known) == len(biases)) if quiet else None
        median_ok = all(abs(b) <= MEDIAN_BIAS for b in known) and len(known) == len(biases)
        oracle = float(np.mean([sum(x.tokens_oracle for x in s.settings) for s in self.seeds]))
        tokens = float(np.mean([s.tokens_study for s in self.seeds]))
        study_ms = [r["rmse_ln_cbs_study"] for r in rows]
        grid_ms = [r["rmse_ln_cbs_grid"] for r in rows]
        adjusted = None
        if oracle > 0 and all(v is not None for v in study_ms + grid_ms):
            adjusted = _precision_adjusted(tokens, oracle, math.sqrt(sum(v * v for v in study_ms)),
                                           math.sqrt(sum(g * g for g in grid_ms)))
        return {
            "criterion_structural_bias": structural,
            "criterion_median_bias": median_ok,
            "precision_adjusted_to_oracle": adjusted,
            "criterion_precision": None if adjusted is None else adjusted <= PRECISION_NOW,
        }

    def law_summary(self) -> list[dict]:
        """Per scaling law (over the seeds whose analysis fitted it): the truth's exponent, the median
        found, the share of 95% intervals that cover the truth's exponent and their median width."""
        by_law: dict[str, list[LawOutcome]] = {}
        for s in self.seeds:
            for law in s.laws:
                by_law.setdefault(law.law, []).append(law)
        out = []
        for name, laws in by_law.items():
            cis = [(x.exponent_ci, x.exponent_truth) for x in laws
                   if x.exponent_ci is not None and not any(math.isnan(v) for v in x.exponent_ci)]
            out.append({
                "law": name,
                "exponent_truth": float(np.median([x.exponent_truth for x in laws])),
                "exponent_median": float(np.median([x.exponent for x in laws])),
                "fits": len(laws),
                "intervals": len(cis),
                "coverage": float(np.mean([lo <= t <= hi for (lo, hi), t in cis])) if cis else None,
                "ci_width_median": float(np.median([hi - lo for (lo, hi), _ in cis])) if cis else None,
            })
        return out

    def to_json_dict(self) -> dict:
        tokens = float(np.mean([s.tokens_study for s in self.seeds]))
        oracle = np.array([sum(x.tokens_oracle for x in s.settings) for s in self.seeds], dtype=float)
        ratios = np.array([s.tokens_study for s in self.seeds], dtype=float) / np.maximum(oracle, 1.0)
        floor = np.array([sum(x.tokens_fit_window for x in s.settings) for s in self.seeds], dtype=float)
        flops = float(np.mean([s.flops_study for s in self.seeds]))
        return {
            "spec": self.spec_name,
            "seeds": len(self.seeds),
            "predict": self.predict,
            "search": self.search,
            "order": self.order,
            "lr_prior": self.lr_prior,
            "budget_margin": self.budget_margin,
            "lr_optimum_ref": self.config.lr_optimum_ref,
            "prune_at_equal_tokens": self.prune_at_equal_tokens,
            "stop_far_rates": self.stop_far_rates,
            "far_rate_margin": self.far_rate_margin,
            "far_rate_fraction": self.far_rate_fraction,
            "truth": self.truth,
            "noise_sigma": self.config.noise_sigma,
            "seed_common_sigma": self.config.seed_common_sigma,
            "seed_cell_sigma": self.config.seed_cell_sigma,
            "lr_law": self.config.lr_law(),
            "bootstrap": self.config.bootstrap,
            "lr_penalty": self.config.lr_penalty,
            "eval_noise": self.config.eval_noise,
            "estimator": self.config.estimator,
            "curves": self.config.curves or "power law",
            "workers": self.config.workers,
            "settings": self.summary(),
            "laws": self.law_summary(),
            "tokens_study_mean": tokens,
            "tokens_fixed_budget_grid": self.grid_tokens,
            "tokens_share_of_fixed_budget_grid": tokens / self.grid_tokens if self.grid_tokens else None,
            "tokens_grid_to_target_mean": float(np.mean([sum(x.tokens_grid_to_target for x in s.settings)
                                                         for s in self.seeds])),
            "tokens_oracle_mean": float(np.mean(oracle)),
            # Per seed, then over seeds: the median and the worst (the tail a budget must plan for).
            "ratio_to_oracle_median": float(np.median(ratios)),
            "ratio_to_oracle_p95": float(np.percentile(ratios, 95)),
            "ratio_to_oracle_max": float(np.max(ratios)),
            "tokens_fit_window_mean": float(np.mean(floor)),
            "fit_window_to_oracle_median": float(np.median(floor / np.maximum(oracle, 1.0))),
            # Mean over seeds of what each stopping rule's pruned trials trained, as a share of the study.
            "tokens_pruned_by_rule_mean": {rule: float(np.mean([s.pruned_tokens_by_rule.get(rule, 0)
                                                                for s in self.seeds]))
                                           for rule in sorted({k for s in self.seeds for k in s.pruned_tokens_by_rule})},
            "max_trial_tokens": max(s.max_trial_tokens for s in self.seeds),
            **self.criteria(),
            "gpu_hours_study": flops / GPU_FLOPS / 3600.0,
            "gpu_hours_fixed_budget_grid": self.grid_flops / GPU_FLOPS / 3600.0,
            "gpu_hours_note": "H100 SXM dense bf16 peak at 40% MFU",
        }


#: The criteria's thresholds: |median bias| at zero noise, |median bias| at the lab's noise,
#: and the precision-adjusted cost in oracles (now; the goal is :data:`PRECISION_GOAL`).
STRUCTURAL_BIAS, MEDIAN_BIAS, PRECISION_NOW, PRECISION_GOAL = 0.005, 0.02, 3.0, 2.5


def _precision_adjusted(tokens: float, oracle: float, rmse: float | None, rmse_grid: float | None) -> float | None:
    """``tokens/oracle × (rmse/rmse_grid)²``: what the design costs per unit of the full grid's precision
    (the variance of ln B* scales as 1/cost for repeats, so a design half as precise must be run twice
    to match). ``None`` without an oracle or a grid RMSE above 0."""
    if not oracle or rmse is None or rmse_grid is None:
        return None
    if max(rmse, rmse_grid) < 1e-9:  # both exact (zero noise): equally precise
        return tokens / oracle
    if rmse_grid < 1e-9:
        return None
    return tokens / oracle * (rmse / rmse_grid) ** 2


def _finite(values) -> np.ndarray:
    return np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)


def _median(values: np.ndarray) -> float | None:
    return float(np.median(values)) if values.size else None


def _rmse_log(values: np.ndarray, truth: float) -> float | None:
    """``sqrt(mean(ln(B*/B*_truth)²))`` over seeds."""
    return float(np.sqrt(np.mean(np.log(values / truth) ** 2))) if values.size and math.isfinite(truth) else None


def setting_notes(summary_row: Mapping) -> str:
    """What a row of :meth:`SimulationReport.summary` needs said beside its B*: refused fits,
    censored cells (lower bounds) and skipped cells."""
    notes = []
    if summary_row["fit_failures"]:
        notes.append(f"fit refused in {summary_row['fit_failures']} seed(s)")
    if summary_row["censored_cells"]:
        notes.append("censored (lower bounds) at B = " + ", ".join(map(str, summary_row["censored_cells"])))
    if summary_row["skipped_cells"]:
        notes.append("skipped B = " + ", ".join(map(str, summary_row["skipped_cells"])))
    if summary_row.get("edge_seeds"):
        notes.append(f"best rate at a grid edge in {summary_row['edge_seeds']} seed(s)")
    return "; ".join(notes)


def format_report(report: SimulationReport | Mapping) -> str:
    """The text of ``cbs study simulate``: medians, the protocol's bias for both estimators, and
    the tails of study against full grid. Takes the report or its ``to_json_dict()`` (a saved
    ``--json`` output reads back the same)."""
    d = report if isinstance(report, Mapping) else report.to_json_dict()
    lines = [f"simulated study {d['spec']!r}: {d['seeds']} seed(s), noise σ = {d['noise_sigma']:g}, "
             f"evaluation noise {d['eval_noise']:g} nats, learning-rate penalty k = {d['lr_penalty']:g}, "
             f"{d['workers']} trials at once, S(B) per cell by {d['estimator']!r}"]
    if "seed_common_sigma" in d:  # (older reports lack the parts)
        lines.append(f"noise (sd of ln S): per seed across every B {d['seed_common_sigma']:g}, per seed × batch "
                     f"size {d['seed_cell_sigma']:g}, per trial {d['noise_sigma']:g}; {d['lr_law']}; truth: "
                     f"{d['truth'] or '—'}")
    lines.append(f"{'setting':<24} {'B* truth':>9} {'full grid':>9} {'study':>9} {'vs truth':>9} {'(min)':>7} "
                 f"{'vs grid':>8} {'>2% off':>8} {'p95 |off|':>9} {'worst':>7} {'5-95% of seeds':>17}  notes")

    def num(x, fmt="{:.1f}"):
        return "—" if x is None else fmt.format(x)

    for s in d["settings"]:
        spread = (f"{s['cbs_study_p05']:.1f}–{s['cbs_study_p95']:.1f}" if s["cbs_study_p05"] is not None else "—")
        lines.append(f"{s['setting']:<24} {s['cbs_truth']:>9.1f} {num(s['cbs_grid_median']):>9} "
                     f"{num(s['cbs_study_median']):>9} {num(s['bias_vs_truth'], '{:+.1%}'):>9} "
                     f"{num(s['bias_vs_truth_min'], '{:+.1%}'):>7} "
                     f"{num(s['bias_vs_grid'], '{:+.1%}'):>8} {num(s['share_off_grid_2pct'], '{:.0%}'):>8} "
                     f"{num(s['p95_abs_vs_grid'], '{:.1%}'):>9} {num(s['worst_vs_grid'], '{:+.1%}'):>7} "
                     f"{spread:>17}  {setting_notes(s)}")
    lines.append("vs truth: median of study/truth − 1 over seeds; (min): the same with the paper's minimum over "
                 "rates per cell; vs grid, >2% off, p95 |off|, worst: study against the full grid seed by seed")
    lines += _truth_lines(d)
    lines.append(f"tokens: study {d['tokens_study_mean']:.4g} (mean over seeds); fixed-budget grid "
                 f"{d['tokens_fixed_budget_grid']:.4g} ({d['tokens_share_of_fixed_budget_grid']:.1%} of it); "
                 f"full grid run to each trial's target {d['tokens_grid_to_target_mean']:.4g}")
    if d.get("tokens_oracle_mean"):
        margin = f"budget_margin {d['budget_margin']:g}, " if "budget_margin" in d else ""  # (older reports lack it)
        lines.append(f"oracle (each cell's best trial to its target, D per seed at B_ref) "
                     f"{d['tokens_oracle_mean']:.4g}: study/oracle {d['ratio_to_oracle_median']:.2f}× median over "
                     f"seeds, p95 {d['ratio_to_oracle_p95']:.2f}×, worst {d['ratio_to_oracle_max']:.2f}×; full grid to "
                     f"target/oracle {d['tokens_grid_to_target_mean'] / d['tokens_oracle_mean']:.2f}×; "
                     f"fit-window floor/oracle {d.get('fit_window_to_oracle_median', math.nan):.2f}× (the crossings "
                     f"the full grid's fit reads: less means projecting some of them); "
                     f"rules: {margin}"
                     + (f"search.kind {d['search']}, " if d.get("search", "grid") != "grid" else "")
                     + f"search.order {d.get('order', 'grid')} from {_lr_prior(d)}, "
                     f"search.predict {'on' if d.get('predict') else 'off'}, "
                     f"stop_far_rates {_far_rates(d)}, prune_at_equal_tokens "
                     f"{'on' if d.get('prune_at_equal_tokens') else 'off'}; curves compared at equal tokens: "
                     f"{d.get('curves', 'power law')}")
    pruned = d.get("tokens_pruned_by_rule_mean") or {}
    if pruned and d["tokens_study_mean"]:
        lines.append("pruned trials (mean tokens over seeds, share of the study): " + ", ".join(
            f"{rule} {t:.4g} ({t / d['tokens_study_mean']:.1%})"
            for rule, t in sorted(pruned.items(), key=lambda kv: -kv[1])))
    lines.append(f"GPU-hours ({d['gpu_hours_note']}): study {d['gpu_hours_study']:.4g}, "
                 f"fixed-budget grid {d['gpu_hours_fixed_budget_grid']:.4g}; the largest trial trains "
                 f"{d['max_trial_tokens']:.4g} tokens (a single-pass corpus must hold them)")
    return "\n".join(lines)


def _truth_lines(d: Mapping) -> list[str]:
    """Against the truth, per setting: median bias of study and full grid, RMSE of ln B*, and with
    intervals the share of studies whose 95% interval covers the true B*; then per law, the same
    for its exponent."""
    rows = d["settings"]
    if not rows or "rmse_ln_cbs_study" not in rows[0]:  # (older reports)
        return []

    def num(x, fmt):
        return "—" if x is None else fmt.format(x)

    lines = [f"{'against the truth':<24} {'bias study':>10} {'bias grid':>10} {'RMSE ln B*':>11} {'(grid)':>7} "
             f"{'95% covers':>11} {'median ×width':>13}"]
    for s in rows:
        cover = f"{s['coverage']:.0%} of {s['intervals']}" if s.get("intervals") else "—"
        width = "—" if s.get("ci_log_width_median") is None else f"×{math.exp(s['ci_log_width_median']):.2f}"
        lines.append(f"{s['setting']:<24} {num(s['bias_vs_truth'], '{:+.1%}'):>10} "
                     f"{num(s['bias_vs_truth_grid'], '{:+.1%}'):>10} {num(s['rmse_ln_cbs_study'], '{:.3f}'):>11} "
                     f"{num(s['rmse_ln_cbs_grid'], '{:.3f}'):>7} {cover:>11} {width:>13}")
    for law in d.get("laws") or ():
        cover = f"{law['coverage']:.0%} of {law['intervals']}" if law["intervals"] else "no interval"
        lines.append(f"  {law['law']}: truth {law['exponent_truth']:+.3f}, median found {law['exponent_median']:+.3f}, "
                     f"95% interval covers the truth in {cover}"
                     + (f" (median width {law['ci_width_median']:.3f})" if law["ci_width_median"] is not None else ""))
    if d.get("bootstrap"):
        lines.append(f"intervals: cbscore.analysis on each study's trials, seeds included, {d['bootstrap']} resamples; "
                     "the target held fixed (a nominal 95% interval should cover the truth 90–98% of the time)")
    lines += _criteria_lines(d)
    return lines


def _criteria_lines(d: Mapping) -> list[str]:
    """The three criteria a default must meet (:meth:`SimulationReport.criteria`), per setting and for the study."""
    if "precision_adjusted_to_oracle" not in d:  # (older reports)
        return []

    def verdict(ok) -> str:
        return "—" if ok is None else ("met" if ok else "NOT met")

    per = ", ".join(f"{s['setting']} {s['precision_adjusted']:.2f}×" for s in d["settings"]
                    if s.get("precision_adjusted") is not None)
    adjusted = d["precision_adjusted_to_oracle"]
    return [
        "criteria for a default (issue 40; against the truth):",
        f"  1 no structural bias (|median bias| ≤ {STRUCTURAL_BIAS:.1%} at zero noise): "
        + (verdict(d["criterion_structural_bias"]) if d["criterion_structural_bias"] is not None
           else "— (this run has noise; run with --noise 0)"),
        f"  2 median bias within ±{MEDIAN_BIAS:.0%} in every setting: {verdict(d['criterion_median_bias'])} "
        f"({d['seeds']} simulated studies; meant at the lab's noise and ≥ 200)",
        "  3 precision per token, study/oracle × (RMSE ln B* / full grid's)²: "
        + ("—" if adjusted is None else f"{adjusted:.2f}× the oracle ({verdict(d['criterion_precision'])}: ≤ "
                                        f"{PRECISION_NOW:g}× now, {PRECISION_GOAL:g}× the goal)")
        + (f"; per setting {per}" if per else ""),
    ]


def _lr_prior(d: dict) -> str:
    """Where the first cell's prediction comes from, and where the simulated truth puts η*."""
    prior = d.get("lr_prior")
    opt = d.get("lr_optimum_ref")
    return (f"{'lr_prior ' + format(prior, 'g') if prior else 'the grid middle'} "
            f"(simulated η* at B_ref: {format(opt, 'g') if opt else 'the grid middle'})")


def _far_rates(d: dict) -> str:
    """``stop_far_rates`` as the report prints it: ``off``, or on with its margin and fraction."""
    if not d.get("stop_far_rates"):
        return "off"
    return f"on ({d.get('far_rate_margin', 0.3):g} nats from {d.get('far_rate_fraction', 0.5):g}·S)"
