"""The readout of a ``local`` study as typed rows: per checkpoint both rules' local CBS, their power
law over tokens and the warm-up it recommends, and the warm-up run against its two controls.

Pure data: ``workers.studies.local_fit.local_readout`` computes it from a study's records;
:meth:`LocalStudyReadout.to_json_dict` is the JSON of ``cbs study fit NAME --json`` for ``kind:
local`` (the committed ``docs/results/local-cbs/fit*.json``), and
:meth:`LocalStudyReadout.from_json_dict` reads such a file back. Losses are nats per token, batch
sizes sequences, positions and budgets tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cbscore.local._curve import LocalCbsCurve
from cbscore.local._readout import LocalCbsReadout
from cbscore.local._warmup import WarmupPlan

#: The two rules read at every checkpoint (beside them, ``noise_aware_raw``: the noise-aware rule on the raw weights).
RULES = ("merrill", "noise_aware")


def _tuples(rows) -> tuple[tuple, ...]:
    return tuple(tuple(r) for r in rows)


def _lists(rows) -> list[list]:
    return [list(r) for r in rows]


def _pair(x):
    return None if x is None else (x[0], x[1])


def _list(x):
    return None if x is None else list(x)


@dataclass(frozen=True, kw_only=True)
class LocalCheckpoint:
    """The branches of one checkpoint and the local CBS each rule reads off them."""

    tokens: int
    """The checkpoint's stream position ``t`` (where the branches start)."""
    window_tokens: int
    """``Δ``: the tokens each branch trains."""
    multipliers: tuple[float, ...]
    """The ``k`` read (every seed's branch finished), increasing; the grid stops at a diverged ``k``."""
    seeds: tuple[int, ...]
    """The study's seeds: the columns of the loss tables."""
    train_loss_nats: tuple[tuple[float, ...], ...]
    """Per ``k`` (row) and seed: the smoothed training loss after ``Δ`` (Merrill's input)."""
    train_loss_se_nats: tuple[tuple[float | None, ...], ...]
    """Per ``k`` and seed: the standard error of that window mean; ``None`` where one value was logged."""
    eval_loss_nats: tuple[tuple[float, ...], ...]
    """Per ``k`` and seed: the held-out EWA loss at the window's end (the noise-aware rule's input)."""
    raw_loss_nats: tuple[tuple[float | None, ...], ...]
    """Per ``k`` and seed: the raw weights' held-out loss there; ``None`` where the branch logged none."""
    merrill: LocalCbsReadout | None
    """Merrill's rule; ``None`` with fewer than two ``k`` read."""
    noise_aware: LocalCbsReadout | None
    """The noise-aware rule on the held-out EWA loss; ``None`` likewise."""
    noise_aware_raw: LocalCbsReadout | None
    """The noise-aware rule on the raw weights' loss; ``None`` likewise or without raw losses."""
    noise_decides: Mapping[str, bool] | None
    """Per noise-aware reading (``noise_aware``, ``noise_aware_raw``): whether the noise, not the
    floor ``ε``, decided a comparison; ``None`` where no rule was read."""
    notes: tuple[str, ...]
    """Why a ``k`` or a reading is missing."""

    def rule(self, name: str) -> LocalCbsReadout | None:
        """The reading of rule ``name`` (:data:`RULES` or ``noise_aware_raw``)."""
        return {"merrill": self.merrill, "noise_aware": self.noise_aware, "noise_aware_raw": self.noise_aware_raw}[name]

    def to_json_dict(self) -> dict[str, Any]:
        def rule(r):
            return None if r is None else r.to_dict()

        return {"tokens": self.tokens, "window_tokens": self.window_tokens, "multipliers": list(self.multipliers),
                "seeds": list(self.seeds), "train_loss": _lists(self.train_loss_nats),
                "train_loss_se": _lists(self.train_loss_se_nats), "eval_loss": _lists(self.eval_loss_nats),
                "raw_loss": _lists(self.raw_loss_nats), "merrill": rule(self.merrill),
                "noise_aware": rule(self.noise_aware), "noise_aware_raw": rule(self.noise_aware_raw),
                "noise_decides": None if self.noise_decides is None else dict(self.noise_decides),
                "notes": list(self.notes)}

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any]) -> LocalCheckpoint:
        def rule(r):
            return None if r is None else LocalCbsReadout.from_dict(r)

        return cls(tokens=data["tokens"], window_tokens=data["window_tokens"], multipliers=tuple(data["multipliers"]),
                   seeds=tuple(data["seeds"]), train_loss_nats=_tuples(data["train_loss"]),
                   train_loss_se_nats=_tuples(data["train_loss_se"]), eval_loss_nats=_tuples(data["eval_loss"]),
                   raw_loss_nats=_tuples(data["raw_loss"]), merrill=rule(data["merrill"]),
                   noise_aware=rule(data["noise_aware"]), noise_aware_raw=rule(data["noise_aware_raw"]),
                   noise_decides=data["noise_decides"], notes=tuple(data["notes"]))


def curve_json_dict(curve: LocalCbsCurve) -> dict[str, Any]:
    """A fitted ``B*(t)`` as the readout's JSON writes it (``curve.<rule>``)."""
    return {"coef": curve.coef, "exponent": curve.exponent, "coef_ci": _list(curve.coef_ci),
            "exponent_ci": _list(curve.exponent_ci), "tokens": list(curve.tokens), "local_cbs": list(curve.local_cbs),
            "r2": curve.r2, "level": curve.level, "notes": list(curve.notes)}


def curve_from_json_dict(data: Mapping[str, Any]) -> LocalCbsCurve:
    return LocalCbsCurve(coef=data["coef"], exponent=data["exponent"], coef_ci=_pair(data["coef_ci"]),
                         exponent_ci=_pair(data["exponent_ci"]), tokens=tuple(data["tokens"]),
                         local_cbs=tuple(data["local_cbs"]), r2=data["r2"], level=data["level"],
                         notes=tuple(data["notes"]))


@dataclass(frozen=True, kw_only=True)
class LocalWarmup:
    """The warm-up one rule's curve recommends, capped at the grid's largest batch."""

    plan: WarmupPlan
    """The schedule and its step counts (:func:`cbscore.local.plan_warmup`)."""
    max_batch_size: int
    """The cap: the grid's largest ``k`` times ``B0`` (sequences)."""

    def to_json_dict(self) -> dict[str, Any]:
        p = self.plan
        return {"batch_schedule": _lists(p.batch_schedule), "steps": p.steps, "constant_steps": p.constant_steps,
                "large_batch_steps": p.large_batch_steps, "steps_saved": p.steps_saved,
                "fraction_saved": p.fraction_saved, "final_batch_size": p.final_batch_size,
                "max_batch_size": self.max_batch_size, "notes": list(p.notes)}

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any], *, base_batch_size: int, context_tokens: int,
                       total_tokens: int) -> LocalWarmup:
        plan = WarmupPlan(base_batch_size=base_batch_size, context_tokens=context_tokens, total_tokens=total_tokens,
                          batch_schedule=_tuples(data["batch_schedule"]), steps=data["steps"],
                          constant_steps=data["constant_steps"], large_batch_steps=data["large_batch_steps"],
                          notes=tuple(data["notes"]))
        return cls(plan=plan, max_batch_size=data["max_batch_size"])


@dataclass(frozen=True, kw_only=True)
class SeedInterval:
    """The mean of per-seed values and its interval (``workers.studies.local_fit.seed_interval``)."""

    mean: float | None
    """The mean over the seeds; ``None`` with none."""
    interval: tuple[float, float] | None
    """``mean ± t·SE`` with three seeds or more, ``[min, max]`` with two; ``None`` with one or none."""
    interval_kind: str | None
    """``t95`` (at the level), ``range``, ``one seed``; ``None`` with none."""
    n: int
    """Seeds read."""

    def to_json_dict(self) -> dict[str, Any]:
        return {"mean": self.mean, "interval": _list(self.interval), "interval_kind": self.interval_kind, "n": self.n}

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any]) -> SeedInterval:
        return cls(mean=data["mean"], interval=_pair(data["interval"]), interval_kind=data["interval_kind"],
                   n=data["n"])


@dataclass(frozen=True, kw_only=True)
class ArmSeed:
    """One seed's run of an arm."""

    seed: int
    """The seed."""
    status: str
    """The trial's status, or ``not started``."""
    final_eval_loss_nats: float | None
    """Held-out loss of the EWA weights (best τ) at the end; ``None`` unless it finished with one."""
    final_raw_loss_nats: float | None
    """Held-out loss of the raw weights at the end; ``None`` unless it finished with one."""
    steps: int | None
    """Optimizer steps taken; ``None`` when not started."""
    tokens: int | None
    """Tokens trained; ``None`` when not started."""

    def to_json_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "status": self.status, "final_eval_loss": self.final_eval_loss_nats,
                "final_raw_loss": self.final_raw_loss_nats, "steps": self.steps, "tokens": self.tokens}

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any]) -> ArmSeed:
        return cls(seed=data["seed"], status=data["status"], final_eval_loss_nats=data["final_eval_loss"],
                   final_raw_loss_nats=data["final_raw_loss"], steps=data["steps"], tokens=data["tokens"])


@dataclass(frozen=True, kw_only=True)
class ArmReadout:
    """One arm (warm-up, small- or large-batch control) over the seeds."""

    role: str
    """``warmup``, ``control-small`` or ``control-large`` (:data:`cbscore.local.ARM_ROLES`)."""
    label: str
    """The role in words."""
    batch_size: int
    """The batch it starts at (sequences)."""
    final_batch_size: int
    """The batch it ends at (sequences)."""
    lr: float
    """The learning rate it starts at."""
    final_lr: float
    """The learning rate it ends at."""
    batch_schedule: tuple[tuple[int, int, float], ...]
    """``(tokens_from, batch_size, lr_multiplier)`` switches; empty for a control."""
    planned_steps: int
    """Optimizer steps its plan takes."""
    planned_tokens: int
    """Tokens its plan trains."""
    seeds: tuple[ArmSeed, ...]
    """Every seed's run, in the study's seed order."""
    finished: int
    """Seeds that finished with a held-out loss."""
    final_eval_loss: SeedInterval
    """The held-out EWA loss over the finished seeds (nats)."""
    final_raw_loss: SeedInterval
    """The raw weights' held-out loss over the finished seeds that logged one (nats)."""
    steps: tuple[int, ...] | None
    """The distinct step counts of the finished seeds, ascending; ``None`` with none finished."""
    tokens: tuple[int, ...] | None
    """The distinct token counts of the finished seeds, ascending; ``None`` likewise."""

    def to_json_dict(self) -> dict[str, Any]:
        return {"role": self.role, "label": self.label, "batch_size": self.batch_size,
                "final_batch_size": self.final_batch_size, "lr": self.lr, "final_lr": self.final_lr,
                "batch_schedule": _lists(self.batch_schedule), "planned_steps": self.planned_steps,
                "planned_tokens": self.planned_tokens, "seeds": [s.to_json_dict() for s in self.seeds],
                "finished": self.finished, "final_eval_loss": self.final_eval_loss.to_json_dict(),
                "final_raw_loss": self.final_raw_loss.to_json_dict(), "steps": _list(self.steps),
                "tokens": _list(self.tokens)}

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any]) -> ArmReadout:
        return cls(role=data["role"], label=data["label"], batch_size=data["batch_size"],
                   final_batch_size=data["final_batch_size"], lr=data["lr"], final_lr=data["final_lr"],
                   batch_schedule=_tuples(data["batch_schedule"]), planned_steps=data["planned_steps"],
                   planned_tokens=data["planned_tokens"], seeds=tuple(ArmSeed.from_json_dict(s) for s in data["seeds"]),
                   finished=data["finished"], final_eval_loss=SeedInterval.from_json_dict(data["final_eval_loss"]),
                   final_raw_loss=SeedInterval.from_json_dict(data["final_raw_loss"]),
                   steps=None if data["steps"] is None else tuple(data["steps"]),
                   tokens=None if data["tokens"] is None else tuple(data["tokens"]))


@dataclass(frozen=True, kw_only=True)
class ArmComparison:
    """The warm-up against the small-batch control, paired by seed (Student 1908)."""

    seeds: tuple[int, ...]
    """The seeds where both finished."""
    loss_difference_nats: float
    """``d̄ = mean(L_warmup − L_small)``."""
    difference_se_nats: float | None
    """``SE(d)`` over the seeds; ``None`` with one seed."""
    tolerance_nats: float
    """``max(ε, z·SE(d))``, ``ε`` alone with one seed."""
    matched: bool
    """``d̄`` within the tolerance (one-sided: lower is never worse)."""
    steps_warmup: float
    """The warm-up's mean steps over the paired seeds."""
    steps_small: float
    """The small-batch control's mean steps over them."""
    steps_saved: float
    """``steps_small − steps_warmup``."""
    fraction_saved: float | None
    """``1 − steps_warmup / steps_small``; ``None`` when the control took no step."""
    fewer_steps: bool
    """The warm-up took fewer steps."""
    tokens_equal: bool
    """Every finished run of every arm trained the same tokens."""

    def to_json_dict(self) -> dict[str, Any]:
        return {"seeds": list(self.seeds), "loss_difference": self.loss_difference_nats,
                "difference_se": self.difference_se_nats, "tolerance": self.tolerance_nats, "matched": self.matched,
                "steps_warmup": self.steps_warmup, "steps_small": self.steps_small, "steps_saved": self.steps_saved,
                "fraction_saved": self.fraction_saved, "fewer_steps": self.fewer_steps,
                "tokens_equal": self.tokens_equal}

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any] | None) -> ArmComparison | None:
        if data is None:
            return None
        return cls(seeds=tuple(data["seeds"]), loss_difference_nats=data["loss_difference"],
                   difference_se_nats=data["difference_se"], tolerance_nats=data["tolerance"], matched=data["matched"],
                   steps_warmup=data["steps_warmup"], steps_small=data["steps_small"], steps_saved=data["steps_saved"],
                   fraction_saved=data["fraction_saved"], fewer_steps=data["fewer_steps"],
                   tokens_equal=data["tokens_equal"])


@dataclass(frozen=True, kw_only=True)
class ArmsReadout:
    """The warm-up run against its controls at equal tokens (Merrill et al. 2025, Table 1)."""

    rule: str
    """The matching rule in words."""
    epsilon: float
    """``ε``: the tolerance's floor (nats)."""
    z: float
    """``z`` of the tolerance ``max(ε, z·SE)``."""
    total_tokens: int
    """Tokens each arm trains."""
    averaging: str
    """What the EWA's τ is per, in words."""
    arms: tuple[ArmReadout, ...]
    """Per arm, in :data:`cbscore.local.ARM_ROLES` order."""
    comparison: ArmComparison | None
    """On the EWA weights' loss; ``None`` until a seed finished in both arms."""
    comparison_raw: ArmComparison | None
    """The same on the raw weights' loss."""
    verdict: str | None
    """One sentence on ``comparison``; ``None`` without one."""

    def arm(self, role: str) -> ArmReadout:
        """The arm of ``role``."""
        return next(a for a in self.arms if a.role == role)

    def to_json_dict(self) -> dict[str, Any]:
        def compared(c):
            return None if c is None else c.to_json_dict()

        return {"rule": self.rule, "epsilon": self.epsilon, "z": self.z, "total_tokens": self.total_tokens,
                "averaging": self.averaging, "arms": [a.to_json_dict() for a in self.arms],
                "comparison": compared(self.comparison), "comparison_raw": compared(self.comparison_raw),
                "verdict": self.verdict}

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any]) -> ArmsReadout:
        return cls(rule=data["rule"], epsilon=data["epsilon"], z=data["z"], total_tokens=data["total_tokens"],
                   averaging=data["averaging"], arms=tuple(ArmReadout.from_json_dict(a) for a in data["arms"]),
                   comparison=ArmComparison.from_json_dict(data["comparison"]),
                   comparison_raw=ArmComparison.from_json_dict(data["comparison_raw"]), verdict=data["verdict"])


@dataclass(frozen=True, kw_only=True)
class BaseNoiseScale:
    """One seed's base-run simple noise scale over tokens (McCandlish et al. 2018), where its probe ran."""

    seed: int
    """The base run's seed."""
    tokens: tuple[float, ...]
    """Stream positions of the probe's readings."""
    b_simple: tuple[float, ...]
    """``B_simple`` at each (sequences)."""

    def to_json_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "tokens": list(self.tokens), "b_simple": list(self.b_simple)}


@dataclass(frozen=True, kw_only=True)
class LocalStudyReadout:
    """The readout of a local study (``cbs study fit NAME`` for ``kind: local``; module docstring)."""

    study: str
    """The study's name."""
    model: str
    """The base run's model preset."""
    total_tokens: int
    """``D``: the base run's budget."""
    context_tokens: int
    """``T``: tokens per sequence."""
    base_batch_size: int
    """``B0`` (sequences)."""
    base_lr: float
    """``η0``: the base run's peak learning rate."""
    lr_rule: str
    """``f(k)``: how a branch's learning rate scales with ``k`` (``sqrt`` or ``linear``)."""
    epsilon: float
    """``ε`` (nats): Merrill's tolerance and the noise-aware rule's floor."""
    z: float
    """The noise-aware rule's ``z``."""
    window_rule: str
    """``fixed`` or ``growing``: how ``Δ`` is set (:mod:`cbscore.study.local_spec`)."""
    window_label: str
    """``window_rule`` in words."""
    averaging: str
    """Which average the held-out loss is read on (:data:`cbscore.local.AVERAGING`)."""
    averaging_label: str
    """``averaging`` in words."""
    noise_ever_decided: Mapping[str, bool]
    """Per noise-aware reading read somewhere: whether the noise decided at any checkpoint."""
    checkpoints: tuple[LocalCheckpoint, ...]
    """Every checkpoint of the study, in stream order."""
    curve: Mapping[str, LocalCbsCurve | None]
    """Per rule (:data:`RULES`): ``B*(t)`` fitted over the checkpoints; ``None`` where it cannot be (``notes``)."""
    warmup: Mapping[str, LocalWarmup | None]
    """Per rule: the warm-up its curve recommends; ``None`` without a curve."""
    notes: tuple[str, ...]
    """What the reader should know (a missing curve, a rule where the noise never decided)."""
    branches_pending: int
    """Branches not ended yet: the curve may still move."""
    warmup_run: bool
    """The study trains the warm-up and its controls (``local.warmup_run``)."""
    arms: ArmsReadout | None
    """Their readout; ``None`` without ``local.warmup_run``."""
    base_b_simple: tuple[BaseNoiseScale, ...]
    """Per seed with a probe, the base run's noise scale (drawn beside the local CBS)."""

    def to_json_dict(self) -> dict[str, Any]:
        return {"study": self.study, "kind": "local", "model": self.model, "total_tokens": self.total_tokens,
                "context_tokens": self.context_tokens, "base_batch_size": self.base_batch_size,
                "base_lr": self.base_lr, "lr_rule": self.lr_rule, "epsilon": self.epsilon, "z": self.z,
                "window_rule": self.window_rule, "window_label": self.window_label, "averaging": self.averaging,
                "averaging_label": self.averaging_label, "noise_ever_decided": dict(self.noise_ever_decided),
                "checkpoints": [c.to_json_dict() for c in self.checkpoints],
                "curve": {rule: None if c is None else curve_json_dict(c) for rule, c in self.curve.items()},
                "warmup": {rule: None if w is None else w.to_json_dict() for rule, w in self.warmup.items()},
                "notes": list(self.notes), "branches_pending": self.branches_pending, "warmup_run": self.warmup_run,
                "arms": None if self.arms is None else self.arms.to_json_dict(),
                "base_b_simple": [b.to_json_dict() for b in self.base_b_simple]}

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any]) -> LocalStudyReadout:
        """A readout from its JSON (a committed ``fit.json``)."""
        sizes = {"base_batch_size": data["base_batch_size"], "context_tokens": data["context_tokens"],
                 "total_tokens": data["total_tokens"]}
        return cls(study=data["study"], model=data["model"], base_lr=data["base_lr"], lr_rule=data["lr_rule"],
                   epsilon=data["epsilon"], z=data["z"], window_rule=data["window_rule"],
                   window_label=data["window_label"], averaging=data["averaging"],
                   averaging_label=data["averaging_label"], noise_ever_decided=dict(data["noise_ever_decided"]),
                   checkpoints=tuple(LocalCheckpoint.from_json_dict(c) for c in data["checkpoints"]),
                   curve={rule: None if c is None else curve_from_json_dict(c) for rule, c in data["curve"].items()},
                   warmup={rule: None if w is None else LocalWarmup.from_json_dict(w, **sizes)
                           for rule, w in data["warmup"].items()},
                   notes=tuple(data["notes"]), branches_pending=data["branches_pending"],
                   warmup_run=data["warmup_run"],
                   arms=None if data["arms"] is None else ArmsReadout.from_json_dict(data["arms"]),
                   base_b_simple=tuple(BaseNoiseScale(seed=b["seed"], tokens=tuple(b["tokens"]),
                                                      b_simple=tuple(b["b_simple"])) for b in data["base_b_simple"]),
                   **sizes)
