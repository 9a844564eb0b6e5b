"""TrainConfig: everything one training trial needs, as a frozen, JSON-safe dataclass.

Defaults are the paper's recipe (Zhang et al. 2025, §3.1; DESIGN.md §1): AdamW with β1 0.95,
ε 1e-8, no weight decay, gradient clipping at 1.0, a constant learning rate after a linear
warm-up fixed in tokens, and β2 and the EWA τ of the ``fixed`` recipe with the trial as its own
reference run unless given (:func:`cbscore.recipe.trial_recipe`). ``to_dict()``/``from_dict()`` is the wire format (the
study runner sends it through Celery as JSON; :class:`cbscore.config.Config`); a bad value raises
:class:`~cbscore.errors.ConfigError` naming the field and the value: each field's own check is
in its metadata (run first), ``__post_init__`` keeps the rules between fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cbscore.config import Config, above, at_least, between, boolean, checked, folder, one_of
from cbscore.data import DataConfig
from cbscore.errors import ConfigError, non_negative_int, positive_finite, positive_int
from cbscore.model.config import PRESETS
from cbscore.recipe import BETA1, EPS, GRAD_CLIP, WARMUP_FRACTION, WEIGHT_DECAY, Recipe, trial_recipe
from cbscore.train.batch_plan import BatchPlan, build_plan
from cbscore.train.branch_config import BRANCH_FIELDS, NO_BRANCH, BranchConfig, as_branch, fold_flat
from cbscore.train.plan_checks import check_batch_schedule as _check_batch_schedule
from cbscore.train.plan_checks import check_branch as _check_branch
from cbscore.train.plan_checks import check_snapshots as _check_snapshots
from cbscore.train.schedules import SCHEDULES, LrSchedule, TokenLrSchedule, warmup_steps

DEVICES = ("auto", "cpu", "cuda")
BRANCH_KEYS = frozenset(BRANCH_FIELDS)


def _model_preset(name: str, value: Any) -> None:
    if not isinstance(value, str) or value not in PRESETS:
        raise ConfigError(name, value, f"is not a model preset (known: {', '.join(PRESETS)})")


def _taus(name: str, value: Any) -> None:
    if not isinstance(value, tuple) or not value:
        raise ConfigError(name, value, "must list at least one τ or be None")
    for tau in value:
        if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not 0 < tau < 1:
            raise ConfigError(name, tau, "each τ must be a number in (0, 1)")
    if len(set(value)) != len(value):
        raise ConfigError(name, list(value), "must not repeat a τ")


def _compile_flag(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ConfigError(name, value, "must be true, false or null (on CUDA only)")


@dataclass(frozen=True, kw_only=True)
class TrainConfig(Config):
    """One trial: model, batch, budget, optimizer, schedule, target, data and device."""

    # ---------------------------------------------------------------- model and batch
    model: str = checked(_model_preset)
    """Model preset name (:data:`cbscore.model.config.PRESETS`, e.g. ``"tiny-0.8M"``, ``"85M"``)."""
    batch_size: int = checked(positive_int)
    """Sequences per optimizer step (B); the batch in tokens is ``batch_size · context_tokens``."""
    micro_batch_size: int | None = checked(positive_int, None)
    """Sequences per forward/backward pass on one device; must divide the per-device batch
    ``batch_size / devices`` (gradient accumulation). ``None`` = chosen from the GPU's free memory
    on CUDA (:mod:`cbscore.train.micro_batch`), the whole per-device batch on a CPU. On CUDA an
    out-of-memory error halves it and redoes the step's passes (the same update)."""
    context_tokens: int = checked(positive_int, 512)
    """Sequence length T in tokens (the paper: 512)."""

    # ---------------------------------------------------------------- budget and target
    max_tokens: int = checked(positive_int)
    """Stream position in tokens at which training ends (tokens the model has seen since its
    initialisation). For a run from scratch this is the budget, and the run lasts
    ``max_tokens // (batch_size · context_tokens)`` steps (rounded down to whole steps, never over
    budget); a branch trains from ``branch.branch_tokens`` to it; ``branch.batch_schedule`` changes the steps
    (:mod:`cbscore.train.batch_plan`)."""
    max_steps: int | None = checked(positive_int, None)
    """Optional cap on optimizer steps (the planner caps a cell's budget this way)."""
    target_loss: float | None = checked(above(0, "must be a positive number of nats"), None)
    """Held-out loss (nats per token, averaged weights) at which the trial stops as ``reached``;
    ``None`` = train the whole budget (status ``finished``)."""

    # ---------------------------------------------------------------- learning rate
    lr: float = checked(positive_finite)
    """Peak learning rate."""
    warmup_tokens: int | None = checked(non_negative_int, None)
    """Linear warm-up length in tokens, from 0.1·lr (fixed in tokens, so a larger batch warms up
    in fewer steps). ``None`` = 25% of ``max_tokens``; the study planner sets 25% of the
    setting's reference budget."""
    schedule: str = checked(one_of(SCHEDULES), "constant")
    """After warm-up: ``constant`` (paper), ``cosine`` or ``wsd`` (warmup-stable-decay)."""
    min_lr_ratio: float = checked(between(0.0, 1.0, closed_high=True), 0.1)
    """Final learning rate of ``cosine`` and ``wsd`` as a fraction of ``lr``."""
    decay_fraction: float = checked(between(0.0, 1.0, closed_high=True), 0.2)
    """``wsd``: fraction of the steps spent in the final linear decay."""
    schedule_batch_size: int | None = checked(positive_int, None)
    """Sequences per step of the run whose step schedule this one reads in tokens
    (:class:`cbscore.train.schedules.TokenLrSchedule`): its warm-up lasts
    ``ceil(warmup_tokens / (schedule_batch_size · context_tokens))`` of those steps. ``None`` =
    ``batch_size``; a branch sets its base run's batch, so it continues that schedule exactly."""
    schedule_tokens: int | None = checked(positive_int, None)
    """Length in tokens of the run whose schedule this one reads (``cosine`` and ``wsd`` decay
    to its end). ``None`` = this run's own end (its last step's stream position); a branch sets
    its base run's, so it continues the base's decay rather than starting one of its own."""

    # ---------------------------------------------------------------- branch, snapshots, batch schedule
    branch: BranchConfig | None = checked(None, None, coerce=as_branch)
    """Where this trial starts among runs of one stream (another trial's snapshot), the snapshots
    it keeps for branches, and its batch-size schedule (:class:`cbscore.train.branch_config.BranchConfig`);
    ``None`` = a run of its own: from the initialisation, no snapshots, one batch size. A dict
    is read as one; an older config's flat fields (``branch_from``, ``snapshot_dir``, ...) are
    folded in by :meth:`from_dict`."""

    # ---------------------------------------------------------------- optimizer
    beta1: float = checked(between(0.0, 1.0), BETA1)
    """AdamW β1 (paper: 0.95)."""
    beta2: float | None = checked(between(0.0, 1.0), None)
    """AdamW β2; ``None`` = :meth:`default_recipe` (the ``fixed`` rule, the trial its own reference)."""
    eps: float = checked(positive_finite, EPS)
    """AdamW ε (paper: 1e-8)."""
    weight_decay: float = checked(at_least(0, "must be non-negative"), WEIGHT_DECAY)
    """Decoupled weight decay on matrices and embeddings (paper: 0)."""
    grad_clip: float = checked(at_least(0, "must be non-negative (0 = no clipping)"), GRAD_CLIP)
    """Clip the global gradient norm to this value (paper: 1.0); 0 = no clipping."""

    # ---------------------------------------------------------------- averaging and evaluation
    ewa_taus: tuple[float, ...] | None = checked(_taus, None)
    """EWA decay rates τ tracked at once, each in (0, 1); ``None`` = :meth:`default_recipe`'s three
    (half-lives ×½, ×1, ×2). The target is decided by the lowest averaged loss over them."""
    ewa_batch_size: int | None = checked(positive_int, None)
    """Sequences per step of the run whose per-step ``ewa_taus`` these are: a step of ``B``
    sequences decays the averages by ``τ^(B / ewa_batch_size)``, so every batch (a branch's ``k·B0``,
    each segment of a ``branch.batch_schedule``) averages over the same tokens. ``None`` = ``τ`` per step
    at whatever batch (the paper's recipe, one batch per run: Zhang et al. 2025, §3.1)."""
    eval_windows: int = checked(positive_int, 128)
    """Held-out windows of ``context_tokens + 1`` tokens per evaluation."""
    eval_every_steps: int | None = checked(positive_int, None)
    """Regular evaluation interval in steps; ``None`` = ``ceil(total_steps / 40)``. Evaluations
    are log-spaced before it, five times denser near the target, and at least 8 in the last 25% of
    the steps before the crossing whatever ``max_eval_fraction`` says (:mod:`cbscore.train.eval_schedule`)."""
    eval_near_target: float = checked(at_least(0, "must be non-negative"), 0.05)
    """Evaluate densely once the loss is within this fraction above the target."""
    max_eval_fraction: float = checked(above(0, "must be positive"), 0.5)
    """Cap on evaluation compute as a fraction of training compute: regular evaluations are spaced
    at least far enough apart (tiny models on a CPU otherwise spend most of a trial evaluating),
    but never fewer than 8 per budget, and the near-target evaluations are not thinned."""
    log_every_steps: int = checked(positive_int, 10)
    """Read the train loss on the host (and call ``post_step`` with metrics) every this many steps."""
    divergence_factor: float = checked(above(1, "must be greater than 1"), 2.0)
    """After warm-up, a logged train loss above this multiple of its running minimum is a divergence."""

    # ---------------------------------------------------------------- gradient noise scale
    measure_gns: bool = checked(boolean, True)
    """Measure the gradient noise scale ``B_simple = tr Σ / |G|²`` (:mod:`cbscore.train.gns`) on every
    step that accumulates ≥ 2 micro-batches; reported at evaluation steps. ``False``: never."""
    gns_micro_batch_size: int | None = checked(positive_int, None)
    """Sequences per pass of an extra micro-batch split made to measure the noise scale: the same
    batch, the same update (gradient accumulation), in passes of this size. Must divide
    ``micro_batch_size`` when that is set, else ``batch_size``, and be smaller than ``batch_size``.
    ``None`` = measure only where ``micro_batch_size`` already splits the batch."""
    gns_half_life_tokens: int | None = checked(positive_int, None)
    """Half-life in tokens of the exponential averages of ``|G|²`` and ``tr Σ``; ``None`` = 10% of
    the budget (``total_steps · batch_tokens``). The study planner sets 10% of the setting's D, so
    every batch size of a setting smooths over the same stretch of training."""

    # ---------------------------------------------------------------- data
    data: DataConfig = field(default_factory=DataConfig)
    """Corpus, tokenizer and split (:class:`cbscore.data.DataConfig`)."""
    seed: int = checked(non_negative_int, 0)
    """Seed of the model initialisation and of the order of training windows."""
    allow_repeat: bool = checked(boolean, False)
    """Allow more than one pass over the training tokens (the paper trains single pass)."""

    # ---------------------------------------------------------------- device
    device: str = checked(one_of(DEVICES), "auto")
    """``auto`` (CUDA when available), ``cpu`` (fp32) or ``cuda`` (bf16 autocast)."""
    compile: bool | None = checked(_compile_flag, None)
    """``torch.compile`` the model; ``None`` = on CUDA (inductor cache under ``$CBS_HOME/inductor``
    unless ``TORCHINDUCTOR_CACHE_DIR`` is set), off on a CPU."""
    threads: int | None = checked(positive_int, None)
    """CPU threads for torch, per process (``None`` = torch's default)."""
    devices: int = checked(positive_int, 1)
    """Processes training this trial with DDP (:mod:`cbscore.train.distributed`): GPUs on CUDA (the
    first ``devices`` visible ones), gloo ranks on a CPU. The global batch ``batch_size`` is split
    evenly across them, so it must be a multiple of ``devices``; the update is the same."""
    dist_timeout_s: float = checked(positive_finite, 300.0)
    """Deadline of every collective of a multi-device trial, seconds: a rank that died ends the
    attempt within it (usually at once: its sockets close) instead of hanging the others. It must
    cover one evaluation, which the other ranks wait through."""

    # ---------------------------------------------------------------- checkpoints
    checkpoint_dir: str | None = checked(folder, None)
    """Folder of this trial's checkpoint; a trial started with a checkpoint there resumes from it."""
    checkpoint_every_steps: int | None = checked(positive_int, None)
    """Write a checkpoint every this many steps (needs ``checkpoint_dir``)."""
    checkpoint_every_seconds: float | None = checked(positive_finite, 600.0)
    """Write a checkpoint when this many seconds passed since the last one (checked on log
    steps; used only with ``checkpoint_dir``)."""

    # ------------------------------------------------------------------ checks between fields
    def __post_init__(self) -> None:
        super().__post_init__()  # wire values coerced, each field's own check (its metadata)
        if self.batch_size % self.devices:
            raise ConfigError("devices", self.devices, f"must divide batch_size={self.batch_size} (the batch is split across devices)")
        if self.micro_batch_size is not None:
            if self.batch_size % self.micro_batch_size:
                raise ConfigError(
                    "micro_batch_size", self.micro_batch_size, f"must divide batch_size={self.batch_size}"
                )
            if self.local_batch_size % self.micro_batch_size:
                raise ConfigError(
                    "micro_batch_size", self.micro_batch_size,
                    f"must divide the per-device batch batch_size/devices = {self.local_batch_size}",
                )
        branch = self.branch
        if branch is not None:
            _check_branch(self)
        if self.max_tokens < self.start_tokens + self.batch_tokens:
            after = "" if not self.start_tokens else f" after branch_tokens={self.start_tokens}"
            raise ConfigError(
                "max_tokens", self.max_tokens,
                f"must allow at least one step of batch_size·context_tokens = {self.batch_tokens} tokens{after}",
            )
        if branch is not None:
            _check_batch_schedule(self)
        if self.gns_micro_batch_size is not None:
            pass_size = self.micro_batch_size or self.batch_size
            if pass_size % self.gns_micro_batch_size:
                which = "micro_batch_size" if self.micro_batch_size else "batch_size"
                raise ConfigError("gns_micro_batch_size", self.gns_micro_batch_size, f"must divide {which}={pass_size}")
            if self.gns_micro_batch_size >= self.batch_size:
                raise ConfigError("gns_micro_batch_size", self.gns_micro_batch_size,
                                  f"must be smaller than batch_size={self.batch_size} (two micro-batches at least)")
        if self.checkpoint_every_steps is not None and self.checkpoint_dir is None:
            raise ConfigError("checkpoint_every_steps", self.checkpoint_every_steps, "needs checkpoint_dir")
        if branch is not None:
            _check_snapshots(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainConfig:
        """The config of a dict of its fields (:meth:`to_dict`'s, or JSON's); an older dict's flat
        branch fields are folded into ``branch`` (:func:`cbscore.train.branch_config.fold_flat`), so a
        stored trial reads back as the same config."""
        if isinstance(data, Mapping) and not BRANCH_KEYS.isdisjoint(data):
            data = fold_flat(data)
        return super().from_dict(data)

    # ------------------------------------------------------------------ derived values
    @property
    def batch_tokens(self) -> int:
        """Tokens per optimizer step, ``batch_size · context_tokens``."""
        return self.batch_size * self.context_tokens

    @property
    def local_batch_size(self) -> int:
        """Sequences per step on one device, ``batch_size / devices``."""
        return self.batch_size // self.devices

    def resolved_compile(self, device_type: str) -> bool:
        """Whether the model is compiled on a device of ``device_type`` (``"cuda"``, ``"cpu"``)."""
        return device_type == "cuda" if self.compile is None else self.compile

    @property
    def total_steps(self) -> int:
        """The budget in optimizer steps."""
        return self.batch_plan().total_steps

    @property
    def start_tokens(self) -> int:
        """Stream position before the first step: ``branch.branch_tokens`` for a branch, else 0."""
        return 0 if self.branch is None else self.branch.start_tokens

    @property
    def budget_tokens(self) -> int:
        """Tokens this run trains on: from ``start_tokens`` to its last step's position."""
        plan = self.batch_plan()
        return plan.end_tokens - plan.start_tokens

    def batch_plan(self) -> BatchPlan:
        """Which sequences and batch size every step takes (:mod:`cbscore.train.batch_plan`)."""
        return build_plan(start_tokens=self.start_tokens, batch_size=self.batch_size,
                          context_tokens=self.context_tokens, max_tokens=self.max_tokens,
                          max_steps=self.max_steps, schedule=(self.branch or NO_BRANCH).batch_schedule)

    def resolved_warmup_tokens(self) -> int:
        """Warm-up in tokens (25% of ``max_tokens`` when ``warmup_tokens`` is ``None``)."""
        return round(WARMUP_FRACTION * self.max_tokens) if self.warmup_tokens is None else self.warmup_tokens

    def lr_schedule(self) -> TokenLrSchedule:
        """The learning rate by stream position: the anchor run's step schedule
        (``schedule_batch_size``, ``schedule_tokens``) read in tokens; step ``i`` of this run uses
        ``segment lr_multiplier × lr_at_tokens(batch_plan().tokens_at(i))``."""
        anchor = (self.schedule_batch_size or self.batch_size) * self.context_tokens
        length = self.schedule_tokens or self.batch_plan().end_tokens
        steps = LrSchedule(kind=self.schedule, lr=self.lr, warmup_steps=warmup_steps(self.resolved_warmup_tokens(), anchor),
                           total_steps=length // anchor, min_lr_ratio=self.min_lr_ratio,
                           decay_fraction=self.decay_fraction)
        return TokenLrSchedule(steps=steps, anchor_batch_tokens=anchor)

    def resolved_warmup_steps(self) -> int:
        """Steps of this run that start inside the warm-up (before the anchor run's last warm-up
        step ends): ``ceil(warmup_tokens / batch_tokens)`` for a run from scratch at one batch."""
        schedule = self.lr_schedule()
        return self.batch_plan().steps_before(schedule.steps.warmup_steps * schedule.anchor_batch_tokens)

    def default_recipe(self) -> Recipe:
        """β2 and τ of this trial alone (:func:`cbscore.recipe.trial_recipe`): the ``fixed`` rule
        with B_ref = ``batch_size`` and D = the tokens of ``total_steps``, so a 97-step run
        averages over a few steps, not the 1,386 of the paper's τ = 0.9995."""
        return trial_recipe(batch_size=self.batch_size, context_tokens=self.context_tokens,
                            d_tokens=self.budget_tokens)

    def resolved_beta2(self) -> float:
        """β2 used: the config's, or :meth:`default_recipe`'s."""
        return self.default_recipe().beta2 if self.beta2 is None else float(self.beta2)

    def resolved_ewa_taus(self) -> tuple[float, ...]:
        """τ tracked: the config's, or :meth:`default_recipe`'s three."""
        return self.default_recipe().ewa_taus if self.ewa_taus is None else tuple(float(t) for t in self.ewa_taus)

    def ewa_step_factor(self, batch_size: int) -> float:
        """``f`` of a step of ``batch_size`` sequences: it decays the averages by ``τ^f``
        (``batch_size / ewa_batch_size``; 1 without ``ewa_batch_size``)."""
        return 1.0 if self.ewa_batch_size is None else batch_size / self.ewa_batch_size

    def pass_size(self) -> int:
        """Sequences per forward/backward pass: ``gns_micro_batch_size``, else ``micro_batch_size``,
        else the whole batch."""
        return self.gns_micro_batch_size or self.micro_batch_size or self.batch_size

    def resolved_gns_half_life_tokens(self) -> int:
        """Half-life of the noise-scale averages in tokens (10% of the budget when ``None``)."""
        if self.gns_half_life_tokens is not None:
            return self.gns_half_life_tokens
        return max(1, round(0.1 * self.budget_tokens))

    def replace(self, **changes: Any) -> TrainConfig:
        """A copy with ``changes`` applied (and checked)."""
        return dataclasses.replace(self, **changes)


# Fields that may differ between a checkpoint and the config resuming it: they change how the
# trial runs, not what it computes. Named as in the flat form that checkpoints are compared in
# (cbscore.train.branch_config.flat_dict).
OPERATIONAL_FIELDS = frozenset({
    "device", "compile", "threads", "micro_batch_size", "checkpoint_dir", "checkpoint_every_steps",
    "checkpoint_every_seconds", "log_every_steps", "devices", "dist_timeout_s",
    # the noise-scale probe reads gradients, it never changes the update (cbscore.train.gns)
    "measure_gns", "gns_micro_batch_size", "gns_half_life_tokens",
    # where a branch's base lies and where snapshots go (branch_step and branch_tokens say what)
    "branch_from", "snapshot_dir", "snapshot_tokens",
})

# Wire values of the fields added after the first checkpoints were written: a checkpoint without
# them was written with these (a trial resumed across the upgrade is the same trial). In the flat
# form (cbscore.train.branch_config.flat_dict).
LATER_FIELDS = {
    "schedule_batch_size": None, "schedule_tokens": None, "batch_schedule": [], "branch_from": None,
    "branch_step": None, "branch_tokens": None, "snapshot_dir": None, "snapshot_tokens": [],
    "branch_ewa": "carry", "ewa_batch_size": None,
}

