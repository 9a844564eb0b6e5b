"""The trainer's held-out evaluation (:mod:`cbscore.train.trainer`): the mean next-token loss of the raw
weights and of every tracked weight average on a fixed set of held-out windows.

The windows are the same at every evaluation of a trial (``TokenStore.val_windows``), so the loss
is a deterministic function of the weights: the curve of one trial is smooth in the step, and
trials of one study are compared on the same text. An evaluation that runs out of memory halves
its chunk and starts again (it keeps nothing between chunks but the sum).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence

import torch

from cbscore.train.micro_batch import is_out_of_memory
from cbscore.train.result import EvalPoint


class HeldOut:
    """Evaluates models on ``val``: ``(K, T + 1)`` int64 windows on the trial's device, in chunks
    of at most ``chunk`` windows under ``autocast``."""

    def __init__(self, val: torch.Tensor, *, chunk: int, device: torch.device,
                 autocast: Callable[[], object]):
        self.val = val  # (K, T + 1)
        self.chunk = min(chunk, len(val))
        self.device = device
        self.autocast = autocast

    def cap_chunk(self, micro: int) -> None:
        """After the training micro-batch was halved: a chunk larger than what training now fits
        would run out of memory too."""
        self.chunk = min(self.chunk, micro)

    def loss(self, model) -> torch.Tensor:
        """The mean loss of ``model`` on the windows (a device scalar); out of memory, the chunk is
        halved and the evaluation starts again."""
        while True:
            try:
                return self._chunks(model)
            except RuntimeError as exc:
                if not is_out_of_memory(exc) or self.chunk == 1:
                    raise
            # out of the handler first: its traceback holds the failed chunk's activations
            print(f"cbs train: out of memory evaluating chunks of {self.chunk}; evaluating again in chunks "
                  f"of {self.chunk // 2}", file=sys.stderr, flush=True)
            self.chunk //= 2
            if self.device.type == "cuda":
                torch.cuda.empty_cache()

    @torch.no_grad()
    def _chunks(self, model) -> torch.Tensor:
        total = torch.zeros((), device=self.device)
        for start in range(0, len(self.val), self.chunk):
            chunk = self.val[start:start + self.chunk]  # (M, T + 1)
            with self.autocast():
                _, loss = model(chunk[:, :-1], chunk[:, 1:])
            total += loss.float() * len(chunk)
        return total / len(self.val)

    def point(self, model, eval_model, average, taus: Sequence[float], *, step: int, tokens: int) -> EvalPoint:
        """One evaluation: the raw weights of ``model``, then each of ``average``'s ``taus`` copied
        into ``eval_model`` (before the first step every average is the initial weights). The
        point's ``loss`` is the best averaged loss (what decides the target)."""
        raw_loss = self.loss(model)
        losses = [raw_loss]
        for i in range(len(taus)):
            if average.count == 0:
                losses.append(raw_loss)
                continue
            average.copy_to(eval_model, i)
            losses.append(self.loss(eval_model))
        raw, *ewa = torch.stack(losses).tolist()  # host sync
        finite = [x for x in ewa if math.isfinite(x)]
        return EvalPoint(
            step=step,
            tokens=tokens,
            loss=min(finite) if finite else math.nan,
            raw_loss=raw,
            ewa_losses={f"{tau:g}": loss for tau, loss in zip(taus, ewa)},
        )
