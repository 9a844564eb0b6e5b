"""Exponential weight averaging (EWA) of the parameters, several decay rates at once.

After every optimizer step ``t = 1, 2, ...`` and for each tracked ``τ``:

    ξ_t = τ·ξ_{t-1} + (1 − τ)·θ_t,   ξ_0 = 0

and the averaged weights are bias corrected, ``ξ̂_t = ξ_t / (1 − τ^t)`` (Kingma & Ba 2015,
§3, the same correction as Adam's moments; Zhang et al. 2025, §3.1 use EWA for every
evaluation). ``ξ̂_t`` is a weighted mean of ``θ_1 .. θ_t`` with weights ∝ τ^(t−i) that sum to
one. Before the first step (t = 0) the average is the initial weights themselves.

*A decay per step that follows the batch* (:meth:`WeightAverage.set_step_factor`). With a factor
``f`` a step decays by ``τ^f`` (``f = B / B_anchor``: the same decay per token at every batch, so a
branch at ``k·B0`` averages over the tokens a ``B0`` run does; Merrill et al. 2025, arXiv
2505.23971, compare branches over equal tokens). The recursion is then ``ξ_t = τ_t·ξ_{t-1} +
(1 − τ_t)·θ_t`` and the bias correction is ``1 − Π_{s≤t} τ_s`` (the same derivation: the weights
``(1 − τ_i)·Π_{s>i} τ_s`` sum to ``1 − Π_s τ_s``), which is ``1 − τ^t`` when every ``f = 1``.

The update of every τ is one ``torch._foreach_lerp_`` call (``ξ ← ξ + (1 − τ)(θ − ξ)``) over
the shadows of all τ at once with a weight per tensor, in the parameters' dtype (fp32 master
weights under autocast), with no host synchronisation: one multi-tensor launch sequence instead
of one per τ. A torch without the per-tensor-weight overload (``ScalarList``) gets one call per τ.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


class WeightAverage:
    """EWA shadows of ``params`` for each ``τ`` in ``taus``."""

    def __init__(self, params: Sequence[torch.Tensor], taus: Sequence[float]):
        taus = tuple(float(t) for t in taus)
        if not taus or any(not 0.0 < t < 1.0 for t in taus):
            raise ValueError(f"taus must be one or more numbers in (0, 1), but got {taus!r}.")
        self.taus = taus
        self.params = list(params)
        self.shadows = [[torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params] for _ in taus]
        self.count = 0  # t, the number of updates folded in
        self.decay = [1.0] * len(taus)  # Π τ_s over the updates folded in, per τ (host floats: no sync)
        self.step_taus = taus  # τ_t of the next update: τ^f (set_step_factor)
        # the fused update's arguments, built once: every τ's shadows, the parameters once per τ
        self._all_shadows = [s for shadow in self.shadows for s in shadow]
        self._all_params = self.params * len(taus)
        self._all_weights = [1.0 - tau for tau in taus for _ in self.params]
        self._fused = _has_lerp_scalar_list()

    @torch.no_grad()
    def update(self) -> None:
        """Fold the current parameters in: ξ ← τ·ξ + (1 − τ)·θ for every τ."""
        self.count += 1
        self.decay = [d * t for d, t in zip(self.decay, self.step_taus)]
        if self._fused:
            torch._foreach_lerp_(self._all_shadows, self._all_params, self._all_weights)
            return
        for tau, shadow in zip(self.step_taus, self.shadows):
            torch._foreach_lerp_(shadow, self.params, 1.0 - tau)

    def set_step_factor(self, factor: float) -> None:
        """From the next update on, each step decays by ``τ^factor`` (``factor = B / B_anchor``;
        1 = the per-step τ). Called between steps, when the batch changes."""
        if not factor > 0:
            raise ValueError(f"factor must be positive, but got {factor!r}.")
        self.step_taus = tuple(tau ** factor for tau in self.taus)
        self._all_weights = [1.0 - tau for tau in self.step_taus for _ in self.params]

    def correction(self, index: int) -> float:
        """Bias correction ``1 − Π τ_s`` of shadow ``index`` (``1 − τ^t`` at one factor)."""
        return 1.0 - self.decay[index]

    @torch.no_grad()
    def averaged(self, index: int) -> list[torch.Tensor]:
        """Bias-corrected averaged weights ξ̂ for ``taus[index]`` (new tensors)."""
        if self.count == 0:
            return [p.detach().clone() for p in self.params]
        return torch._foreach_div(self.shadows[index], self.correction(index))

    @torch.no_grad()
    def copy_to(self, model: nn.Module, index: int) -> None:
        """Load ξ̂ for ``taus[index]`` into ``model`` (same architecture as the averaged one)."""
        targets = [p for p in model.parameters()]
        if self.count == 0:
            torch._foreach_copy_(targets, self.params)
            return
        torch._foreach_copy_(targets, self.shadows[index])
        torch._foreach_div_(targets, self.correction(index))

    def state_dict(self) -> dict:
        return {"taus": list(self.taus), "count": self.count, "decay": list(self.decay),
                "shadows": [list(s) for s in self.shadows]}

    @torch.no_grad()
    def load_state_dict(self, state: dict) -> None:
        if tuple(float(t) for t in state["taus"]) != self.taus:
            raise ValueError(f"taus of the saved average must be {self.taus}, but got {tuple(state['taus'])}.")
        self.count = int(state["count"])
        # a state saved before the factor existed decayed by τ at every step
        self.decay = [float(d) for d in state.get("decay", [tau ** self.count for tau in self.taus])]
        for shadow, saved in zip(self.shadows, state["shadows"]):
            torch._foreach_copy_(shadow, [s.to(shadow[0].device) for s in saved])


def _has_lerp_scalar_list() -> bool:
    """Whether this torch's ``_foreach_lerp_`` takes one weight per tensor."""
    try:
        torch._foreach_lerp_([torch.zeros(1)], [torch.ones(1)], [0.5])
    except (TypeError, RuntimeError):
        return False
    return True
