"""``WindowStream``: training batches as a pure function of ``(seed, step, batch_size)``.

The training tokens are cut into non-overlapping windows of ``T + 1`` tokens (inputs are the first
``T``, targets the last ``T``). A seeded permutation orders the windows; the global sequence
index ``g = step * B + row`` picks window ``perm[g]``. Step ``t`` at batch size ``B`` therefore
takes windows ``t*B ... (t+1)*B - 1`` of one fixed order: every batch size sees the same data in
the same order (batch ``2B`` at step ``t`` = batch ``B`` at steps ``2t`` and ``2t + 1``), and
resuming needs only the step. Past the end of the permutation (a second epoch) a fresh seeded
permutation follows, only when repetition is allowed.
"""

from __future__ import annotations

import numpy as np

from cbscore.errors import DataError


class WindowStream:
    """Seeded, step-addressable windows over one flat token array."""

    def __init__(
        self,
        tokens: np.ndarray,
        context_tokens: int,
        seed: int,
        allow_repeat: bool = False,
    ) -> None:
        if not _is_int(context_tokens) or context_tokens < 1:
            raise DataError(f"context_tokens must be a positive integer, but got {context_tokens!r}.")
        if not _is_int(seed) or seed < 0:
            raise DataError(f"seed must be a non-negative integer, but got {seed!r}.")
        context_tokens, seed = int(context_tokens), int(seed)
        width = context_tokens + 1
        n_windows = len(tokens) // width
        if n_windows == 0:
            raise DataError(
                f"The training split holds {len(tokens)} tokens, fewer than one window of "
                f"context_tokens + 1 = {width}; use a shorter context or a larger corpus, "
                f"but got context_tokens={context_tokens}."
            )
        self.context_tokens = context_tokens
        self.seed = seed
        self.allow_repeat = allow_repeat
        self.n_windows = n_windows
        #: (n_windows, T + 1) view of the memmap; nothing is read until rows are indexed.
        self._grid = tokens[: n_windows * width].reshape(n_windows, width)
        self._perms: dict[int, np.ndarray] = {}

    @property
    def n_tokens(self) -> int:
        """Training tokens one pass offers: ``n_windows * T`` (each window trains T predictions)."""
        return self.n_windows * self.context_tokens

    def _perm(self, epoch: int) -> np.ndarray:
        perm = self._perms.get(epoch)
        if perm is None:
            if len(self._perms) >= 2:  # keep memory bounded: a run moves forward through epochs
                self._perms.pop(min(self._perms))
            perm = np.random.default_rng([self.seed, epoch]).permutation(self.n_windows)
            self._perms[epoch] = perm
        return perm

    def windows(self, start: int, count: int) -> np.ndarray:
        """Windows ``start ... start + count - 1`` of the seeded order: int64 (count, T + 1)."""
        for name, value in (("start", start), ("count", count)):
            if not _is_int(value) or value < 0:
                raise DataError(f"{name} must be a non-negative integer, but got {value!r}.")
        start, count = int(start), int(count)
        end = start + count
        if end > self.n_windows and not self.allow_repeat:
            raise DataError(
                f"Asked for windows up to {end} ({end * self.context_tokens} training tokens), "
                f"but the store holds {self.n_windows} windows of {self.context_tokens + 1} tokens "
                f"= {self.n_tokens} training tokens available in one pass; lower the budget or "
                f"allow repetition, but got start={start}, count={count}."
            )
        index = np.arange(start, end, dtype=np.int64)
        epochs, positions = np.divmod(index, self.n_windows)
        rows = np.empty(count, dtype=np.int64)
        for epoch in np.unique(epochs):
            mask = epochs == epoch
            rows[mask] = self._perm(int(epoch))[positions[mask]]
        # Sorted reads are kinder to the page cache; put rows back in stream order after.
        order = np.argsort(rows, kind="stable")
        out = np.empty((count, self.context_tokens + 1), dtype=np.int64)
        out[order] = self._grid[rows[order]]
        return out  # (count, T + 1)

    def batch(self, step: int, batch_size: int) -> np.ndarray:
        """The batch of optimizer step ``step``: int64 (batch_size, T + 1)."""
        if not _is_int(step) or step < 0:
            raise DataError(f"step must be a non-negative integer, but got {step!r}.")
        if not _is_int(batch_size) or batch_size < 1:
            raise DataError(f"batch_size must be a positive integer, but got {batch_size!r}.")
        return self.windows(int(step) * int(batch_size), int(batch_size))

    def check_tokens(self, max_tokens: int) -> None:
        """Raise ``DataError`` (stating what is available) if one pass cannot supply ``max_tokens``."""
        if not _is_int(max_tokens) or max_tokens < 0:
            raise DataError(f"max_tokens must be a non-negative integer, but got {max_tokens!r}.")
        if max_tokens > self.n_tokens and not self.allow_repeat:
            raise DataError(
                f"max_tokens: training is single pass and the store holds {self.n_tokens} "
                f"training tokens ({self.n_windows} windows of {self.context_tokens} + 1 tokens); "
                f"lower the budget, use a larger corpus or allow repetition, but got {max_tokens}."
            )

    def __repr__(self) -> str:
        return (
            f"WindowStream(n_windows={self.n_windows}, context_tokens={self.context_tokens}, "
            f"seed={self.seed}, allow_repeat={self.allow_repeat})"
        )


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)
