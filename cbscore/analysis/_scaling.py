"""The scaling laws of ``B*`` across settings: in ``N``, in ``D``, and joint."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cbscore.analysis._forecast import Forecast
from cbscore.analysis._joint_law import JointPowerLawFit, fit_joint_power_law
from cbscore.analysis._power_law import PowerLawFit, fit_power_law
from cbscore.errors import FitError


@dataclass(frozen=True, kw_only=True, eq=False)
class ScalingLaws:
    """Whichever laws the settings support; the others are ``None`` with a reason in ``errors``."""

    n: PowerLawFit | None
    """``B* = c·N^alpha`` over the settings that carry ``n_params``."""
    d: PowerLawFit | None
    """``B* = c·D^beta`` over the settings that carry ``tokens``."""
    joint: JointPowerLawFit | None
    """``B* = c·N^alpha·D^beta`` when both vary (at least 4 settings)."""
    errors: tuple[str, ...]
    """Why a law is missing or has no interval, one sentence each."""

    def forecast(self, n_params: float | None = None, tokens: float | None = None) -> Forecast:
        """``B*`` at ``(N, D)``: the joint law when both are given and it exists, else the law
        of the one given (or of ``N`` when both are given but only it exists).

        Raises:
            FitError: no fitted law takes the given variables.
        """
        if n_params is not None and tokens is not None and self.joint is not None:
            return self.joint.forecast(n_params, tokens)
        if n_params is not None and self.n is not None:
            return self.n.forecast(n_params)
        if tokens is not None and self.d is not None:
            return self.d.forecast(tokens)
        raise FitError(
            f"no scaling law was fitted that forecasts from n_params={n_params!r}, tokens={tokens!r}"
        )


def fit_scaling_laws(
    settings: Sequence[str],
    n_params: Sequence[float | None],
    tokens: Sequence[float | None],
    cbs: Sequence[float],
    cbs_samples: Sequence[np.ndarray] | None = None,
    *,
    n_draws: int = 1000,
    seed: int = 0,
) -> ScalingLaws:
    """Fit every law the settings support; failures become sentences in ``errors``.

    ``n`` uses the settings with ``n_params`` when at least two distinct values exist (likewise
    ``d`` with ``tokens``); ``joint`` uses those with both when both vary.
    """
    errors: list[str] = []
    fits: dict[str, PowerLawFit | None] = {}
    for law, column, values in (("n", "n_params", n_params), ("d", "tokens", tokens)):
        keep = [i for i, v in enumerate(values) if v is not None]
        try:
            fits[law] = fit_power_law(
                [values[i] for i in keep],
                [cbs[i] for i in keep],
                variable=law,
                settings=[settings[i] for i in keep],
                cbs_samples=None if cbs_samples is None else [cbs_samples[i] for i in keep],
                n_draws=n_draws,
                seed=[seed, 1 if law == "n" else 2],
            )
            errors += [f"scaling law in {column}: {note}" for note in fits[law].notes]
        except FitError as exc:
            fits[law] = None
            errors.append(f"scaling law in {column}: {exc}")
    joint = None
    both = [i for i in range(len(cbs)) if n_params[i] is not None and tokens[i] is not None]
    if len({n_params[i] for i in both}) >= 2 and len({tokens[i] for i in both}) >= 2:
        try:
            joint = fit_joint_power_law(
                [n_params[i] for i in both],
                [tokens[i] for i in both],
                [cbs[i] for i in both],
                settings=[settings[i] for i in both],
                cbs_samples=None if cbs_samples is None else [cbs_samples[i] for i in both],
                n_draws=n_draws,
                seed=[seed, 3],
            )
            errors += [f"joint scaling law: {note}" for note in joint.notes]
        except FitError as exc:
            errors.append(f"joint scaling law: {exc}")
    else:
        errors.append("joint scaling law: needs settings where both n_params and tokens vary")
    return ScalingLaws(n=fits["n"], d=fits["d"], joint=joint, errors=tuple(errors))
