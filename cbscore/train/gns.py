"""The gradient noise scale ``B_simple = tr Σ / |G|²`` measured during training, and the CBS it forecasts.

McCandlish et al. 2018, "An Empirical Model of Large-Batch Training" (arXiv 1812.06162):

- ``G`` is the true gradient, ``Σ`` the covariance of the per-example gradients; the simple
  noise scale ``B_simple = tr Σ / |G|²`` (§2.2) stands in for ``B_noise = tr(HΣ)/(GᵀHG)``,
  which needs the Hessian ``H`` (the two agree when ``H`` is a multiple of the identity).
- A batch gradient over ``B`` examples has ``E[|G_B|²] = |G|² + tr Σ / B`` (App. A.1), so
  squared norms at two batch sizes give unbiased estimates of ``|G|²`` and ``tr Σ``
  (:func:`two_batch_estimates`).
- The per-step estimates are noisy (``|G|²`` can come out negative); App. A.1 smooths
  ``|G|²`` and ``tr Σ`` with separate exponential moving averages and takes the ratio of the
  averages, never the average of the ratio (:class:`GnsTracker`).

Units. An "example" is one **sequence** of ``T`` tokens (the trainer's loss is a mean over the
sequences of a micro-batch), so ``b_small``/``b_big`` are in sequences, ``tr Σ`` is per
sequence and ``B_simple`` comes out in sequences, like ``B`` in DESIGN.md §1. Multiply by ``T``
for tokens. The EMA half-life is in tokens, so the smoothing covers the same stretch of training
whatever the batch size.

Usage with gradient accumulation (what a trainer does per step; ``n`` micro-batches of ``M``
sequences make one batch of ``B = n·M``; ``n ≥ 2`` is needed, ``b_small < b_big``)::

    # once, before the loop:
    acc = [torch.zeros_like(p) for p in params]          # running mean of the micro-batch gradients
    pending = []                                         # squared norms of the steps since the last log
    ...
    # every step:
    torch._foreach_zero_(acc)
    small = []                                           # |g_i|² of each micro-batch gradient
    for i in range(n):
        model.zero_grad(set_to_none=True)
        _, loss_i = model(inputs_i, targets_i)           # mean over the M sequences of chunk i
        loss_i.backward()                                # .grad = g_i, this micro-batch's gradient
        small.append(grad_sq_norm_tensor(params))        # device scalar, no host sync
        torch._foreach_add_(acc, [p.grad for p in params], alpha=1.0 / n)
    for p, a in zip(params, acc):
        p.grad = a                                       # the full-batch gradient, mean of the g_i
    big = torch.nn.utils.clip_grad_norm_(params, max_norm) ** 2   # its norm BEFORE clipping
    optimizer.step()
    ...
    pending.append((torch.stack(small), big))           # device tensors until the next log step
    ...
    # at a log step, one host sync for all the steps since the last one:
    smalls, bigs = (torch.stack(x).cpu() for x in zip(*pending))   # (k, n), (k,)
    for small, big in zip(smalls, bigs):
        g2, trace = two_batch_estimates(small, float(big), M, B)
        tracker.update(g2, trace, tokens=B * T)
    pending.clear()

The trainer (:class:`GnsProbe`) keeps its usual ``(loss_i / n).backward()`` accumulation instead
and reads each micro-batch's gradient where backward hands it over: a hook on every parameter
sees ``g_i / n`` before it is added to ``.grad``, so ``|g_i|² = n²·|g_i / n|²`` (mind the ``n²``)
with no extra buffer and no cancellation (a difference of ``.grad`` after and before the backward
would need a copy of it and lose precision late in the batch).

Cost: per micro-batch one norm over all parameters, a memory-bound pass of a few bytes per
parameter against a forward+backward of about ``6·N·M·T`` FLOPs, so negligible unless ``M·T`` is
tiny. The full-batch norm is free (``clip_grad_norm_`` already returns it). Where it matters,
measure only every k-th step (then pass ``tokens=k·B·T`` to :meth:`GnsTracker.update`), or, with
data parallelism, use each rank's local gradient as the small batch (the paper's zero-overhead
method, App. A.1).

Forecast. A run at a fixed ``B_run`` spends ``1 + B_noise/B_run`` steps per step of the
ideal (infinite-batch) run (§2.3, eq. 2.11), so its step ``t`` contributes
``dS_min = w_t = 1/(1 + B_noise(t)/B_run)`` to ``S_min`` and ``B_noise(t)·w_t`` to
``E_min``; ``B_crit = E_min/S_min`` (eq. 2.12) is then the ``w``-weighted average of
``B_noise(t)`` over the run's steps (the reasoning of App. D, where the noise scale changes
during training). :func:`forecast_b_noise` computes it with ``B_simple`` for ``B_noise``;
:func:`forecast_cbs` turns it into ``B*`` by DESIGN.md §1's closed form. The general case, with
values logged every few steps and cut at the target step, and the calibration against measured
``B_noise``, are in :mod:`cbscore.analysis` (``weighted_noise_scale``, ``forecast_setting``,
``calibrate``; numpy only, so the pages need no torch). ``B_simple`` is a proxy:
it ignores the Hessian and the optimizer's preconditioning, and the paper's ``B_simple`` tracks
the ``B_crit`` measured from ``S(B)`` curves (§3) only up to a task-dependent factor, so the
fitted ``S(B)`` curve stays the measurement and this is a forecast beside it.

In the trainer. :class:`GnsProbe` is what ``cbscore.train.trainer`` runs: it keeps the trainer's
``(loss_i / n).backward()`` accumulation untouched (so the update is bit-for-bit the one without
the probe, and a data-parallel ``no_sync`` accumulation is not disturbed) and reads each
micro-batch gradient in a hook on every parameter, as backward hands it over (see above).
Squared norms stay on the device until a log step, where
:meth:`GnsProbe.sync` reads all of them at once (one host sync) and folds them into a
:class:`GnsTracker`. :data:`NO_GNS` is the do-nothing probe of a step with one micro-batch, so
the hot loop has no branch on whether the noise scale is measured.

torch, math and ``cbscore.errors`` only; never mlflow, celery or streamlit.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import torch

from cbscore.errors import ConfigError

__all__ = [
    "NORM_BATCH_BYTES",
    "GnsEstimates",
    "GnsProbe",
    "NO_GNS",
    "GnsTracker",
    "forecast_b_noise",
    "forecast_cbs",
    "grad_sq_norm",
    "grad_sq_norm_tensor",
    "two_batch_estimates",
]


#: Bytes of gradients the probe keeps before taking their norms in one fused launch (at most
#: this much memory held beyond the gradients themselves; a few launches per micro-batch at 85M).
NORM_BATCH_BYTES = 256 * 2**20


class GnsEstimates(NamedTuple):
    """One step's unbiased estimates (a plain ``(g2, trace)`` tuple that also has names)."""

    g2: float
    """Estimate of ``|G|²``, the squared norm of the true (expected) gradient; a noisy step may give < 0."""
    trace: float
    """Estimate of ``tr Σ``, the trace of the per-sequence gradient covariance."""


def _finite_positive(field: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0:
        raise ConfigError(field, value, "must be a positive finite number")
    return float(value)


def two_batch_estimates(
    small_sq_norms: Sequence[float] | torch.Tensor,
    big_sq_norm: float,
    b_small: int,
    b_big: int,
) -> GnsEstimates:
    """Unbiased ``(|G|², tr Σ)`` from squared gradient norms at two batch sizes (App. A.1).

    ``small_sq_norms``: ``|G_{B_small}|²`` of one or more gradients over ``b_small`` examples
    each (the micro-batches); their mean is ``S_small``. ``big_sq_norm``: ``S_big``, the squared
    norm of the gradient over ``b_big`` examples (the full batch, before clipping). With
    ``E[S_B] = |G|² + tr Σ / B`` for both sizes, solving the two equations gives (App. A.1)

        |G|² ≈ (B_big·S_big − B_small·S_small) / (B_big − B_small)
        tr Σ ≈ (S_small − S_big) / (1/B_small − 1/B_big)

    Refuses ``b_big <= b_small`` (the system is singular). A non-finite input (an overflowed
    gradient, a diverged step) returns ``(nan, nan)``: callers skip it
    (:meth:`GnsTracker.update` does).
    """
    for field, value in (("b_small", b_small), ("b_big", b_big)):
        _finite_positive(field, value)
    if b_big <= b_small:
        raise ConfigError("b_big", b_big, f"must be larger than b_small={b_small}")
    if isinstance(small_sq_norms, torch.Tensor):
        small = small_sq_norms.detach().cpu().double().flatten()  # a host sync if on a device
        if small.numel() == 0:
            raise ConfigError("small_sq_norms", [], "must hold at least one squared norm")
        s_small = float(small.mean())
    else:
        values = [float(v) for v in small_sq_norms]
        if not values:
            raise ConfigError("small_sq_norms", values, "must hold at least one squared norm")
        s_small = math.fsum(values) / len(values)
    s_big = float(big_sq_norm)
    if not (math.isfinite(s_small) and math.isfinite(s_big)):
        return GnsEstimates(math.nan, math.nan)
    b_small, b_big = float(b_small), float(b_big)
    g2 = (b_big * s_big - b_small * s_small) / (b_big - b_small)
    trace = (s_small - s_big) / (1.0 / b_small - 1.0 / b_big)
    return GnsEstimates(g2, trace)


class GnsTracker:
    """Exponential moving averages of ``|G|²`` and ``tr Σ`` with a half-life in tokens (App. A.1).

    Each :meth:`update` folds in one step's estimates ``x``: ``m ← d·m + (1 − d)·x`` with
    ``d = 0.5 ** (tokens / half_life_tokens)``, so a step of ``k`` times the tokens decays like
    ``k`` small steps and the smoothing horizon is the same stretch of training at every batch
    size. The averages are bias corrected as Adam's moments (Kingma & Ba 2015, §3), here with a
    decay that may change from step to step: ``m̂ = m / (1 − Π d)``, a weighted mean of the
    estimates folded in whose weights sum to one (the first update returns its own value).

    Fields (all plain numbers, saved by :meth:`state_dict`):

    - ``half_life_tokens``: tokens after which an estimate's weight has halved.
    - ``g2_ema``, ``trace_ema``: the uncorrected averages ``m``.
    - ``decay_product``: ``Π d`` over the updates folded in (1 before any).
    - ``steps``: updates folded in; ``skipped``: updates ignored because an estimate was not finite.
    """

    def __init__(self, half_life_tokens: float):
        self.half_life_tokens = _finite_positive("half_life_tokens", half_life_tokens)
        self.g2_ema = 0.0
        self.trace_ema = 0.0
        self.decay_product = 1.0
        self.steps = 0
        self.skipped = 0

    def update(self, g2: float, trace: float, tokens: int) -> None:
        """Fold in one step's ``(|G|², tr Σ)`` estimates; ``tokens`` trained since the previous update.

        ``tokens`` is the step's ``B·T``, or ``k·B·T`` where only every k-th step is measured.

        A pair with a non-finite member is ignored (counted in ``skipped``) so that both
        averages always cover the same steps. Negative ``|G|²`` estimates are kept: dropping
        them would bias the average upwards.
        """
        tokens = _finite_positive("tokens", tokens)
        g2, trace = float(g2), float(trace)
        if not (math.isfinite(g2) and math.isfinite(trace)):
            self.skipped += 1
            return
        decay = 0.5 ** (tokens / self.half_life_tokens)
        self.g2_ema = decay * self.g2_ema + (1.0 - decay) * g2
        self.trace_ema = decay * self.trace_ema + (1.0 - decay) * trace
        self.decay_product *= decay
        self.steps += 1

    def _corrected(self, ema: float) -> float:
        if self.steps == 0:
            return math.nan
        return ema / (1.0 - self.decay_product)

    @property
    def g2(self) -> float:
        """Smoothed, bias-corrected ``|G|²`` (nan before the first update)."""
        return self._corrected(self.g2_ema)

    @property
    def trace(self) -> float:
        """Smoothed, bias-corrected ``tr Σ`` (nan before the first update)."""
        return self._corrected(self.trace_ema)

    @property
    def b_simple(self) -> float:
        """``tr Σ / |G|²`` of the smoothed values (sequences); nan until both are positive."""
        g2, trace = self.g2, self.trace
        if not (g2 > 0 and trace > 0):  # also false for nan
            return math.nan
        return trace / g2

    def state_dict(self) -> dict:
        return {
            "half_life_tokens": self.half_life_tokens,
            "g2_ema": self.g2_ema,
            "trace_ema": self.trace_ema,
            "decay_product": self.decay_product,
            "steps": self.steps,
            "skipped": self.skipped,
        }

    def load_state_dict(self, state: dict) -> None:
        if float(state["half_life_tokens"]) != self.half_life_tokens:
            raise ConfigError(
                "half_life_tokens", float(state["half_life_tokens"]),
                f"of the saved tracker must equal this tracker's {self.half_life_tokens:g}",
            )
        self.g2_ema = float(state["g2_ema"])
        self.trace_ema = float(state["trace_ema"])
        self.decay_product = float(state["decay_product"])
        self.steps = int(state["steps"])
        self.skipped = int(state["skipped"])


@torch.no_grad()
def grad_sq_norm_tensor(parameters: Iterable[torch.Tensor]) -> torch.Tensor:
    """``Σ |p.grad|²`` over the parameters that have a gradient, as a 0-dim device tensor.

    Accumulated in fp32 at least (fp64 gradients stay fp64), whatever the gradients' dtype; no
    host synchronisation, so it can run per micro-batch inside the hot loop. 0 without gradients.
    """
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.zeros((), dtype=torch.float32)
    dtype = torch.promote_types(grads[0].dtype, torch.float32)
    device = grads[0].device
    # per-tensor norms in the accumulation dtype, then the sum of their squares
    norms = [torch.linalg.vector_norm(g, dtype=dtype).to(device) for g in grads]
    return torch.stack(norms).square().sum()


def grad_sq_norm(parameters: Iterable[torch.Tensor]) -> float:
    """``Σ |p.grad|²`` as a Python float (a host sync on an accelerator; see :func:`grad_sq_norm_tensor`)."""
    return float(grad_sq_norm_tensor(parameters))


def forecast_b_noise(b_simple: Sequence[float], b_run: float) -> float:
    """Forecast of the run's ``B_noise`` (``b/a`` of the ``S(B)`` fit) from per-step ``B_simple``.

    ``B̂ = Σ_t w_t·B_simple(t) / Σ_t w_t`` with ``w_t = 1/(1 + B_simple(t)/B_run)``: the share of
    the ideal run's steps ``S_min`` that step ``t`` of a run at ``B_run`` stands for (§2.3,
    eqs. 2.11–2.12, applied step by step as in App. D; derivation in the module docstring).
    ``b_simple`` holds one smoothed value per step (or per log step, evenly spaced in steps) of a
    run at ``b_run`` sequences; non-finite and non-positive values (the tracker's warm-up) are
    skipped.
    """
    from cbscore.analysis import weighted_noise_scale  # numpy only; the step-weighted general case

    return weighted_noise_scale(b_simple, _finite_positive("b_run", b_run))[0]


def forecast_cbs(b_hat: float, b_ref: float, overhead: float = 0.2) -> float:
    """``B* = (1 + r)·B_ref + r·B̂``: the CBS that ``S(B) = S_min·(1 + B̂/B)`` implies (DESIGN.md §1).

    ``B̂`` is a forecast ``B_noise`` (:func:`forecast_b_noise`), ``B_ref`` the reference batch
    size, ``r = overhead`` the allowed extra compute over linear scaling (paper: 0.2); all in
    sequences. Same closed form as :func:`cbscore.analysis.cbs_closed_form` on the fitted curve.
    """
    if isinstance(b_hat, bool) or not isinstance(b_hat, numbers.Real) or not math.isfinite(b_hat) or b_hat < 0:
        raise ConfigError("b_hat", b_hat, "must be a non-negative finite number")
    b_ref = _finite_positive("b_ref", b_ref)
    overhead = _finite_positive("overhead", overhead)
    from cbscore.analysis import cbs_closed_form  # numpy only

    return float(cbs_closed_form(float(b_hat), b_ref, overhead))


class GnsProbe:
    """Measures ``|G|²``, ``tr Σ`` and ``B_simple`` inside the trainer's step (see the module docstring).

    Per step of ``n`` micro-batches of ``M`` sequences (``B = n·M``, ``n ≥ 2``), with the trainer's
    usual ``(loss_i / n).backward()`` accumulation: a hook on every parameter
    (``Tensor.register_hook``) sees the gradient that backward is about to add to ``.grad``, which
    is ``g_i / n`` for micro-batch ``i``, and queues its norm; :meth:`after_backward` folds the
    queued norms into ``|g_i|² = n²·Σ_p |g_i,p / n|²``. :meth:`end_step` takes the full-batch
    gradient norm before clipping. All of it only queues device work; :meth:`sync` (at log steps)
    reads the norms with one host sync and updates the :class:`GnsTracker`; :meth:`metrics` gives
    the smoothed values.

    Cost: the hooks collect the gradients and take their norms with ``torch._foreach_norm``, one
    fused launch per :data:`NORM_BATCH_BYTES` of gradients and per micro-batch instead of one per
    parameter tensor (100-200 launches a micro-batch at 85M, 10-30% of a small micro-batch's step
    on a GPU). Holding a batch of gradients until its norm is taken costs at most that many bytes
    of memory. An earlier version kept ``.grad``'s previous value and took differences, three
    passes over all gradients per micro-batch and a copy of them (+3.1% step time, against +0.24%
    with the per-tensor hook, on two quiet CPU cores: ``benchmarks/bench_gns.py``).
    A parameter used twice in the graph (tied weights) gets one call with the summed gradient.

    After an out-of-memory halving (:meth:`resize`) the steps measured at the old split are folded
    in at their own batch sizes before the new split's are queued.

    Under DDP (``ranks = k``) the probe lives on rank 0 only: its hooks run before the gradient
    is accumulated, so before DDP's all-reduce, and see rank 0's own micro-batch gradients; the
    full-batch norm is of the all-reduced gradient, a batch of ``k·n·M``. With one micro-batch per
    rank that is the paper's data-parallel estimator, at no extra pass (App. A.1).
    """

    def __init__(self, params: Iterable[torch.Tensor], *, n_micro: int, micro_batch_size: int,
                 batch_tokens: int, half_life_tokens: float, ranks: int = 1):
        if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
            raise ConfigError("ranks", ranks, "must be a positive integer")
        if isinstance(n_micro, bool) or not isinstance(n_micro, int) or n_micro < 1 or n_micro * ranks < 2:
            raise ConfigError("n_micro", n_micro, f"must be an integer ≥ {2 if ranks == 1 else 1} "
                                                  f"(at {ranks} rank(s): the estimators need two batch sizes)")
        self.params = [p for p in params if p.requires_grad]
        self.n_micro = n_micro
        self.ranks = ranks
        self.b_small = _finite_positive("micro_batch_size", micro_batch_size)
        self.b_big = self.b_small * n_micro * ranks  # the global batch: every rank's micro-batches
        self.batch_tokens = _finite_positive("batch_tokens", batch_tokens)
        self.tracker = GnsTracker(half_life_tokens)
        self.grads: list[torch.Tensor] = []  # gradients g_i,p / n whose norms are not yet taken
        self.grad_bytes = 0
        self.parts: list[torch.Tensor] = []  # this micro-batch's sums Σ_p |g_i,p / n|² so far, 0-dim
        self.small: list[torch.Tensor] = []  # this step's n²·|g_i / n|², 0-dim device tensors
        self.pending: list[tuple[torch.Tensor, torch.Tensor]] = []  # ((n,), ()) per step since sync
        self.handles: list = []
        self.open()

    # ---- hot path: device work only ------------------------------------------------------
    @torch.no_grad()
    def _on_grad(self, grad: torch.Tensor) -> None:
        """Backward's gradient for one parameter, before it is added to ``.grad`` (unchanged):
        kept until a batch of them is worth one fused norm."""
        self.grads.append(grad)
        self.grad_bytes += grad.numel() * grad.element_size()
        if self.grad_bytes >= NORM_BATCH_BYTES:
            self._take_norms()

    @torch.no_grad()
    def _take_norms(self) -> None:
        """``Σ_p |g_p|²`` of the kept gradients in one ``torch._foreach_norm`` per dtype, in fp32
        at least (a half-precision gradient's squared norm overflows; fp64 stays fp64)."""
        by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
        for grad in self.grads:
            by_dtype.setdefault(grad.dtype, []).append(grad)
        for dtype, grads in by_dtype.items():
            norms = torch._foreach_norm(grads, 2, dtype=torch.promote_types(dtype, torch.float32))
            self.parts.append(torch.stack(norms).square().sum())
        self.grads, self.grad_bytes = [], 0

    def after_backward(self, i: int) -> None:
        """Close micro-batch ``i``: its squared gradient norm ``|g_i|² = n²·Σ_p |g_i,p / n|²``."""
        self._take_norms()
        total = self.parts[0]
        for part in self.parts[1:]:  # a few: one per NORM_BATCH_BYTES of gradients and dtype
            total = total + part
        self.small.append(total * float(self.n_micro**2))
        self.parts = []

    def open(self) -> None:
        """Put the hooks on the parameters (done at construction; again after :meth:`close`)."""
        if not self.handles:
            self.handles = [p.register_hook(self._on_grad) for p in self.params]

    def close(self) -> None:
        """Remove the hooks (the model then trains as if no probe had been there)."""
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def resize(self, n_micro: int, micro_batch_size: int) -> None:
        """The trainer halved the micro-batch after an out-of-memory error and redoes the step:
        drop the step's partial norms and measure at the new split (``n_micro`` passes of
        ``micro_batch_size``); the smoothed averages carry on (same estimands). The steps queued
        at the old split are folded in first, at their own batch sizes (one host sync, after an
        out-of-memory error only): their norms are of another shape and another ``b_small``."""
        self.small, self.parts, self.grads, self.grad_bytes = [], [], [], 0  # the failed passes' (free them)
        self.sync()
        self.n_micro = n_micro
        self.b_small = float(micro_batch_size)
        self.b_big = self.b_small * n_micro * self.ranks

    def end_step(self, full_norm: torch.Tensor) -> None:
        """Close the step: ``full_norm`` is the full-batch gradient norm before clipping (device)."""
        self.pending.append((torch.stack(self.small), full_norm.detach().float().square()))
        self.small = []

    # ---- log steps -------------------------------------------------------------------------
    def sync(self) -> None:
        """Fold the steps queued since the last call into the tracker (one host sync)."""
        if not self.pending:
            return
        smalls = torch.stack([s for s, _ in self.pending]).double().cpu()  # (k, n); host sync
        bigs = torch.stack([b for _, b in self.pending]).double().cpu()  # (k,)
        self.pending.clear()
        for small, big in zip(smalls.tolist(), bigs.tolist()):
            g2, trace = two_batch_estimates(small, big, self.b_small, self.b_big)
            self.tracker.update(g2, trace, tokens=self.batch_tokens)  # skips non-finite pairs

    def metrics(self) -> dict[str, float | None]:
        """Smoothed ``|G|²`` (``gns_g2``), ``tr Σ`` (``gns_trace_sigma``) and ``B_simple`` in sequences
        (``gns_b_simple``); ``None`` where not finite (before the first step, or ``B_simple`` while an
        average is not positive)."""
        values = {"gns_g2": self.tracker.g2, "gns_trace_sigma": self.tracker.trace, "gns_b_simple": self.tracker.b_simple}
        return {k: (v if math.isfinite(v) else None) for k, v in values.items()}

    def state_dict(self) -> dict:
        """The tracker's state after folding in every queued step (what a checkpoint saves)."""
        self.sync()
        return self.tracker.state_dict()

    def load_state_dict(self, state: dict | None) -> None:
        """Continue from a checkpoint's tracker; one saved without a probe, or with another
        half-life, starts the averages afresh (the half-life may change between attempts)."""
        self.pending.clear()
        if state is not None and float(state["half_life_tokens"]) == self.tracker.half_life_tokens:
            self.tracker.load_state_dict(state)


class _NoGns:
    """The probe of a step with a single micro-batch: nothing to measure, nothing to branch on."""

    def after_backward(self, i: int) -> None:
        pass

    def resize(self, n_micro: int, micro_batch_size: int) -> None:
        pass

    def end_step(self, full_norm: torch.Tensor) -> None:
        pass

    def sync(self) -> None:
        pass

    def metrics(self) -> dict[str, float | None]:
        return {}

    def state_dict(self) -> None:
        return None

    def load_state_dict(self, state: dict | None) -> None:
        pass


NO_GNS = _NoGns()
"""The do-nothing probe (steps with one micro-batch, or ``measure_gns=False``)."""
