"""One optimizer step of the trainer (:mod:`cbscore.train.trainer`): micro-batches with gradient
accumulation, gradient clipping, AdamW and the weight average, with the out-of-memory handler that
halves the micro-batch and redoes the passes (the same update: a sum of the same gradients in
another grouping; :mod:`cbscore.train.micro_batch`)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable

import numpy as np
import torch

from cbscore.train.averaging import WeightAverage
from cbscore.train.gns import NO_GNS
from cbscore.train.micro_batch import is_out_of_memory, smaller_micro_batch


class StepFn:
    """One optimizer step: micro-batches with gradient accumulation, clipping, AdamW, EWA.

    Everything that depends on the config (device transfer, autocast, clipping norm, number of
    micro-batches, DDP's ``no_sync``) is fixed in ``__init__``; ``__call__`` is the hot path.
    ``batch`` is this device's share of the global batch (all of it on one device); under DDP
    the gradients are averaged over ranks in the last micro-batch's backward only.

    The one ``try`` of the hot path is the out-of-memory handler (free unless it fires): it
    halves the micro-batch and redoes the passes before the optimizer steps, so the update is
    the same. Under DDP an OOM in the last micro-batch's backward, while the gradients are being
    all-reduced, cannot be redone by one rank alone: choose the micro-batch so it is not needed."""

    def __init__(self, model, optimizer, average: WeightAverage, *, device, micro_batch_size, batch_size,
                 autocast: Callable[[], contextlib.AbstractContextManager], grad_clip: float,
                 no_sync: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
                 on_resize: Callable[[int], None] = lambda micro: None, gns=NO_GNS):
        self.model = model
        self.resizes = 0  # out-of-memory halvings so far (a step that had one is off the clock)
        self.optimizer = optimizer
        self.average = average
        self.params = [p for p in model.parameters()]
        self.batch_size = batch_size
        self.no_sync = no_sync
        self.on_resize = on_resize
        self._set_micro(micro_batch_size)
        self.autocast = autocast
        self.device = device
        # 0 = no clipping: the norm is only measured (torch's clip would scale by exactly 1)
        self.max_norm = grad_clip if grad_clip > 0 else None
        self.gns = gns  # GnsProbe (reads each micro-batch's gradient) or NO_GNS (cbscore.train.gns)
        if device.type == "cuda":
            self.to_device = lambda a: torch.from_numpy(a).pin_memory().to(device, non_blocking=True)
        else:
            self.to_device = torch.from_numpy

    def set_batch(self, batch_size: int, micro: int, gns) -> None:
        """A batch-size schedule switched segments (between steps): ``batch_size`` sequences per
        device in passes of ``micro``, measured by ``gns``."""
        self.batch_size = batch_size
        self.gns = gns
        self._set_micro(micro)

    def _set_micro(self, micro: int) -> None:
        self.micro = micro
        self.n_micro = self.batch_size // micro
        # DDP all-reduces in the backward of the last micro-batch only
        self.sync_contexts = [self.no_sync] * (self.n_micro - 1) + [contextlib.nullcontext]
        # one pass needs no accumulator and no division by 1 (the same numbers: both are exact)
        self._passes = self._one_pass if self.n_micro == 1 else self._accumulated_passes

    def __call__(self, batch: np.ndarray, lr: float) -> tuple[torch.Tensor, torch.Tensor]:
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        tokens = self.to_device(batch)  # (B, T + 1) int64
        while True:
            try:
                loss = self._passes(tokens)
                break
            except RuntimeError as exc:  # torch.OutOfMemoryError, or cuBLAS/attention failing to allocate
                if not is_out_of_memory(exc):
                    raise
            # out of the handler first: its traceback holds the failed passes' activations
            self._halve()
        grads = [p.grad for p in self.params]
        grad_norm = total_norm(grads)
        if self.max_norm is not None:
            clip_(grads, self.max_norm, grad_norm)
        self.gns.end_step(grad_norm)  # the full-batch norm before clipping
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.average.update()
        return loss, grad_norm  # device tensors, no host sync

    def _one_pass(self, tokens: torch.Tensor) -> torch.Tensor:
        """Forward and backward of the whole batch in one pass; its loss (a device scalar)."""
        with self.autocast():
            _, loss = self.model(tokens[:, :-1], tokens[:, 1:])  # inputs, next-token targets (B, T)
        loss.backward()
        self.gns.after_backward(0)
        return loss.detach()

    def _accumulated_passes(self, tokens: torch.Tensor) -> torch.Tensor:
        """Forward and backward of every micro-batch; the mean loss (a device scalar)."""
        loss_sum = torch.zeros((), device=tokens.device)
        for i in range(self.n_micro):
            chunk = tokens[i * self.micro:(i + 1) * self.micro]  # (M, T + 1)
            with self.sync_contexts[i]():
                with self.autocast():
                    _, loss = self.model(chunk[:, :-1], chunk[:, 1:])  # inputs, next-token targets (M, T)
                # equal-size micro-batches: the mean of their means is the full batch's mean
                (loss / self.n_micro).backward()
            self.gns.after_backward(i)  # the noise-scale probe reads this micro-batch's gradient
            loss_sum += loss.detach()
        return loss_sum / self.n_micro

    def _halve(self) -> None:
        """After an out-of-memory error: drop the partial gradients, halve the micro-batch."""
        micro = smaller_micro_batch(self.batch_size, self.micro)
        if micro is None:
            raise torch.OutOfMemoryError(
                f"out of memory at a micro-batch of 1 sequence ({self.batch_size} per device): "
                "use more devices (devices) or a smaller model or context")
        self.optimizer.zero_grad(set_to_none=True)
        print(f"cbs train: out of memory at a micro-batch of {self.micro}; redoing the step at {micro}",
              file=sys.stderr, flush=True)
        self._set_micro(micro)
        self.resizes += 1
        self.gns.resize(self.n_micro, micro)  # the probe's two batch sizes follow (and it drops what it held)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        self.on_resize(micro)


def total_norm(grads: list[torch.Tensor]) -> torch.Tensor:
    """The L2 norm of all of ``grads`` as one vector (a device scalar, no host sync): the norm of
    the per-tensor norms, as ``torch.nn.utils.get_total_norm`` computes it for tensors of one
    device and dtype (the trainer's fp32 gradients), without its per-tensor Python loop."""
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)


def clip_(grads: list[torch.Tensor], max_norm: float, norm: torch.Tensor) -> None:
    """Scale ``grads`` in place by ``min(1, max_norm / (norm + 1e-6))``, as
    ``torch.nn.utils.clip_grads_with_norm_`` does (no host sync: a factor of exactly 1 leaves them as
    they are)."""
    torch._foreach_mul_(grads, torch.clamp(max_norm / (norm + 1e-6), max=1.0))
