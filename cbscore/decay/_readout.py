"""Steps to target from losses read at the end of several horizons.

Under a horizon-bound schedule a run's final loss ``L(H)`` (decayed to the floor at ``H``) falls
with ``H``; the steps to target are where it first reaches the target. Between the last horizon
above the target and the first at or below it the crossing is read on a straight line in
``(ln H, L)`` (a power law in H is close to straight there; the bracket is reported beside it).
A first horizon already at the target gives an upper bound (``S ≤ H_0``), none a lower bound
(``S > H_max``, censored), as the DESIGN's censoring rule asks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cbscore.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class HorizonCrossing:
    """Where the decayed loss first reaches the target."""

    steps: float | None
    """Interpolated steps to target; ``None`` when censored."""
    bracket: tuple[int | None, int | None]
    """``(last horizon above the target, first at or below it)``, steps; ``None`` where there is none."""
    censored: bool
    """No horizon reached the target: ``S > bracket[0]``."""
    at_most: bool
    """The first horizon already reached it: ``steps`` is an upper bound."""

    def to_dict(self) -> dict:
        return {"steps": self.steps, "bracket": list(self.bracket), "censored": self.censored, "at_most": self.at_most}


def steps_from_horizons(horizons, losses, target: float) -> HorizonCrossing:
    """``horizons`` (steps, increasing) and the final loss at each (``None``/non-finite: not read,
    e.g. a diverged run, which is skipped); the first crossing of ``target``."""
    if not math.isfinite(target):
        raise ConfigError("target_loss", target, "must be a finite number")
    pairs = [(int(h), float(x)) for h, x in zip(horizons, losses) if x is not None and math.isfinite(x)]
    if len(pairs) != len(set(h for h, _ in pairs)) or any(b[0] <= a[0] for a, b in zip(pairs, pairs[1:])):
        raise ConfigError("horizons", list(horizons), "must be distinct and increasing")
    previous: tuple[int, float] | None = None
    for h, loss in pairs:
        if loss <= target:
            if previous is None:
                return HorizonCrossing(steps=float(h), bracket=(None, h), censored=False, at_most=True)
            h0, l0 = previous
            share = (l0 - target) / (l0 - loss)  # in (0, 1]
            steps = math.exp(math.log(h0) + share * (math.log(h) - math.log(h0)))
            return HorizonCrossing(steps=steps, bracket=(h0, h), censored=False, at_most=False)
        previous = (h, loss)
    return HorizonCrossing(steps=None, bracket=(pairs[-1][0] if pairs else None, None), censored=True, at_most=False)
