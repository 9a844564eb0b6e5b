"""The study simulator: the *real* planner run against simulated trials whose truth is known.

Every rule that saves compute (budgets, step caps, pruning, skipped cells) must leave B* where
the full grid puts it (DESIGN.md §1, "Budgets that cannot bias B*"). This module proves it, or
shows where it does not hold, before a GPU-hour is spent: it drives :func:`cbscore.study.plan`
exactly as the runner does, with trials that reach the target at known steps.

The truth of a setting is a curve ``S(B) = S_min·(1 + B_noise/B)`` (McCandlish et al. 2018,
eq. 2.11; Zhang et al. 2025 fit the same ``a + b/B``). A simulated trial at learning rate η and
batch size B reaches the target after

    S_trial = S(B) · m(η, B) · exp(σ·z),   m = 1 + k·ln²(η/η*(B)),   η*(B) = η*_ref·(B/B_ref)^γ

steps (z standard normal; the optimum η* moves with B, by default as the square root of B, the
rule for Adam of Malladi et al. 2022, arXiv 2205.10287), and diverges when η exceeds
``divergence_ratio·η*(B)``. The reference runs at B_ref set the target exactly as real ones do:
the best of them reaches it at the last step of its D tokens, so each setting's truth is scaled
to put its best reference trial there (a scale of S leaves B_noise, and so B*, unchanged).

A trial evaluates every ``ceil(total_steps/40)`` steps (what the trainer does before the target is
near); it is censored past its budget and pruned when the planner says so. After the study,
``S(B)`` per batch size is the minimum over reached trials, fitted as the pages fit it.

Three B* are reported per setting: the **truth** (closed form on the truth curve), the **full
grid** (every learning rate at every batch size run to its own crossing, no budget, no pruning:
what the savings are measured against) and the **study** (what the planner's rules give).
"""

from __future__ import annotations

import heapq
import json
import math
import zlib
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from cbscore.analysis import (DEFAULT_ESTIMATOR, ESTIMATORS, EvalHistory, TrialSteps, cbs_closed_form, first_crossing,
                              fit_steps, measure_points, project_pruned)
from cbscore.errors import CbsError, ConfigError, FitError
from cbscore.study.planner import grid_tokens, plan, skipped_cells
from cbscore.study.sim_truth import (PAPER_CHINCHILLA_LAW, PAPER_FIXED_D_LAW, PAPER_FIXED_N_EXPONENT,  # noqa: F401
                                     TruthCurve, paper_truth, read_truth, write_truth_csv)
from cbscore.study.spec import Setting, StudySpec
from cbscore.study.trials import TERMINAL, TrialRecord, TrialSpec

#: Evaluations per run before the target is near (``TrainConfig.eval_every_steps`` default).
EVALS_PER_RUN = 40
#: GPU-hours are quoted at this throughput: an H100 SXM's dense bf16 peak at 40% MFU (FLOP/s).
GPU_FLOPS = 989e12 * 0.4


@dataclass(frozen=True, kw_only=True)
class SimConfig:
    """How simulated trials behave."""

    noise_sigma: float = 0.0
    """σ of the multiplicative log-normal noise on each trial's steps to target."""
    lr_penalty: float = 0.1
    """k of ``m(η) = 1 + k·ln²(η/η*)``: a learning rate a factor 2 off needs ``1 + 0.48·k`` times
    the steps."""
    lr_optimum_ref: float | None = None
    """η* at B_ref; ``None`` = the geometric middle of the spec's grid."""
    lr_optimum_exponent: float = 0.5
    """γ of ``η*(B) ∝ B^γ`` (square-root scaling for Adam, Malladi et al. 2022)."""
    divergence_ratio: float = 4.0
    """A learning rate above this multiple of η*(B) diverges (during warm-up)."""
    workers: int = 4
    """Trials running at once (the planner's order and pruning depend on it)."""
    eval_noise: float = 0.0
    """σ of each held-out evaluation's noise (nats): the crossing is read off noisy evaluations,
    and so is the reference cell's target."""
    estimator: str = DEFAULT_ESTIMATOR
    """Per-cell estimator of ``S(B)`` (:data:`cbscore.analysis._points.ESTIMATORS`); the paper's
    ``min`` is always reported beside."""
    curves: str | None = None
    """Shape of the simulated curves the planner compares at equal tokens: ``None`` is the power law
    near the target (every rate's curve the same shape, a factor apart in time); a path to the
    lab's own curves (``benchmarks/calibrate_equal_tokens.py STUDY --templates PATH``) gives each
    trial the measured curve of the rate nearest its ``η/η*``, scaled to its own crossing, warm-up
    and all."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.noise_sigma) and self.noise_sigma >= 0):
            raise ConfigError("noise", self.noise_sigma, "must be a non-negative number")
        if not (math.isfinite(self.lr_penalty) and self.lr_penalty >= 0):
            raise ConfigError("lr_penalty", self.lr_penalty, "must be a non-negative number")
        if self.lr_optimum_ref is not None and not (math.isfinite(self.lr_optimum_ref) and self.lr_optimum_ref > 0):
            raise ConfigError("lr_optimum_ref", self.lr_optimum_ref, "must be a positive number")
        if not self.divergence_ratio > 1:
            raise ConfigError("divergence_ratio", self.divergence_ratio, "must be above 1")
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise ConfigError("workers", self.workers, "must be a positive integer")
        if not (math.isfinite(self.eval_noise) and self.eval_noise >= 0):
            raise ConfigError("eval_noise", self.eval_noise, "must be a non-negative number")
        if self.estimator not in ESTIMATORS:
            raise ConfigError("estimator", self.estimator, f"must be one of {', '.join(ESTIMATORS)}")
        if self.curves is not None:
            lab_curves(self.curves)  # refused here, named, if it cannot be read


@dataclass(frozen=True, kw_only=True)
class SettingOutcome:
    """One setting of one simulated study."""

    setting_id: str
    cbs_truth: float
    """B* of the truth curve (closed form, DESIGN.md §1)."""
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
    censored_cells: tuple[int, ...]
    """Batch sizes that ended with every trial censored (lower bounds)."""
    skipped_cells: tuple[int, ...]
    """Batch sizes the planner never ran."""
    edge: bool = False
    """Whether a cell's best rate was still at an edge of the (extended) grid."""


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
    predict: bool = False
    """The spec's ``search.predict``."""
    prune_at_equal_tokens: bool = False
    """The spec's ``prune_at_equal_tokens``."""

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
                "fit_failures": sum(1 for r in rows if r.cbs_study is None),
                "edge_seeds": sum(1 for r in rows if r.edge),
                "tokens_study_mean": float(np.mean([r.tokens_study for r in rows])),
                "tokens_grid_to_target_mean": float(np.mean([r.tokens_grid_to_target for r in rows])),
                "censored_cells": sorted({b for r in rows for b in r.censored_cells}),
                "skipped_cells": sorted({b for r in rows for b in r.skipped_cells}),
            })
        return out

    def to_json_dict(self) -> dict:
        tokens = float(np.mean([s.tokens_study for s in self.seeds]))
        oracle = np.array([sum(x.tokens_oracle for x in s.settings) for s in self.seeds], dtype=float)
        ratios = np.array([s.tokens_study for s in self.seeds], dtype=float) / np.maximum(oracle, 1.0)
        flops = float(np.mean([s.flops_study for s in self.seeds]))
        return {
            "spec": self.spec_name,
            "seeds": len(self.seeds),
            "predict": self.predict,
            "prune_at_equal_tokens": self.prune_at_equal_tokens,
            "noise_sigma": self.config.noise_sigma,
            "lr_penalty": self.config.lr_penalty,
            "eval_noise": self.config.eval_noise,
            "estimator": self.config.estimator,
            "curves": self.config.curves or "power law",
            "workers": self.config.workers,
            "settings": self.summary(),
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
            "max_trial_tokens": max(s.max_trial_tokens for s in self.seeds),
            "gpu_hours_study": flops / GPU_FLOPS / 3600.0,
            "gpu_hours_fixed_budget_grid": self.grid_flops / GPU_FLOPS / 3600.0,
            "gpu_hours_note": "H100 SXM dense bf16 peak at 40% MFU",
        }


def _finite(values) -> np.ndarray:
    return np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)


def _median(values: np.ndarray) -> float | None:
    return float(np.median(values)) if values.size else None


# ------------------------------------------------------------------------------------ simulation
#: Loss the truth curve's steps reach (nats): trials' loss curves are anchored here.
LOSS_AT_TRUTH = 3.0
#: ``dL/d ln s`` near the target (nats per e-fold of steps): a trial's held-out loss is
#: ``L(s) = LOSS_AT_TRUTH + LOSS_SLOPE·ln(need/s)`` there, a power law in steps (Kaplan et al.
#: 2020, arXiv 2001.08361, eq. 5.6, locally), so a target ``δ`` nats lower takes ``e^(δ/κ)`` times
#: the steps at every batch size and learning rate alike.
LOSS_SLOPE = 0.2
#: With ``prune_at_equal_tokens``, the simulated runner looks at a trial every this many of its
#: evaluations (the real one looks every ``CBS_RUNNER_INTERVAL_S``, several evaluations apart).
EQUAL_TOKEN_WAKE = 4
#: Evaluations near the crossing: one every ``need/EVALS_NEAR_TARGET`` steps, about 8 in the
#: last quarter of the steps to target (the trainer's dense phase, cbscore.eval_schedule).
EVALS_NEAR_TARGET = 32


_LAB_CURVES: dict[str, tuple] = {}


def lab_curves(path: str) -> tuple[tuple[float, np.ndarray, np.ndarray], ...]:
    """``(ln(η/η_best), ln x (n,), nats above target (n,))`` of every curve in a templates file
    (:attr:`SimConfig.curves`), ``x`` the share of the run's own steps to target."""
    if path not in _LAB_CURVES:
        try:
            data = json.loads(Path(path).read_text())
            curves = tuple((float(c["log_rate_ratio"]), np.log(np.asarray(c["x"], dtype=float)),
                            np.asarray(c["dl"], dtype=float)) for c in data["curves"] if len(c["x"]) >= 2)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError("--curves", path, f"is not a curves file of benchmarks/calibrate_equal_tokens.py "
                                                f"--templates ({type(exc).__name__})") from None
        if not curves:
            raise ConfigError("--curves", path, "holds no curve with two or more evaluations")
        _LAB_CURVES[path] = curves
    return _LAB_CURVES[path]


@dataclass
class _Run:
    spec: TrialSpec
    start: float
    """Simulation time (tokens processed by one worker) at which the trial started."""
    steps: float
    """Steps the trial trains (to its stopping evaluation, its budget, or its divergence)."""
    outcome: str
    crossing: float | None
    eval_every: int
    batch_tokens: int
    history: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())
    """A reference run's evaluations (steps, losses): the target comes from them."""
    curve: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())
    """Any other run's evaluations every ``eval_every`` steps to its stop: the planner compares
    running trials at equal tokens with them (``prune_at_equal_tokens``)."""

    def step_at(self, now: float) -> float:
        return min(self.steps, (now - self.start) / self.batch_tokens)

    def end(self) -> float:
        return self.start + self.steps * self.batch_tokens


@dataclass
class _Sim:
    spec: StudySpec
    truth: Mapping[str, TruthCurve]
    config: SimConfig
    seed: int
    rng: np.random.Generator
    settings: dict[str, Setting] = field(default_factory=dict)
    draws: dict[tuple[str, int, float, int], float] = field(default_factory=dict)
    readings: dict[tuple, tuple[float, float] | None] = field(default_factory=dict)

    def lr_optimum(self, batch_size: int) -> float:
        lrs = self.spec.search.lrs
        ref = self.config.lr_optimum_ref or math.exp(float(np.mean(np.log(lrs))))
        return ref * (batch_size / self.spec.b_ref) ** self.config.lr_optimum_exponent

    def noise(self, key: tuple[str, int, float, int]) -> float:
        """One draw per trial (setting, B, η, seed): the study and the full grid share it."""
        if key not in self.draws:
            self.draws[key] = math.exp(self.config.noise_sigma * float(self.rng.standard_normal()))
        return self.draws[key]

    def multiplier(self, batch_size: int, lr: float) -> float | None:
        """``m(η, B)``, or ``None`` where η diverges."""
        opt = self.lr_optimum(batch_size)
        if lr > self.config.divergence_ratio * opt:
            return None
        return 1.0 + self.config.lr_penalty * math.log(lr / opt) ** 2

    def setting_scale(self, setting: Setting) -> float:
        """Put the truth's ``S(B_ref)`` at D/(B_ref·T) steps (a scale of S leaves B_noise, and so
        B*, unchanged)."""
        steps_ref = setting.tokens // (self.spec.b_ref * self.spec.context_tokens)
        return steps_ref / self.truth[setting.setting_id].steps(self.spec.b_ref)

    def need(self, setting: Setting, batch_size: int, lr: float, seed: int) -> float | None:
        """Steps one trial needs to reach :data:`LOSS_AT_TRUTH` (``None``: it diverges)."""
        m = self.multiplier(batch_size, lr)
        if m is None:
            return None
        sid = setting.setting_id
        return self.setting_scale(setting) * self.truth[sid].steps(batch_size) * m * self.noise((sid, batch_size, lr, seed))

    def eval_noise(self, key: tuple, n: int) -> np.ndarray:
        """(n,) evaluation noise of one trial (nats), the same draws in the study and the grid."""
        if self.config.eval_noise == 0.0:
            return np.zeros(n)
        rng = np.random.default_rng([self.seed, zlib.crc32(repr(key).encode())])
        return self.config.eval_noise * rng.standard_normal(n)

    def reading(self, setting: Setting, batch_size: int, lr: float, seed: int,
                target: float) -> tuple[float, float] | None:
        """``(crossing read off the evaluations, step of the evaluation that stops the trial)`` for
        ``target``, whatever the budget; ``None`` where the trial diverges.

        Evaluations every ``need/EVALS_NEAR_TARGET`` steps from 70% of the crossing on, each with
        its evaluation noise; the crossing is :func:`cbscore.analysis.first_crossing` of them, as
        the pages read it.
        """
        key = (setting.setting_id, batch_size, lr, seed, target)
        if key not in self.readings:
            need = self.need(setting, batch_size, lr, seed)
            if need is None:
                self.readings[key] = None
            else:
                cross = need * math.exp((LOSS_AT_TRUTH - target) / LOSS_SLOPE)
                every = max(1, int(cross // EVALS_NEAR_TARGET))
                steps = np.arange(max(every, int(0.7 * cross) // every * every), int(3 * cross) + 2 * every, every,
                                  dtype=float)  # (E,)
                losses = LOSS_AT_TRUTH + LOSS_SLOPE * np.log(need / steps) + self.eval_noise(key[:4], len(steps))
                hit = np.flatnonzero(losses <= target)
                if hit.size == 0:  # noise kept it above: it stops past any budget
                    self.readings[key] = (math.inf, math.inf)
                else:
                    stop = int(hit[0])
                    crossing = first_crossing(steps[:stop + 1], losses[:stop + 1], target)
                    self.readings[key] = (float(crossing), float(steps[stop]))
        return self.readings[key]

    def history(self, setting: Setting, lr: float, seed: int, total: int, every: int) -> tuple[tuple, tuple]:
        """A reference run's evaluations: every ``every`` steps to ``total``."""
        b = self.spec.b_ref
        need = self.need(setting, b, lr, seed)
        steps = np.arange(every, total + 1, every, dtype=float)
        if steps.size == 0 or steps[-1] != total:
            steps = np.append(steps, float(total))
        losses = LOSS_AT_TRUTH + LOSS_SLOPE * np.log(need / steps) + self.eval_noise((setting.setting_id, b, lr, seed),
                                                                                     len(steps))
        return tuple(float(v) for v in steps), tuple(float(v) for v in losses)

    def curve(self, setting: Setting, t: TrialSpec, steps: float, every: int, crossing: float | None,
              stop: float) -> tuple[tuple, tuple]:
        """A stopping run's evaluations every ``every`` steps up to ``steps`` (its stop), each with its
        own evaluation noise; none below the target before the evaluation that stopped it (the
        crossing is the dense schedule's, :meth:`reading`), which is appended last."""
        need = self.need(setting, t.batch_size, t.lr, t.seed)
        xs = np.arange(every, math.floor(steps) + 1, every, dtype=float)  # (E,)
        if xs.size and crossing is not None:
            xs = xs[xs < stop]
        if self.config.curves is None:
            ys = LOSS_AT_TRUTH + LOSS_SLOPE * np.log(need / xs)
        else:
            # The lab's curve of the rate nearest this one's η/η*, scaled to this trial's crossing.
            own = crossing if crossing is not None else need * math.exp((LOSS_AT_TRUTH - t.target_loss) / LOSS_SLOPE)
            ratio = math.log(t.lr / self.lr_optimum(t.batch_size))
            pool = lab_curves(self.config.curves)
            near = min(abs(c[0] - ratio) for c in pool)
            same = [c for c in pool if abs(c[0] - ratio) <= near + 1e-9]
            _, lx, dl = same[zlib.crc32(repr((setting.setting_id, t.batch_size, t.lr, t.seed)).encode()) % len(same)]
            u = np.log(xs / own)
            ys = t.target_loss + np.interp(u, lx, dl)
            past = u > lx[-1]  # past its last evaluation: on along its last slope in ln x
            if past.any():
                slope = (dl[-1] - dl[-2]) / (lx[-1] - lx[-2])
                ys[past] = t.target_loss + dl[-1] + slope * (u[past] - lx[-1])
        ys = ys + self.eval_noise((setting.setting_id, t.batch_size, t.lr, t.seed, "coarse"), len(xs))
        if t.target_loss is not None:
            ys = np.maximum(ys, t.target_loss + 1e-9)
        if crossing is not None:
            xs = np.append(xs, stop)
            ys = np.append(ys, min(t.target_loss, LOSS_AT_TRUTH + LOSS_SLOPE * math.log(need / stop)))
        return tuple(float(v) for v in xs), tuple(float(v) for v in ys)

    def start(self, t: TrialSpec, now: float) -> _Run:
        setting = self.settings[t.setting_id]
        batch_tokens = t.batch_size * self.spec.context_tokens
        budget = t.max_tokens // batch_tokens
        if t.max_steps is not None:
            budget = min(budget, t.max_steps)
        eval_every = max(1, math.ceil(budget / EVALS_PER_RUN))
        need = self.need(setting, t.batch_size, t.lr, t.seed)
        warmup = max(1, math.ceil(self.spec.warmup_fraction * setting.tokens / batch_tokens))
        if need is None:
            return _Run(t, now, min(budget, warmup), "diverged", None, eval_every, batch_tokens)
        if t.role == "reference" and t.target_loss is None:
            return _Run(t, now, budget, "finished", None, eval_every, batch_tokens,
                        history=self.history(setting, t.lr, t.seed, budget, eval_every))
        crossing, stop = self.reading(setting, t.batch_size, t.lr, t.seed, t.target_loss)
        if stop <= budget:
            curve = self.curve(setting, t, stop, eval_every, crossing, stop) if self.spec.prune_at_equal_tokens else ((), ())
            return _Run(t, now, stop, "reached", crossing, eval_every, batch_tokens, curve=curve)
        curve = self.curve(setting, t, budget, eval_every, None, math.inf) if self.spec.prune_at_equal_tokens else ((), ())
        return _Run(t, now, budget, "censored", None, eval_every, batch_tokens, curve=curve)


def _record(run: _Run, now: float, status: str | None = None) -> TrialRecord:
    t = run.spec
    step = run.step_at(now)
    done = status is not None
    if run.history[0]:
        # A reference run: its evaluations so far (all of them once it ended).
        n = len(run.history[0]) if done else sum(1 for s in run.history[0] if s <= step)
        evals, losses = run.history[0][:n], run.history[1][:n]
    elif run.curve[0]:
        # Its evaluations so far: the planner compares trials at equal tokens.
        n = len(run.curve[0]) if done else sum(1 for s in run.curve[0] if s <= step)
        evals, losses = run.curve[0][:n], run.curve[1][:n]
    else:
        # The planner reads the last evaluation (pruning) and whether any crossed (none has before
        # the trial ends): the last one stands for all of them.
        last_eval = (int(step) // run.eval_every) * run.eval_every
        evals = (float(last_eval),) if last_eval > 0 else ()
        losses = tuple(10.0 for _ in evals)  # above any target until the crossing
    final = losses[-1] if (done and run.outcome == "finished" and losses) else None
    return TrialRecord(
        trial_id=t.trial_id, cell_id=t.cell_id, setting_id=t.setting_id, role=t.role, batch_size=t.batch_size,
        lr=t.lr, status=status or "running", steps_to_target=run.crossing if status == "reached" else None,
        final_eval_loss=final, last_step=int(step),
        tokens=int(step) * run.batch_tokens, heartbeat_s=now, eval_steps=evals, eval_losses=losses,
        max_steps=t.max_steps, seed=t.seed)


def simulate_once(spec: StudySpec, truth: Mapping[str, TruthCurve], config: SimConfig, seed: int) -> StudyOutcome:
    """Run the planner against simulated trials until the study is done."""
    if spec.search.kind != "grid":
        raise ConfigError("search.kind", spec.search.kind, "the simulator runs grid searches only")
    if spec.target_losses is not None:
        raise ConfigError("target_losses", "given", "the simulator sets targets from reference runs")
    sim = _Sim(spec=spec, truth=truth, config=config, seed=seed, rng=np.random.default_rng(seed))
    sim.settings = {s.setting_id: s for s in spec.resolve_settings()}
    for setting in sim.settings.values():
        if all(sim.multiplier(spec.b_ref, lr) is None for lr in spec.search.lrs):
            raise ConfigError("search.lrs", list(spec.search.lrs),
                              f"every learning rate diverges at B_ref in the simulation of {setting.setting_id!r}")
    records: dict[str, TrialRecord] = {}
    running: dict[str, _Run] = {}
    queue: deque[TrialSpec] = deque()
    events: list[float] = []  # times at which to ask the planner again (trial ends, evaluations past a limit)
    now, started = 0.0, 0
    for _ in range(100_000):
        snapshot = [records[k] if k not in running else _record(running[k], now) for k in records]
        p = plan(spec, snapshot, now, stale_after_s=math.inf)
        for tid, reason in p.stop:
            if tid in running:
                records[tid] = _record(running.pop(tid), now, reason)
        for t in p.start:
            if t.trial_id not in records:
                records[t.trial_id] = TrialRecord(trial_id=t.trial_id, cell_id=t.cell_id, setting_id=t.setting_id,
                                                  role=t.role, batch_size=t.batch_size, lr=t.lr, status="queued",
                                                  max_steps=t.max_steps, seed=t.seed)
                queue.append(t)
        while queue and len(running) < config.workers:
            t = queue.popleft()
            run = sim.start(t, now)
            running[t.trial_id] = run
            records[t.trial_id] = _record(run, now)
            started += 1
            heapq.heappush(events, run.end())
        if p.done or (not running and not queue):
            break
        # Pruning happens at evaluations: wake up at each running trial's first evaluation past
        # (1 + margin)·best of its seed in its cell, where a best is known.
        best: dict[tuple[str, int], float] = {}
        for r in snapshot:
            if r.status == "reached" and r.steps_to_target is not None and r.role == "trial":
                best[(r.cell_id, r.seed)] = min(best.get((r.cell_id, r.seed), math.inf), r.steps_to_target)
        for run in running.values():
            b = best.get((run.spec.cell_id, run.spec.seed))
            if b is None or run.spec.role != "trial":
                continue
            limit = (1 + spec.prune_margin) * b
            k = math.floor(limit / run.eval_every) + 1
            at = run.start + k * run.eval_every * run.batch_tokens
            if k * run.eval_every <= run.steps and at > now:
                heapq.heappush(events, at)
        if spec.prune_at_equal_tokens:
            # Stopping at equal tokens is decided at evaluations: wake at every EQUAL_TOKEN_WAKE-th
            # evaluation of each running trial (each wake re-plans the study: every one is slow).
            for run in running.values():
                if run.spec.role == "trial":
                    k = (math.floor(run.step_at(now) / run.eval_every) // EQUAL_TOKEN_WAKE + 1) * EQUAL_TOKEN_WAKE
                    at = run.start + k * run.eval_every * run.batch_tokens
                    if k * run.eval_every <= run.steps and at > now:
                        heapq.heappush(events, at)
        while events and events[0] <= now:
            heapq.heappop(events)
        now = heapq.heappop(events)
        for tid in [k for k, r in running.items() if r.end() <= now + 1e-9]:
            run = running.pop(tid)
            records[tid] = _record(run, run.end(), run.outcome)
    else:  # pragma: no cover - a planner that never finishes is a bug worth a clear message
        raise CbsError(f"the simulated study {spec.name!r} did not finish in 100,000 planner calls")
    return StudyOutcome(seed=seed, settings=tuple(_outcomes(spec, sim, records, p)),
                        tokens_study=sum(r.tokens for r in records.values()),
                        flops_study=sum(r.tokens * sim.settings[r.setting_id].flops_per_token for r in records.values()),
                        trials=started, max_trial_tokens=max((r.tokens for r in records.values()), default=0))


def _analyse(trials: Sequence[TrialSteps], spec: StudySpec, estimator: str) -> tuple[float | None, str | None, bool]:
    """B* of one setting's trials as the pages compute it: ``(B*, why refused, a cell at an edge)``."""
    points = measure_points(trials, estimator=estimator)
    measured = [p for p in points if p.steps is not None]
    bounds = [(p.batch_size, p.steps_lower_bound) for p in points if p.steps_lower_bound is not None]
    edge = any(p.lr_at_edge for p in measured)
    try:
        fit = fit_steps([p.batch_size for p in measured], [p.steps for p in measured], lower_bounds=bounds)
    except FitError as exc:
        return None, str(exc), edge
    return float(cbs_closed_form(fit.b_noise, b_ref=spec.b_ref, overhead=spec.overhead)), None, edge


def _study_trials(records: Mapping[str, TrialRecord], sid: str, target: float | None) -> list[TrialSteps]:
    """The steps table of one setting, as ``cbs study fit`` builds it from MLflow."""
    out = []
    for r in records.values():
        if r.setting_id != sid or r.status not in TERMINAL:
            continue
        if r.role == "reference" and r.status == "finished":
            # A reference run to (1 + margin)·D: its crossing of the target read off its evaluations.
            c = None if target is None else first_crossing(r.eval_steps, r.eval_losses, target)
            out.append(TrialSteps(batch_size=r.batch_size, outcome="reached", steps=c, lr=r.lr, seed=r.seed)
                       if c is not None else
                       TrialSteps(batch_size=r.batch_size, outcome="censored", budget_steps=float(r.last_step),
                                  lr=r.lr, seed=r.seed))
        elif r.status == "reached":
            out.append(TrialSteps(batch_size=r.batch_size, outcome="reached", steps=r.steps_to_target,
                                  lr=r.lr, seed=r.seed))
        elif r.status == "censored":
            out.append(TrialSteps(batch_size=r.batch_size, outcome="censored", budget_steps=float(max(r.last_step, 1)),
                                  lr=r.lr, seed=r.seed))
        else:
            out.append(TrialSteps(batch_size=r.batch_size, outcome=r.status, lr=r.lr, seed=r.seed))
    # Trials stopped at equal tokens: steps to target projected from their curves against the
    # cell's leader, as `cbs study fit` does from MLflow's histories.
    if any(t.outcome == "pruned" for t in out):
        histories = [EvalHistory(batch_size=r.batch_size, steps=r.eval_steps, losses=r.eval_losses, lr=r.lr,
                                 seed=r.seed, outcome=r.status, role=r.role)
                     for r in records.values() if r.setting_id == sid and r.status in ("reached", "pruned")
                     and len(r.eval_steps) >= 2]
        out = project_pruned(out, histories)
    return out


def _grid_trials(spec: StudySpec, sim: _Sim, setting: Setting, target: float,
                 study: Sequence[TrialSteps]) -> tuple[list[TrialSteps], int, int]:
    """The full grid: every rate at every batch size run to its own crossing (no budget, no
    pruning), the grid extended past an edge by the planner's own rule (``search.lr_extensions``)
    on the grid's complete data; the reference cell is the study's. Returns the trials, their
    tokens and the oracle's tokens (the best trial of each cell and seed; D per seed at B_ref)."""
    base = sorted(spec.search.lrs)
    low = base[1] / base[0] if len(base) > 1 else 2.0
    high = base[-1] / base[-2] if len(base) > 1 else 2.0
    out = [t for t in study if t.batch_size == spec.b_ref]
    tokens = int((1 + spec.budget_margin) * setting.tokens) * len([t for t in out if t.outcome != "diverged"])
    oracle = setting.tokens * len(spec.seeds)
    for b in spec.batch_sizes:
        if b == spec.b_ref:
            continue
        rates = list(base)
        cell: dict[float, list[TrialSteps]] = {}

        def run(lr: float) -> None:
            nonlocal tokens
            cell[lr] = []
            for seed in spec.seeds:
                got = sim.reading(setting, b, lr, seed, target)
                if got is None:
                    cell[lr].append(TrialSteps(batch_size=b, outcome="diverged", lr=lr, seed=seed))
                    tokens += math.ceil(spec.warmup_fraction * setting.tokens)
                elif math.isinf(got[0]):
                    cell[lr].append(TrialSteps(batch_size=b, outcome="censored", budget_steps=1e12, lr=lr, seed=seed))
                else:
                    cell[lr].append(TrialSteps(batch_size=b, outcome="reached", steps=got[0], lr=lr, seed=seed))
                    tokens += int(math.ceil(got[1])) * b * spec.context_tokens

        for lr in rates:
            run(lr)
        for _ in range(spec.search.lr_extensions):
            added = False
            for seed in spec.seeds:
                reached = [(t.steps, lr) for lr, ts in cell.items() for t in ts if t.seed == seed and t.steps]
                if not reached:
                    continue
                best_lr = min(reached)[1]
                for edge, nxt in ((min(cell), float(f"{min(cell) / low:.3g}")), (max(cell), float(f"{max(cell) * high:.3g}"))):
                    if best_lr == edge and nxt not in cell:
                        run(nxt)
                        added = True
            if not added:
                break
        out += [t for ts in cell.values() for t in ts]
        for seed in spec.seeds:
            stops = [sim.reading(setting, b, lr, seed, target) for lr in cell]
            best = min((g[1] for g in stops if g is not None and math.isfinite(g[1])), default=None)
            if best is not None:
                oracle += int(math.ceil(best)) * b * spec.context_tokens
    return out, tokens, oracle


def _outcomes(spec: StudySpec, sim: _Sim, records: Mapping[str, TrialRecord], p) -> list[SettingOutcome]:
    out = []
    for sid, setting in sim.settings.items():
        truth = sim.truth[sid]
        cbs_truth = float(cbs_closed_form(truth.b_noise, b_ref=spec.b_ref, overhead=spec.overhead))
        target = p.targets.get(sid)
        study = _study_trials(records, sid, target)
        cbs_study, error, edge = _analyse(study, spec, sim.config.estimator)
        cbs_study_min = _analyse(study, spec, "min")[0]
        censored = tuple(sorted({t.batch_size for t in study if t.outcome == "censored"}
                                - {t.batch_size for t in study if t.outcome == "reached"}))
        cbs_grid = cbs_grid_min = None
        grid_tokens_to_target = oracle = 0
        if target is not None:
            grid, grid_tokens_to_target, oracle = _grid_trials(spec, sim, setting, target, study)
            cbs_grid = _analyse(grid, spec, sim.config.estimator)[0]
            cbs_grid_min = _analyse(grid, spec, "min")[0]
        out.append(SettingOutcome(
            setting_id=sid, cbs_truth=cbs_truth, cbs_grid=cbs_grid, cbs_study=cbs_study, error=error,
            cbs_grid_min=cbs_grid_min, cbs_study_min=cbs_study_min,
            tokens_study=sum(r.tokens for r in records.values() if r.setting_id == sid),
            tokens_grid_to_target=grid_tokens_to_target, tokens_oracle=oracle, censored_cells=censored,
            skipped_cells=skipped_cells(p).get(sid, ()), edge=edge))
    return out


def simulate(spec: StudySpec, truth: Mapping[str, TruthCurve], config: SimConfig | None = None, *,
             seeds: int = 1, first_seed: int = 0,
             progress: Callable[[int, int], None] | None = None) -> SimulationReport:
    """``seeds`` simulated studies of ``spec`` against ``truth``; ``progress(done, total)`` after each."""
    config = config or SimConfig()
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise ConfigError("seeds", seeds, "must be a positive integer")
    runs = []
    for i in range(seeds):
        runs.append(simulate_once(spec, truth, config, first_seed + i))
        if progress is not None:
            progress(i + 1, seeds)
    runs = tuple(runs)
    settings = spec.resolve_settings()
    from cbscore.study.planner import setting_grid_tokens

    return SimulationReport(spec_name=spec.name, config=config, seeds=runs, grid_tokens=grid_tokens(spec),
                            predict=spec.search.predict, prune_at_equal_tokens=spec.prune_at_equal_tokens,
                            grid_flops=float(sum(setting_grid_tokens(spec, s) * s.flops_per_token for s in settings)))


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
    lines.append(f"tokens: study {d['tokens_study_mean']:.4g} (mean over seeds); fixed-budget grid "
                 f"{d['tokens_fixed_budget_grid']:.4g} ({d['tokens_share_of_fixed_budget_grid']:.1%} of it); "
                 f"full grid run to each trial's target {d['tokens_grid_to_target_mean']:.4g}")
    if d.get("tokens_oracle_mean"):
        lines.append(f"oracle (each cell's best trial to its target, D per seed at B_ref) "
                     f"{d['tokens_oracle_mean']:.4g}: study/oracle {d['ratio_to_oracle_median']:.2f}× median over "
                     f"seeds, p95 {d['ratio_to_oracle_p95']:.2f}×, worst {d['ratio_to_oracle_max']:.2f}×; full grid to "
                     f"target/oracle {d['tokens_grid_to_target_mean'] / d['tokens_oracle_mean']:.2f}×; "
                     f"rules: search.predict {'on' if d.get('predict') else 'off'}, prune_at_equal_tokens "
                     f"{'on' if d.get('prune_at_equal_tokens') else 'off'}; curves compared at equal tokens: "
                     f"{d.get('curves', 'power law')}")
    lines.append(f"GPU-hours ({d['gpu_hours_note']}): study {d['gpu_hours_study']:.4g}, "
                 f"fixed-budget grid {d['gpu_hours_fixed_budget_grid']:.4g}; the largest trial trains "
                 f"{d['max_trial_tokens']:.4g} tokens (a single-pass corpus must hold them)")
    return "\n".join(lines)
