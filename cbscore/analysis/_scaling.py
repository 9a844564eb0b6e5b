"""The scaling laws of ``B*`` across settings, each fitted only where it is defined.

DESIGN.md §1, "Scaling laws", after Zhang et al. 2025 (arXiv 2410.21676, §4):

- ``B* = c·N^alpha`` across settings that share ``D`` (one law per such group);
- ``B* = c·D^beta`` across settings that share ``N`` (one law per such group);
- ``B* = c·N^alpha`` across settings with ``D ∝ N`` (a constant tokens-per-parameter ratio: the
  paper's Chinchilla study, reported as "N and D together"; one law per ratio);
- the joint ``B* = c·N^alpha·D^beta`` where ``N`` and ``D`` vary independently.

Settings whose other variable differs are never pooled into a one-variable law: across
``(N1, D1), (N1, D2), (N2, D1)`` the law in ``D`` comes from the two ``N1`` settings, the law in
``N`` from the two ``D1`` settings, and nothing is fitted across all three.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cbscore.analysis._forecast import Forecast
from cbscore.analysis._joint_law import JointPowerLawFit, fit_joint_power_law
from cbscore.analysis._power_law import PowerLawFit, SharedDraws, fit_power_law
from cbscore.errors import FitError

#: Relative tolerance within which two settings share ``N`` or ``D`` (values from tags or CSVs).
SAME_VALUE_RTOL = 1e-3
#: Relative spread of tokens per parameter within which settings count as ``D ∝ N``: the paper's
#: Chinchilla models (DESIGN.md §1) span 20.3 to 20.5 tokens per parameter.
SAME_RATIO_RTOL = 0.1


@dataclass(frozen=True, kw_only=True, eq=False)
class ScalingLaws:
    """Every law the settings support, one per group of settings that defines it; the rest are
    sentences in :attr:`errors`."""

    n_laws: tuple[PowerLawFit, ...]
    """``B* = c·N^alpha`` at fixed ``D``: one per ``D`` shared by settings with two or more
    distinct ``N`` (``fixed_name == "tokens"``), by ascending ``D``."""
    d_laws: tuple[PowerLawFit, ...]
    """``B* = c·D^beta`` at fixed ``N``: one per ``N`` shared by settings with two or more
    distinct ``D`` (``fixed_name == "n_params"``), by ascending ``N``; settings that give no ``N``
    form one group, flagged in :attr:`errors`."""
    chinchilla: tuple[PowerLawFit, ...]
    """``B* = c·N^alpha`` with ``D ∝ N``: one per tokens-per-parameter ratio (within
    :data:`SAME_RATIO_RTOL`) shared by settings with two or more distinct ``N``
    (``fixed_name == "tokens_per_param"``)."""
    joint: JointPowerLawFit | None
    """``B* = c·N^alpha·D^beta`` where ``N`` and ``D`` vary independently (≥ 4 settings, logs not
    collinear)."""
    errors: tuple[str, ...]
    """Why a law is missing, has no interval, or rests on an assumption; one sentence each."""

    @property
    def laws(self) -> tuple[PowerLawFit, ...]:
        """Every one-variable law: at fixed ``D``, at fixed ``N``, then with ``D ∝ N``."""
        return self.n_laws + self.d_laws + self.chinchilla

    @property
    def n(self) -> PowerLawFit | None:
        """The headline law in ``N`` (the one the ``N`` chart draws): of the Chinchilla laws and
        the laws at fixed ``D``, the one over the most settings (a Chinchilla law on a tie)."""
        return _largest(self.chinchilla + self.n_laws)

    @property
    def d(self) -> PowerLawFit | None:
        """The headline law in ``D``: the law at fixed ``N`` over the most settings."""
        return _largest(self.d_laws)

    def forecast(self, n_params: float | None = None, tokens: float | None = None) -> Forecast:
        """``B*`` at ``(N, D)`` from the law that covers it.

        Both given: the joint law if fitted, else a law at fixed ``N`` whose ``N`` matches, a law
        at fixed ``D`` whose ``D`` matches, or a Chinchilla law whose tokens per parameter match.
        ``N`` alone: the Chinchilla law (``D ∝ N``), else the only law at fixed ``D``. ``D``
        alone: the only law at fixed ``N``.

        Raises:
            FitError: no fitted law covers the given variables.
        """
        if n_params is not None and tokens is not None:
            if self.joint is not None:
                return self.joint.forecast(n_params, tokens)
            for laws, value, x in (
                (self.d_laws, n_params, tokens),
                (self.n_laws, tokens, n_params),
                (self.chinchilla, tokens / n_params, n_params),
            ):
                rtol = SAME_RATIO_RTOL if laws is self.chinchilla else SAME_VALUE_RTOL
                for law in laws:
                    if law.fixed_value is not None and _close(law.fixed_value, value, rtol):
                        return law.forecast(x)
        elif n_params is not None:
            law = _largest(self.chinchilla) or (self.n_laws[0] if len(self.n_laws) == 1 else None)
            if law is not None:
                return law.forecast(n_params)
        elif tokens is not None:
            if len(self.d_laws) == 1:
                return self.d_laws[0].forecast(tokens)
        raise FitError(
            f"no scaling law was fitted that forecasts from n_params={n_params!r}, tokens={tokens!r}"
        )


def _largest(laws: Sequence[PowerLawFit]) -> PowerLawFit | None:
    return max(laws, key=lambda law: len(law.x), default=None)  # max keeps the first of a tie


def _close(a: float, b: float, rtol: float) -> bool:
    return abs(a - b) <= rtol * max(abs(a), abs(b))


def _groups(values: Sequence[float | None], rtol: float) -> list[list[int]]:
    """Indices grouped by value, groups ascending; values within ``rtol`` of a group's smallest
    join it. ``None`` values form one last group."""
    known = sorted((i for i, v in enumerate(values) if v is not None), key=lambda i: values[i])
    groups: list[list[int]] = []
    for i in known:
        if groups and values[i] <= values[groups[-1][0]] * (1.0 + rtol):
            groups[-1].append(i)
        else:
            groups.append([i])
    unknown = [i for i, v in enumerate(values) if v is None]
    return [sorted(g) for g in groups] + ([unknown] if unknown else [])  # settings in table order


def _geometric_mean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


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
    """Fit every law the settings define (see the module docstring); the rest become sentences.

    A group needs two or more settings with distinct values of the law's variable; its interval
    needs three (see :func:`fit_power_law`).

    Every law draws from one study-wide set of random numbers (:class:`SharedDraws`): draw ``r`` of
    every law uses draw ``r`` of each of its settings' own ``B*`` samples, that setting's ``r``-th
    scatter normal and the study's ``r``-th t-scale uniform. So the draws of two laws pair up (the
    verdict of :func:`compare_with_paper` reads ``beta_D - alpha_N`` draw by draw): a setting that
    two laws share enters both with the same error in the same draw, as it did in the
    measurement, and laws over disjoint settings draw from independent inputs, as their errors
    are. Each setting's row is seeded by ``seed`` and its name, so adding a setting elsewhere
    never changes it.
    """
    errors: list[str] = []
    names = list(settings)
    shared = None
    if cbs_samples is not None:
        rows = [SharedDraws.draw(1, n_draws, np.random.default_rng([seed, zlib.crc32(name.encode("utf-8"))]))
                for name in names]
        shared = SharedDraws(scatter=np.concatenate([r.scatter for r in rows]) if rows else np.zeros((0, n_draws)),
                             uniform=np.random.default_rng([seed, 5]).random(n_draws))

    def fit_groups(variable, x_values, key_values, fixed_name, rtol, what):
        laws = []
        for group in _groups(key_values, rtol):
            group = [i for i in group if x_values[i] is not None]
            if len({x_values[i] for i in group}) < 2:
                continue
            keys = [key_values[i] for i in group]
            fixed = keys[0]  # None for the group of settings that do not give the key
            if fixed is not None and len(set(keys)) > 1:
                fixed = _geometric_mean(keys)
            group_names = [names[i] for i in group]
            try:
                law = fit_power_law(
                    [x_values[i] for i in group],
                    [cbs[i] for i in group],
                    variable=variable,
                    settings=group_names,
                    cbs_samples=None if cbs_samples is None else [cbs_samples[i] for i in group],
                    n_draws=n_draws,
                    fixed_name=fixed_name,
                    fixed_value=fixed,
                    shared=None if shared is None else shared.rows(group),
                )
            except FitError as exc:
                errors.append(f"scaling law {what}: {exc}")
                continue
            digits = 3 if fixed_name == "tokens_per_param" else 4
            where = f"{what} = {fixed:.{digits}g}" if fixed is not None else f"{what} (not given)"
            if fixed is None:
                errors.append(
                    f"scaling law {where}: settings {', '.join(group_names)} give no {fixed_name}; "
                    "taken as sharing it"
                )
            # The law's notes start "law in <variable>: "; the group's name replaces that.
            errors.extend(f"scaling law {where}: {note.split(': ', 1)[-1]}" for note in law.notes)
            laws.append(law)
        return tuple(laws)

    both = [n is not None and d is not None for n, d in zip(n_params, tokens)]
    n_known = [n if ok else None for n, ok in zip(n_params, both)]
    ratio = [d / n if ok else None for n, d, ok in zip(n_params, tokens, both)]
    # Settings that give one variable but not the other form one group of their own, flagged (a
    # published table of a fixed-N study may leave N out).
    n_laws = fit_groups("n", list(n_params), list(tokens), "tokens", SAME_VALUE_RTOL,
                        "in n_params at fixed tokens")
    d_laws = fit_groups("d", list(tokens), list(n_params), "n_params", SAME_VALUE_RTOL,
                        "in tokens at fixed n_params")
    chinchilla = fit_groups("n", n_known, ratio, "tokens_per_param", SAME_RATIO_RTOL,
                            "in n_params with D ∝ N at tokens per parameter")
    if not n_laws:
        errors.append("scaling law in n_params at fixed tokens: no two settings with different "
                      "n_params share tokens")
    if not d_laws:
        errors.append("scaling law in tokens at fixed n_params: no two settings with different "
                      "tokens share n_params")
    if not chinchilla:
        errors.append("scaling law in n_params with D ∝ N: no two settings with different n_params "
                      f"share tokens per parameter (within {SAME_RATIO_RTOL:.0%})")
    joint = None
    index = [i for i, ok in enumerate(both) if ok]
    if len({n_params[i] for i in index}) >= 2 and len({tokens[i] for i in index}) >= 2:
        try:
            joint = fit_joint_power_law(
                [n_params[i] for i in index],
                [tokens[i] for i in index],
                [cbs[i] for i in index],
                settings=[names[i] for i in index],
                cbs_samples=None if cbs_samples is None else [cbs_samples[i] for i in index],
                n_draws=n_draws,
                shared=None if shared is None else shared.rows(index),
            )
            errors += [f"joint scaling law: {note}" for note in joint.notes]
        except FitError as exc:
            errors.append(f"joint scaling law: {exc}")
    else:
        errors.append("joint scaling law: needs settings where both n_params and tokens vary")
    return ScalingLaws(n_laws=n_laws, d_laws=d_laws, chinchilla=chinchilla, joint=joint, errors=tuple(errors))
