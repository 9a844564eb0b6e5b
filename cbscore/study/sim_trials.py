"""The simulator's trials (:mod:`cbscore.study.simulate`): how one behaves given its setting's truth,
its learning rate, its batch size and the noise, and the record the planner sees of it.

The truth of a setting is a curve ``S(B) = S_min·(1 + B_noise/B)`` (McCandlish et al. 2018,
eq. 2.11; Zhang et al. 2025 fit the same ``a + b/B``). A simulated trial at learning rate η and
batch size B reaches the target after

    S_trial = S(B) · m(η, B) · exp(σ_c·z_seed + σ_x·z_seed,B + σ·z_trial),
    m = 1 + k·ln²(η/η*(B)),   η*(B) = η*_ref·(B/B_ref)^γ

steps (z standard normal: one draw per training seed shared by every batch size of the setting,
reference runs included; one per seed × batch size shared by its learning rates; one per trial —
the variance components of ln S the lab measures, :data:`LAB_NOISE`; the optimum η* moves with B,
by default as the square root of B, the rule for Adam of Malladi et al. 2022, arXiv 2205.10287, or
by another law, :meth:`SimConfig.lr_optimum_factor`), and diverges when η exceeds
``divergence_ratio·η*(B)``. The reference runs at B_ref set the target exactly as real ones do:
the best of them reaches it at the last step of its D tokens, so each setting's truth is scaled
to put its best reference trial there (a scale of S leaves B_noise, and so B*, unchanged).

A trial evaluates every ``ceil(total_steps/40)`` steps (what the trainer does before the target is
near); it is censored past its budget and pruned when the planner says so.
"""

from __future__ import annotations

import bisect
import json
import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cbscore.analysis import DEFAULT_ESTIMATOR, ESTIMATORS, first_crossing
from cbscore.errors import ConfigError
from cbscore.study.sim_tables import LAB_NOISE as _LAB
from cbscore.study.sim_truth import Truth
from cbscore.study.spec import StudySpec
from cbscore.study.spec_parts import Setting
from cbscore.study.trials import STATUSES, TrialRecord, TrialSpec, replaced

#: Evaluations per run before the target is near (``TrainConfig.eval_every_steps`` default).
EVALS_PER_RUN = 40
#: Loss the truth curve's steps reach (nats): trials' loss curves are anchored here.
LOSS_AT_TRUTH = 3.0
#: ``dL/d ln s`` near the target (nats per e-fold of steps): a trial's held-out loss is
#: ``L(s) = LOSS_AT_TRUTH + LOSS_SLOPE·ln(need/s)`` there, a power law in steps (Kaplan et al.
#: 2020, arXiv 2001.08361, eq. 5.6, locally), so a target ``δ`` nats lower takes ``e^(δ/κ)`` times
#: the steps at every batch size and learning rate alike.
LOSS_SLOPE = 0.2
#: Evaluations near the crossing: one every ``need/EVALS_NEAR_TARGET`` steps, about 8 in the
#: last quarter of the steps to target (the trainer's dense phase, cbscore.train.eval_schedule).
EVALS_NEAR_TARGET = 32
#: The lab's measured noise, as :class:`SimConfig` fields (``SimConfig(**LAB_NOISE)``,
#: ``--noise lab``): the components of :data:`cbscore.study.sim_tables.LAB_NOISE` (one source),
#: measured by ``cbs fit docs/results/reproduce/steps.csv --b-ref 4`` ("noise of ln S"): a shift
#: shared by every batch size of one seed (0.066), seed × cell before the rates' own noise (0.027:
#: with five rates' noise averaged into each cell, the 0.034 the seed tables measure), between the
#: rates of one cell (0.030), and the learning-rate curvature k (median 0.198, 0.158-0.218).
LAB_NOISE = {"seed_common_sigma": _LAB.seed_common_sd, "seed_cell_sigma": _LAB.seed_cell_sd,
             "noise_sigma": _LAB.rate_sd, "lr_penalty": _LAB.lr_curvature}


@dataclass(frozen=True, kw_only=True)
class SimConfig:
    """How simulated trials behave."""

    noise_sigma: float = 0.0
    """σ of the multiplicative log-normal noise on each trial's steps to target (sd of ln S, one draw
    per trial: the rate-level part; the lab's 0.029, :data:`LAB_NOISE`)."""
    seed_common_sigma: float = 0.0
    """σ of a shift of ln S shared by every trial of one training seed at every batch size of a
    setting, reference runs included (sd of ln S; the lab's 0.066). It cancels in ``B_noise`` but
    not in a bootstrap that resamples seeds per batch size."""
    seed_cell_sigma: float = 0.0
    """σ of a shift of ln S per training seed × batch size, shared by the rates of that cell (sd of
    ln S; the lab's 0.027, before the rates' own noise)."""
    lr_penalty: float = 0.1
    """k of ``m(η) = 1 + k·ln²(η/η*)``: a learning rate a factor 2 off needs ``1 + 0.48·k`` times
    the steps."""
    lr_optimum_ref: float | None = None
    """η* at B_ref; ``None`` = the geometric middle of the spec's grid."""
    lr_optimum_exponent: float = 0.5
    """γ of ``η*(B) ∝ B^γ`` (square-root scaling for Adam, Malladi et al. 2022), up to
    :attr:`lr_peak_batch`."""
    lr_peak_batch: float | None = None
    """Batch size (sequences) above which η* falls again as ``B^lr_fall_exponent`` (the surge of
    Adam's best rate, Li et al. 2024, arXiv 2405.14578); ``None``: it never falls."""
    lr_fall_exponent: float = -0.3
    """Exponent of ``η*(B)`` above :attr:`lr_peak_batch`."""
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

    bootstrap: int = 0
    """Bootstrap resamples per setting for the intervals whose coverage of the truth the report
    counts (``cbscore.analysis.analyze_setting(..., bootstrap=R)``); 0: no intervals."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.noise_sigma) and self.noise_sigma >= 0):
            raise ConfigError("noise", self.noise_sigma, "must be a non-negative number")
        for name in ("seed_common_sigma", "seed_cell_sigma"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value >= 0):
                raise ConfigError(name, value, "must be a non-negative number (sd of ln S)")
        if not (isinstance(self.lr_optimum_exponent, (int, float)) and math.isfinite(self.lr_optimum_exponent)):
            raise ConfigError("lr_optimum_exponent", self.lr_optimum_exponent, "must be a finite number")
        if self.lr_peak_batch is not None and not (isinstance(self.lr_peak_batch, (int, float))
                                                   and math.isfinite(self.lr_peak_batch) and self.lr_peak_batch > 0):
            raise ConfigError("lr_peak_batch", self.lr_peak_batch, "must be a positive batch size (sequences) or None")
        if not (isinstance(self.lr_fall_exponent, (int, float)) and math.isfinite(self.lr_fall_exponent)):
            raise ConfigError("lr_fall_exponent", self.lr_fall_exponent, "must be a finite number")
        if isinstance(self.bootstrap, bool) or not isinstance(self.bootstrap, int) or self.bootstrap < 0:
            raise ConfigError("bootstrap", self.bootstrap, "must be a non-negative integer")
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

    def lr_optimum_factor(self, batch_size: float, b_ref: float) -> float:
        """``η*(B)/η*(B_ref)``: ``B^γ`` up to :attr:`lr_peak_batch` and ``B^lr_fall_exponent`` past it,
        continuous at the peak (Malladi et al. 2022 for γ = 0.5; Li et al. 2024 for the fall)."""
        def shape(b: float) -> float:
            if self.lr_peak_batch is None:
                return b ** self.lr_optimum_exponent
            peak = self.lr_peak_batch
            return min(b, peak) ** self.lr_optimum_exponent * (max(b, peak) / peak) ** self.lr_fall_exponent
        return shape(batch_size) / shape(b_ref)

    def lr_law(self) -> str:
        """The law of η*(B) in words (the report's)."""
        law = f"η* ∝ B^{self.lr_optimum_exponent:g}"
        if self.lr_peak_batch is not None:
            law += f" to B = {self.lr_peak_batch:g}, then ∝ B^{self.lr_fall_exponent:g}"
        return law


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
class SimRun:
    """One started simulated trial: when it started, the steps it trains and how it ends."""

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
    running trials at equal tokens with them (``stop_far_rates``, ``prune_at_equal_tokens``)."""
    running: TrialRecord | None = field(default=None, repr=False, compare=False)
    """Its first record while running (:func:`run_record`): each later one differs from it only in
    its steps, tokens, heartbeat and evaluations."""

    def step_at(self, now: float) -> float:
        return min(self.steps, (now - self.start) / self.batch_tokens)

    def end(self) -> float:
        return self.start + self.steps * self.batch_tokens


@dataclass
class SimTrials:
    """The simulated trials of one study and seed: the truth, the noise draws (one per trial, shared by
    the study and its full grid) and what each trial reads off its evaluations."""

    spec: StudySpec
    truth: Mapping[str, Truth]
    config: SimConfig
    seed: int
    settings: dict[str, Setting] = field(default_factory=dict)
    draws: dict[tuple[str, int, float, int], float] = field(default_factory=dict)
    readings: dict[tuple, tuple[float, float] | None] = field(default_factory=dict)
    # η*(B) by batch size and a trial's steps to the truth's loss by (setting, B, η, seed): read for
    # every trial start, reading and curve, and the same numbers every time (spec, truth, config and
    # draws are fixed), so each is worked out once.
    optima: dict[int, float] = field(default_factory=dict, repr=False)
    needs: dict[tuple[str, int, float, int], float | None] = field(default_factory=dict, repr=False)

    def lr_optimum(self, batch_size: int) -> float:
        if batch_size not in self.optima:
            lrs = self.spec.search.lrs
            ref = self.config.lr_optimum_ref or math.exp(float(np.mean(np.log(lrs))))
            self.optima[batch_size] = ref * self.config.lr_optimum_factor(batch_size, self.spec.b_ref)
        return self.optima[batch_size]

    def noise(self, key: tuple[str, int, float, int]) -> float:
        """The noise factor of one trial (setting, B, η, seed): ``exp`` of its own draw, its seed ×
        batch size's and its seed's (:class:`SimConfig`), each seeded by the study's seed and the
        part's key: the study and the full grid share them, and so do two studies of the same seed
        whatever order their rules start trials in (common random numbers: a rule's effect is not
        mixed with another draw of the noise)."""
        if key not in self.draws:
            sid, batch_size, _, seed = key
            c = self.config
            z = c.noise_sigma * self._normal(1, key)
            if c.seed_cell_sigma:
                z += c.seed_cell_sigma * self._normal(3, (sid, batch_size, seed))
            if c.seed_common_sigma:
                z += c.seed_common_sigma * self._normal(2, (sid, seed))
            self.draws[key] = math.exp(z)
        return self.draws[key]

    def _normal(self, part: int, key: tuple) -> float:
        """One standard normal of noise part ``part`` (1 trial, 2 seed, 3 seed × batch size) at ``key``."""
        return float(np.random.default_rng([self.seed, part, zlib.crc32(repr(key).encode())]).standard_normal())

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
        key = (setting.setting_id, batch_size, lr, seed)
        if key not in self.needs:
            m = self.multiplier(batch_size, lr)
            self.needs[key] = None if m is None else (
                self.setting_scale(setting) * self.truth[key[0]].steps(batch_size) * m * self.noise(key))
        return self.needs[key]

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
                losses = LOSS_AT_TRUTH + LOSS_SLOPE * np.log(need / steps)
                if self.config.eval_noise:  # (else its zeros: adding them changes no loss near 3 nats)
                    losses = losses + self.eval_noise(key[:4], len(steps))
                hit = (losses <= target).nonzero()[0]  # (np.flatnonzero of the 1-D array, without its wrappers)
                if hit.size == 0:  # noise kept it above: it stops past any budget
                    self.readings[key] = (math.inf, math.inf)
                else:
                    stop = int(hit[0])
                    # (As Python floats, the same numbers: first_crossing reads each with float().)
                    crossing = first_crossing(steps[:stop + 1].tolist(), losses[:stop + 1].tolist(), target)
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
        return tuple(steps.tolist()), tuple(losses.tolist())  # (the same Python floats as float() of each)

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
        if self.config.eval_noise:
            ys = ys + self.eval_noise((setting.setting_id, t.batch_size, t.lr, t.seed, "coarse"), len(xs))
        if t.target_loss is not None:
            ys = np.maximum(ys, t.target_loss + 1e-9)
        if crossing is not None:
            # (Appended as Python floats: what np.append then tolist() gave, without the two copies.)
            return (tuple(xs.tolist()) + (float(stop),),
                    tuple(ys.tolist()) + (float(min(t.target_loss, LOSS_AT_TRUTH + LOSS_SLOPE * math.log(need / stop))),))
        return tuple(xs.tolist()), tuple(ys.tolist())  # (the same Python floats as float() of each)

    def start(self, t: TrialSpec, now: float) -> SimRun:
        setting = self.settings[t.setting_id]
        batch_tokens = t.batch_size * self.spec.context_tokens
        budget = t.max_tokens // batch_tokens
        if t.max_steps is not None:
            budget = min(budget, t.max_steps)
        eval_every = max(1, math.ceil(budget / EVALS_PER_RUN))
        need = self.need(setting, t.batch_size, t.lr, t.seed)
        warmup = max(1, math.ceil(self.spec.warmup_fraction * setting.tokens / batch_tokens))
        if need is None:
            return SimRun(t, now, min(budget, warmup), "diverged", None, eval_every, batch_tokens)
        if t.role == "reference" and t.target_loss is None:
            return SimRun(t, now, budget, "finished", None, eval_every, batch_tokens,
                          history=self.history(setting, t.lr, t.seed, budget, eval_every))
        crossing, stop = self.reading(setting, t.batch_size, t.lr, t.seed, t.target_loss)
        if stop <= budget:
            curve = self.curve(setting, t, stop, eval_every, crossing, stop) if self.spec.compares_at_equal_tokens else ((), ())
            return SimRun(t, now, stop, "reached", crossing, eval_every, batch_tokens, curve=curve)
        curve = self.curve(setting, t, budget, eval_every, None, math.inf) if self.spec.compares_at_equal_tokens else ((), ())
        return SimRun(t, now, budget, "censored", None, eval_every, batch_tokens, curve=curve)


#: A record with every field :func:`run_record` does not set at its default.
_BLANK = TrialRecord(trial_id="", cell_id="", setting_id="", role="trial", batch_size=1, lr=1.0, status="running")


def run_evals(run: SimRun, now: float) -> int:
    """What :func:`run_record` shows of a running trial's evaluations at ``now``: how many (a reference
    run, a run with a curve), else the step of the last one."""
    step = min(run.steps, (now - run.start) / run.batch_tokens)  # (run.step_at(now), without the call)
    if run.history[0]:
        return bisect.bisect_right(run.history[0], step)
    if run.curve[0]:
        return bisect.bisect_right(run.curve[0], step)
    return (int(step) // run.eval_every) * run.eval_every


def run_record(run: SimRun, now: float, status: str | None = None, stopped_by: str = "") -> TrialRecord:
    """The record the planner sees of ``run`` at ``now`` (``status`` once it ended; ``stopped_by``: the
    rule that pruned it)."""
    t = run.spec
    step = min(run.steps, (now - run.start) / run.batch_tokens)  # (run.step_at(now), without the call)
    done = status is not None
    if run.history[0]:
        # A reference run: its evaluations so far (all of them once it ended).
        n = len(run.history[0]) if done else bisect.bisect_right(run.history[0], step)  # (steps ascending)
        evals, losses = run.history[0][:n], run.history[1][:n]
    elif run.curve[0]:
        # Its evaluations so far: the planner compares trials at equal tokens.
        n = len(run.curve[0]) if done else bisect.bisect_right(run.curve[0], step)
        evals, losses = run.curve[0][:n], run.curve[1][:n]
    else:
        # The planner reads the last evaluation (pruning) and whether any crossed (none has before
        # the trial ends): the last one stands for all of them.
        last_eval = (int(step) // run.eval_every) * run.eval_every
        evals = (float(last_eval),) if last_eval > 0 else ()
        losses = tuple(10.0 for _ in evals)  # above any target until the crossing
    if not done and run.running is not None:
        # A running trial's record, many times a study: its first one with the fields that move
        # replaced, without the checks of TrialRecord.__init__ that the first one passed (the status
        # is "running", the evaluations tuples).
        return replaced(run.running, last_step=int(step), tokens=int(step) * run.batch_tokens,
                        heartbeat_s=now, eval_steps=evals, eval_losses=losses)
    final = losses[-1] if (done and run.outcome == "finished" and losses) else None
    fields = dict(
        trial_id=t.trial_id, cell_id=t.cell_id, setting_id=t.setting_id, role=t.role, batch_size=t.batch_size,
        lr=t.lr, status=status or "running", steps_to_target=run.crossing if status == "reached" else None,
        final_eval_loss=final, last_step=int(step),
        tokens=int(step) * run.batch_tokens, heartbeat_s=now, eval_steps=evals, eval_losses=losses,
        max_steps=t.max_steps, seed=t.seed, stopped_by=stopped_by if status == "pruned" else "")
    if fields["status"] in STATUSES:
        # TrialRecord(**fields): a blank record's fields with these replaced (its __init__ checks the
        # status, read here, and makes the evaluations tuples, which they are).
        r = replaced(_BLANK, **fields)
    else:
        r = TrialRecord(**fields)  # (which says why)
    if not done:
        run.running = r
    return r
