"""The ``local`` study kind's own fields: a base run, its checkpoints, and the branches from each.

Merrill, Arora, Groeneveld & Hajishirzi 2025 ("Critical Batch Size Revisited", arXiv 2505.23971,
§3) measure the *local* critical batch size during one run: the base run trains at ``B0`` with
learning rate ``η0``; from its checkpoint at ``t`` tokens, branches train ``Δ`` tokens at ``k·B0``
with learning rate ``f(k)·η0`` (``f(k) = √k`` for Adam, Malladi et al. 2022, arXiv 2205.10287;
``k`` for SGD, Goyal et al. 2017, arXiv 1706.02677). :class:`LocalSpec` is the part of a
:class:`~cbscore.study.StudySpec` of ``kind: local`` that says which ``t``, ``k`` and ``Δ``; the
study's own fields give the rest (its one model and one token budget D are the base run's, its
``context_tokens``, ``schedule``, ``warmup_fraction``, recipe and ``seeds`` too: one base run per
seed, and seed ``s``'s branches start from base ``s``).

Every position is a whole step: a checkpoint is a multiple of ``B0·T`` (a step boundary of the
base run), and ``Δ`` a multiple of every branch's ``k·B0·T``, so that every branch of a checkpoint
sees exactly the same tokens (:func:`window_unit_tokens`).

The window ``Δ`` is one number of tokens at every checkpoint (``window_rule: fixed``, the default:
Merrill et al. 2025 keep ``Δ`` fixed in tokens), or a share of each checkpoint's tokens
(``growing``: ``Δ = window_fraction·t``, what the lab did before issue 39; ``Δ`` then grows with
``t`` and the local CBS of two checkpoints is read over different horizons). ``averaging`` says
which weight average a branch's held-out loss is read on (:data:`cbscore.local.AVERAGING`): from
the branch in tokens by default. A spec stored by an earlier version (every earlier field listed,
neither of these) keeps what it ran with: ``growing`` (``fixed`` where it gave ``window_tokens``)
and ``carry``.

Opt-in, ``warmup_run`` with its ``warmup_schedule`` adds the warm-up run and its small- and
large-batch controls at equal tokens (Merrill et al. 2025, Table 1; :mod:`cbscore.local._arms`):
each switch on a multiple of ``B_final·T`` (:func:`check_warmup_grid`).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import reduce
from typing import Any

from cbscore.config import Config, Entry, Range, boolean, checked, one_of
from cbscore.errors import ConfigError
from cbscore.study.bounds import MAX_BATCH, MAX_TOKENS

#: The issue's default grid of ``k`` (the foundation's ``cbscore.local.DEFAULT_MULTIPLIERS``).
DEFAULT_MULTIPLIERS = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0)
LR_RULES = ("sqrt", "linear")
WINDOW_RULES = ("fixed", "growing")
AVERAGING = ("branch", "tokens", "carry")  # cbscore.local.AVERAGING (this module imports no torch)


def _number(name: str, value: Any, lo: float, hi: float, *, lo_open: bool = True, integer: bool = False) -> float:
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type:
        raise ConfigError(name, value, f"must be {'a whole number' if integer else 'a number'} in "
                                       f"{'(' if lo_open else '['}{lo:g}, {hi:g}]")
    x = float(value) if abs(value) <= sys.float_info.max else math.inf
    if not ((x > lo if lo_open else x >= lo) and x <= hi):
        raise ConfigError(name, value, f"must be in {'(' if lo_open else '['}{lo:g}, {hi:g}]")
    return x


def _in(lo: float, hi: float, *, lo_open: bool = True, integer: bool = False) -> Callable[[str, Any], None]:
    def check(name: str, value: Any) -> None:
        _number(name, value, lo, hi, lo_open=lo_open, integer=integer)
    return check


def _a_list(name: str, value: Any) -> None:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ConfigError(name, value, "must be a list")


def _token_counts(name: str, value: Any) -> None:
    _a_list(name, value)
    for t in value:
        _number(name, t, 1, 10**15, lo_open=False, integer=True)


@dataclass(frozen=True, kw_only=True)
class LocalSpec(Config):
    """Base run and branches of a ``local`` study (the study's ``local:`` mapping)."""

    _block = "local"

    base_batch_size: int = checked(_in(1, 2**24, lo_open=False, integer=True), 8,
                                   range=Range(1, MAX_BATCH, integer=True))
    """``B0``: the base run's batch, sequences of ``context_tokens`` tokens."""
    base_lr: float = checked(_in(0, 10), 0.01, range=Range(0, 10, lo_open=True))
    """``η0``: the base run's peak learning rate."""
    checkpoint_count: int = checked(_in(0, 30, lo_open=False, integer=True), 4, range=Range(0, 30, integer=True))
    """Log-spaced checkpoints at ``D/2^j`` for ``j = checkpoint_count, …, 1`` (4: D/16, D/8, D/4,
    D/2), each rounded down to a whole step of ``B0·T`` tokens; 0 = only ``checkpoint_tokens``."""
    checkpoint_tokens: tuple[int, ...] = checked(_token_counts, (), range=Range(1, MAX_TOKENS, integer=True))
    """Further checkpoints, tokens; each a multiple of ``B0·T`` below D."""
    multipliers: tuple[float, ...] = checked(_a_list, DEFAULT_MULTIPLIERS, range=Range(0, 1024, lo_open=True))
    """``k`` of the branches at every checkpoint, 1 among them (the branch that continues at ``B0``,
    the one every other is compared with); each ``k·B0`` a whole batch."""
    early_multipliers: tuple[float, ...] = checked(_a_list, (), range=Range(0, 1024, lo_open=True))
    """Fractions below 1 (e.g. 0.5, 0.25) added at the first ``early_checkpoints`` checkpoints,
    where the local CBS may be below ``B0``; each ``k·B0`` a whole batch."""
    early_checkpoints: int = checked(_in(0, 30, lo_open=False, integer=True), 1, range=Range(0, 30, integer=True))
    """How many of the first checkpoints get ``early_multipliers``."""
    lr_rule: str = checked(one_of(LR_RULES), "sqrt")
    """``f`` of the branches' learning rate ``f(k)·η0``: ``sqrt`` (Adam, Malladi et al. 2022) or
    ``linear`` (SGD, Goyal et al. 2017). The lab trains AdamW: ``sqrt``."""
    window_rule: str = checked(one_of(WINDOW_RULES), "fixed")
    """``fixed``: one ``Δ`` in tokens at every checkpoint (Merrill et al. 2025, §3), ``window_tokens``
    or else ``window_fraction`` × the first checkpoint's tokens; ``growing``: ``Δ = window_fraction·t``
    at each checkpoint ``t`` (the lab's rule before issue 39)."""
    window_fraction: float = checked(_in(0, 4), 0.5, range=Range(0, 4, lo_open=True))
    """``Δ`` as a share of tokens, rounded up to a multiple of every ``k·B0·T``: of the first
    checkpoint's (``fixed`` without ``window_tokens``: 0.5 and checkpoints at D/16 … D/2 give
    ``Δ = D/32`` at every one), or of each checkpoint's (``growing``: a branch from ``t`` trains
    ``t/2``)."""
    window_tokens: int | None = checked(_in(1, 10**15, lo_open=False, integer=True), None,
                                        range=Range(1, MAX_TOKENS, integer=True))
    """``Δ`` in tokens at every checkpoint (``window_rule: fixed`` only); a multiple of every
    ``k·B0·T``."""
    averaging: str = checked(one_of(AVERAGING), "branch")
    """The weight average a branch's held-out loss is read on (:data:`cbscore.local.AVERAGING`):
    ``branch`` (starts at the branch, decays per ``B0·T`` tokens: ``τ^k`` per step of ``k·B0``),
    ``tokens`` (the base's carried on at ``τ^k`` per step: equal horizons in tokens) or ``carry``
    (the base's at ``τ`` per step, before issue 39: a larger ``k`` reads more of the base's past).
    The warm-up arms decay per ``B0·T`` tokens too, except with ``carry``."""
    epsilon: float = checked(_in(0, 10, lo_open=False), 0.01, range=Range(0, 10))
    """Merrill's tolerance ``ε``, nats per token: the local CBS ``k*·B0`` is the largest ``k`` whose
    smoothed training loss after ``Δ`` is within ``ε`` of every smaller ``k``'s. Also the floor of
    the noise-aware rule's tolerances."""
    z: float = checked(_in(0, 10, lo_open=False), 1.6448536269514722, range=Range(0, 10))
    """The noise-aware rule's ``z``: a larger batch fails only when worse beyond ``z`` standard
    errors of the difference (one-sided 95%)."""
    smooth_fraction: float = checked(_in(0, 1), 0.1, range=Range(0, 1, lo_open=True))
    """Share of a branch's last logged training losses averaged for Merrill's smoothed loss."""
    warmup_run: bool = checked(boolean, False)
    """Train the warm-up and its two controls (Merrill et al. 2025, Table 1) as trials of this
    study, one of each per seed, at equal tokens: the warm-up on :attr:`warmup_schedule`, the
    small-batch control at ``B0``/``η0`` throughout, the large-batch control at the schedule's
    final batch and rate throughout (:mod:`cbscore.local._arms`). Usually switched on after the
    curve is fitted, by ``cbs study warmup NAME`` or the Local CBS page's *Launch the schedule*
    (an extension of the study: :mod:`workers.studies.local_warmup`)."""
    warmup_schedule: tuple[tuple[int, int, float], ...] = dataclasses.field(default=(), metadata={
        "coerce": False, "range": Entry(Range(1, MAX_TOKENS, integer=True), Range(1, MAX_BATCH, integer=True),
                                        Range(0, 1024, lo_open=True))})
    """The warm-up's ``(tokens_from, batch_size, lr_multiplier)`` switches (``TrainConfig.branch.batch_schedule``),
    tokens, sequences and a multiple of ``η0``: the fitted curve's recommendation with each switch on a
    multiple of ``B_final·T`` (:func:`cbscore.local.on_equal_token_grid`), so that all three arms end
    on the same token. Required with :attr:`warmup_run`, and only with it."""

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "checkpoint_tokens", tuple(self.checkpoint_tokens))
        if len(set(self.checkpoint_tokens)) != len(self.checkpoint_tokens):
            raise ConfigError("local.checkpoint_tokens", list(self.checkpoint_tokens), "must not repeat a token count")
        if self.checkpoint_count == 0 and not self.checkpoint_tokens:
            raise ConfigError("local.checkpoint_count", 0, "needs checkpoint_tokens (there would be no checkpoint)")
        if len(self.multipliers) < 2:
            raise ConfigError("local.multipliers", list(self.multipliers), "must list two multipliers or more")
        for name in ("multipliers", "early_multipliers"):
            ks = getattr(self, name)
            for k in ks:
                _number(f"local.{name}", k, 0, 1024)
                if k * self.base_batch_size != round(k * self.base_batch_size):
                    raise ConfigError(f"local.{name}", k, f"must make k·B0 a whole batch (B0 = {self.base_batch_size})")
            if len(set(ks)) != len(ks):
                raise ConfigError(f"local.{name}", list(ks), "must not repeat a multiplier")
        object.__setattr__(self, "multipliers", tuple(float(k) for k in self.multipliers))
        object.__setattr__(self, "early_multipliers", tuple(float(k) for k in self.early_multipliers))
        if 1 not in self.multipliers:
            raise ConfigError("local.multipliers", list(self.multipliers), "must contain 1 (the base run's own batch)")
        if min(self.multipliers) < 1:
            raise ConfigError("local.multipliers", min(self.multipliers),
                              "must be 1 or more (put fractions in early_multipliers)")
        if self.early_multipliers and max(self.early_multipliers) >= 1:
            raise ConfigError("local.early_multipliers", max(self.early_multipliers), "must be below 1")
        if self.window_tokens is not None and self.window_rule != "fixed":
            raise ConfigError("local.window_tokens", self.window_tokens,
                              "is a fixed Δ: it needs window_rule fixed (growing reads window_fraction)")
        object.__setattr__(self, "warmup_schedule", _warmup_schedule(self.warmup_schedule, self.base_batch_size))
        if self.warmup_run and not self.warmup_schedule:
            raise ConfigError("local.warmup_schedule", [], "must list the warm-up's switches when local.warmup_run is "
                                                           "true (`cbs study warmup NAME` reads them off the fitted curve)")
        if self.warmup_schedule and not self.warmup_run:
            raise ConfigError("local.warmup_run", False, "must be true when local.warmup_schedule is given (the "
                                                         "schedule is trained only as the warm-up run)")

    def all_multipliers(self) -> tuple[float, ...]:
        """Every ``k`` of the study, increasing (early fractions first)."""
        return tuple(sorted(set(self.multipliers) | set(self.early_multipliers)))

    def branch_batch_sizes(self) -> tuple[int, ...]:
        """Every ``k·B0`` of the study, sequences, increasing."""
        return tuple(sorted({int(round(k * self.base_batch_size)) for k in self.all_multipliers()}))

    def warmup_batch_sizes(self) -> tuple[int, ...]:
        """Every batch of the warm-up and its controls (``B0`` and each switch's), increasing;
        empty without :attr:`warmup_run`."""
        if not self.warmup_run:
            return ()
        return tuple(sorted({self.base_batch_size, *(b for _, b, _ in self.warmup_schedule)}))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LocalSpec:
        if isinstance(data, Mapping) and FIRST_FIELDS <= set(data) and not LATER_FIELDS & set(data):
            # written by an earlier to_dict (every field then, none of these): what it ran with
            data = {**data, "window_rule": "fixed" if data.get("window_tokens") is not None else "growing",
                    "averaging": "carry"}
        return super().from_dict(data)


#: Fields added by issue 39: a stored spec (``to_dict`` lists every field) that lists the first
#: version's fields but none of these was written before them.
LATER_FIELDS = frozenset({"window_rule", "averaging"})
FIRST_FIELDS = frozenset({"base_batch_size", "base_lr", "checkpoint_count", "checkpoint_tokens", "multipliers",
                          "early_multipliers", "early_checkpoints", "lr_rule", "window_fraction", "window_tokens",
                          "epsilon", "z", "smooth_fraction"})


def _warmup_schedule(value: Any, b0: int) -> tuple[tuple[int, int, float], ...]:
    """``local.warmup_schedule`` as a tuple of ``(tokens_from, batch_size, lr_multiplier)``: switches
    increasing in tokens, batches growing from above ``B0``, each a multiple of ``B0``."""
    name = "local.warmup_schedule"
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__iter__"):
        raise ConfigError(name, value, "must be a list of [tokens_from, batch_size, lr_multiplier]")
    out, previous = [], (0, b0)
    for entry in value:
        if isinstance(entry, (str, bytes, Mapping)) or not hasattr(entry, "__iter__") or len(tuple(entry)) != 3:
            raise ConfigError(name, entry, "each entry must be [tokens_from, batch_size, lr_multiplier]")
        tokens_from, batch, multiplier = tuple(entry)
        _number(f"{name} tokens_from", tokens_from, 1, 10**15, lo_open=False, integer=True)
        _number(f"{name} batch_size", batch, 1, 2**24, lo_open=False, integer=True)
        _number(f"{name} lr_multiplier", multiplier, 0, 1024)
        if tokens_from <= previous[0]:
            raise ConfigError(name, list(entry), f"tokens_from must be above the previous switch's {previous[0]}")
        if batch <= previous[1] or batch % b0:
            raise ConfigError(name, list(entry), f"batch_size must be a multiple of B0 = {b0} above the previous "
                                                 f"batch {previous[1]}")
        out.append((int(tokens_from), int(batch), float(multiplier)))
        previous = (tokens_from, batch)
    return tuple(out)


def check_warmup_grid(local: LocalSpec, *, total_tokens: int, context_tokens: int) -> None:
    """The warm-up's switches on multiples of ``B_final·T`` and below the arms' equal budget
    ``⌊D/(B_final·T)⌋·B_final·T``, every batch dividing ``B_final`` (:mod:`cbscore.local._arms`)."""
    if not local.warmup_run:
        return
    final = local.warmup_schedule[-1][1]
    unit = final * context_tokens
    budget = total_tokens // unit * unit
    for entry in local.warmup_schedule:
        if final % entry[1]:
            raise ConfigError("local.warmup_schedule", list(entry), f"batch_size must divide the final batch {final}, "
                                                                    "so that every switch is a step boundary of each")
        if entry[0] % unit:
            raise ConfigError("local.warmup_schedule", list(entry),
                              f"tokens_from must be a multiple of B_final·T = {unit} tokens, so that the warm-up and "
                              "both controls end on the same token")
        if entry[0] >= budget:
            raise ConfigError("local.warmup_schedule", list(entry),
                              f"tokens_from must be below the arms' equal budget of {budget} tokens (D = {total_tokens} "
                              f"rounded down to a multiple of {unit})")


@dataclass(frozen=True, kw_only=True)
class Checkpoint:
    """One checkpoint of the base run and its branches."""

    tokens: int
    """Stream position ``t``, tokens (a multiple of ``B0·T``)."""
    window_tokens: int
    """``Δ``, tokens (a multiple of every ``k·B0·T`` of :attr:`multipliers`)."""
    multipliers: tuple[float, ...]
    """``k`` of its branches, increasing."""


def window_unit_tokens(local: LocalSpec, context_tokens: int, multipliers=None) -> int:
    """The least ``Δ`` that is a whole number of steps of every branch: ``lcm(k·B0)·T`` tokens."""
    ks = local.all_multipliers() if multipliers is None else multipliers
    batches = [int(round(k * local.base_batch_size)) for k in ks]
    return reduce(math.lcm, batches, 1) * context_tokens


def checkpoints(local: LocalSpec, *, total_tokens: int, context_tokens: int) -> tuple[Checkpoint, ...]:
    """The study's checkpoints, increasing, with each one's window and grid; a bad one raises a
    ConfigError naming the field and the value."""
    step = local.base_batch_size * context_tokens
    chosen = {(total_tokens >> j) // step * step for j in range(1, local.checkpoint_count + 1)}
    for t in local.checkpoint_tokens:
        if t % step:
            raise ConfigError("local.checkpoint_tokens", t, f"must be a multiple of B0·T = {step} tokens (a whole "
                                                              "step of the base run)")
        if t >= total_tokens:
            raise ConfigError("local.checkpoint_tokens", t, f"must be below the base run's D = {total_tokens} tokens")
        chosen.add(t)
    chosen.discard(0)
    if not chosen:
        raise ConfigError("local.checkpoint_count", local.checkpoint_count,
                          f"gives no checkpoint after a whole step of B0·T = {step} tokens within D = {total_tokens}")
    out = []
    fixed = local.window_tokens
    if local.window_rule == "fixed" and fixed is None:  # a share of the first checkpoint, whole steps of every k
        every = window_unit_tokens(local, context_tokens)  # a multiple of each checkpoint's unit
        fixed = max(1, math.ceil(local.window_fraction * min(chosen) / every)) * every
    for i, t in enumerate(sorted(chosen)):
        ks = local.all_multipliers() if i < local.early_checkpoints else tuple(sorted(local.multipliers))
        unit = window_unit_tokens(local, context_tokens, ks)
        if local.window_rule == "fixed":
            if fixed % unit:
                raise ConfigError("local.window_tokens", fixed,
                                  f"must be a multiple of {unit} tokens (lcm of every k·B0, times T), so that "
                                  "every branch trains whole steps over the same tokens")
            window = fixed
        else:  # growing: Δ = window_fraction·t
            window = max(1, math.ceil(local.window_fraction * t / unit)) * unit
        out.append(Checkpoint(tokens=t, window_tokens=window, multipliers=ks))
    return tuple(out)


def apply_local(spec) -> None:
    """Checks of a ``kind: local`` :class:`~cbscore.study.StudySpec` (called by its
    ``__post_init__`` before the batch-size checks): parse ``local``, require one model and one D,
    and derive ``batch_sizes`` (every ``k·B0``) and ``b_ref`` (``B0``), so that the study's
    records, tables and limits see the branches' batch sizes."""
    local = spec.local
    if local is None:
        local = LocalSpec()
    elif isinstance(local, Mapping):
        local = LocalSpec.from_dict(local)
    elif not isinstance(local, LocalSpec):
        raise ConfigError("local", local, "must be a mapping of fields")
    object.__setattr__(spec, "local", local)
    models, tokens = tuple(spec.models), tuple(spec.tokens)
    if len(models) != 1:
        raise ConfigError("models", list(models), "a local study takes exactly one model (the base run's)")
    if len(tokens) != 1:
        raise ConfigError("tokens", list(tokens), "a local study takes exactly one token budget (the base run's D)")
    if local.warmup_run:
        for name, value in (("tokens", tokens[0]), ("context_tokens", spec.context_tokens)):
            _number(name, value, 1, 10**15, lo_open=False, integer=True)
        check_warmup_grid(local, total_tokens=tokens[0], context_tokens=spec.context_tokens)
    # the arms' batches too, so that their records are the study's (workers.studies.records.in_spec)
    object.__setattr__(spec, "batch_sizes", tuple(sorted({*local.branch_batch_sizes(), *local.warmup_batch_sizes()})))
    object.__setattr__(spec, "b_ref", local.base_batch_size)
