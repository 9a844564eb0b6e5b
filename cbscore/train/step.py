"""One optimizer step of the trainer (:mod:`cbscore.train.trainer`): micro-batches with gradient
accumulation, gradient clipping, AdamW and the weight average, with the out-of-memory handler that
halves the micro-batch and redoes the passes (the same update: a sum of the same gradients in
another grouping; :mod:`cbscore.train.micro_batch`)."""

from __future__ import annotations

import contextlib
import math
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
        # clip_grad_norm_ with max_norm=inf only measures the norm (scales by exactly 1)
        self.max_norm = grad_clip if grad_clip > 0 else math.inf
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
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.max_norm, foreach=True)
        self.gns.end_step(grad_norm)  # the full-batch norm before clipping
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.average.update()
        return loss, grad_norm  # device tensors, no host sync

    def _passes(self, tokens: torch.Tensor) -> torch.Tensor:
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
