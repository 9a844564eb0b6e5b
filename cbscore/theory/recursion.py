"""The exact expected risk of one-pass mini-batch SGD on the least-squares problem, at any step.

Derivation (the recursion)
--------------------------
Write ``e_t = w_t − w*``, ``Γ = diag(γ_i)`` and ``Ĥ = (1/B)·Σ_b x_b x_bᵀ`` over the step's ``B``
fresh samples. The batch-mean gradient step ``w ← w − Γ·(1/B)Σ_b x_b(x_bᵀw − y_b)`` gives

    e_{t+1} = (I − ΓĤ_t)·e_t + Γ·(1/B)·Σ_b x_b ξ_b.

The second moment ``M_t = E[e_t e_tᵀ]`` follows from the independence of the fresh batch and, for
Gaussian ``x``, ``E[x xᵀ M x xᵀ] = 2HMH + tr(HM)·H`` (Isserlis), so that
``E[Ĥ M Ĥ] = HMH + (HMH + tr(HM)·H)/B``:

    M_{t+1} = (I − ΓH)M_t(I − HΓ) + (Γ/B)·(H M_t H + tr(H M_t)·H + σ²H)·Γ.

This is the mini-batch form of the recursion of Bach & Moulines 2013 (arXiv 1306.2119, §3) and
Jain et al. 2018 (JMLR 18(223), "Parallelizing SGD for least squares", eq. 5), as Zhang et al.
2025 (arXiv 2410.21676, §4 and App. F) use it. With ``H`` and ``Γ`` diagonal, the diagonal
``A_i = M_ii`` evolves on its own:

    A_i(t+1) = ρ_i·A_i(t) + v_i·P_t,   ρ_i = (1 − g_i)² + g_i²/B,   v_i = γ_i²λ_i/B,
    P_t = Σ_j λ_j A_j(t) + σ²,          g_i = γ_iλ_i,   A_i(0) = w*_i²,

and the expected excess risk of the last iterate is ``R_t = Σ_i λ_i A_i(t)`` (the population risk
``E(y − xᵀw)²`` is ``R_t + σ²``). With ``γ_i = η`` this is the issue's recursion.

Averaged iterates. The lab's EWA (:mod:`cbscore.train.averaging`) is ``ξ_t = τ·ξ_{t−1} + (1 − τ)·w_t``,
``ξ_0 = 0``, evaluated bias corrected, ``ξ̂_t = ξ_t/(1 − τ^t)``; the uniform (Polyak–Ruppert)
average is ``w̄_t = (1/t)·Σ_{s=1}^t w_s``. Both are ``Σ_s c·τ^{t−s}·w_s/N_t`` with ``N_t = S_t(τ) =
Σ_{n<t} τ^n`` (``τ = 1`` for the uniform average), so ``ξ̂_t − w* = Σ_s τ^{t−s}·e_s/S_t(τ)``. The
diagonal moments of the iterates alone do not give its risk: it needs the cross moments
``E[e_i(s')·e_i(s)]``. They are exact too: the conditional mean of a later step is
``E[e(s+j) | e(s)] = (I − ΓH)^j·e(s)``, so ``E[e_i(s')e_i(s)] = q_i^{|s'−s|}·A_i(min(s, s'))``
with ``q_i = 1 − g_i``. Summing the double series,

    R̄_t = Σ_i λ_i·Σ_{s=1}^t K_i(t − s)·A_i(s) / S_t(τ)²,
    K_i(n) = τ^{2n} + 2q_i·Σ_{j=1}^n τ^{2n−j}q_i^{j−1} = α_i·τ^{2n} + β_i·(τq_i)^n,
    α_i = (τ + q_i)/(τ − q_i),   β_i = −2q_i/(τ − q_i).

Equivalently, per mode, ``C_i = E[e_i u_i]`` and ``U_i = E[u_i²]`` of the unnormalised average
``u_t = τ·u_{t−1} + e_t`` follow ``C ← τq·C + A'``, ``U ← τ²U + 2τq·C + A'`` (``A'`` the new
``A``); :func:`direct_risk` steps exactly that, and the tests check the two against each other
and against a Monte-Carlo simulation of SGD itself.

The closed form (why it is exact at any step)
---------------------------------------------
The recursion is linear: ``A(t+1) = M·A(t) + σ²v`` with ``M = diag(ρ) + v·λᵀ``, a diagonal plus
a rank-one matrix. Its eigenvalues ``μ_k = 1 − ν_k`` are the roots of the secular equation
``Σ_i λ_i v_i/(μ − ρ_i) = 1`` (:mod:`cbscore.theory.secular`), with right eigenvectors
``a_k = v/(μ_k − ρ)`` (normalised so ``λᵀa_k = 1``), left eigenvectors ``ℓ_k = λ/(μ_k − ρ)`` and
``ℓ_kᵀa_k = h_k = Σ_i λ_iv_i/(μ_k − ρ_i)²`` (Golub 1973, SIAM Rev. 15, §5; Bunch, Nielsen &
Sorensen 1978). Hence, with the fixed point ``A_∞ = σ²·v/((1 − ρ)(1 − Σ_j λ_jv_j/(1 − ρ_j)))``,

    A(t) = A_∞ + Σ_k ζ_k·μ_k^t·a_k,   ζ_k = ℓ_kᵀ(A(0) − A_∞)/h_k,   R_t = R_∞ + Σ_k ζ_k·μ_k^t,

a sum of ``d`` exponentials that is exact at every integer ``t`` (no time stepping at all: the
"per-block closed form" of any step grid is this). Feeding it through ``K_i`` gives the averaged
risk as a sum of the exponentials ``μ_k^t``, ``(τq_i)^t`` and ``τ^{2t}`` divided by ``S_t(τ)²``
(for the uniform average ``τ^{2t} = 1`` and a term linear in ``t`` appears). Coefficients cost
``O(d²)`` per ``(B, η)`` and per ``τ``; each evaluation ``O(d)`` per step. Rounding: every
``1 − μ`` is carried to full relative precision; where two of the exponential rates coincide
the partial fractions lose about ``ε/gap`` digits, so a ``τ`` within 1e-9 of such a coincidence
is moved by a relative 1e-7 (a change far below anything the protocol reads).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cbscore.errors import ConfigError
from cbscore.theory.problem import Problem, check_batch_size, stability_margin
from cbscore.theory.secular import solve_secular

#: The iterates whose risk the simulator follows.
ITERATES = ("last", "ewa", "uniform")
#: Relative separation below which two exponential rates count as coinciding (see module doc).
_RESONANCE = 1e-9


def check_iterate(iterate: object) -> str:
    if iterate not in ITERATES:
        raise ConfigError("iterate", iterate, f"must be one of {', '.join(ITERATES)}")
    return str(iterate)


def check_tau(tau: object) -> float:
    """An EWA decay ``τ`` in (0, 1), or :class:`ConfigError`."""
    if isinstance(tau, bool) or not isinstance(tau, (int, float, np.integer, np.floating)) or not 0.0 < float(tau) < 1.0:
        raise ConfigError("tau", tau, "must be a number in (0, 1)")
    return float(tau)


def _near(sorted_nu: np.ndarray, other: np.ndarray) -> bool:
    """Whether some rate in ``other`` is within a relative :data:`_RESONANCE` of one in ``sorted_nu``."""
    pos = np.searchsorted(sorted_nu, other)
    for nb in (np.clip(pos - 1, 0, sorted_nu.size - 1), np.clip(pos, 0, sorted_nu.size - 1)):
        ref = sorted_nu[nb]
        if np.any(np.abs(ref - other) <= _RESONANCE * np.maximum(np.abs(ref), np.abs(other))):
            return True
    return False


# ---------------------------------------------------------------------------- direct stepping
def direct_risk(problem: Problem, batch_size: int, eta: float, steps: int, *, tau: float | None = None,
                uniform: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
    """Step the moment recursion one step at a time: ``(R_t, R̄_t)`` for ``t = 0 … steps``.

    The reference the closed form is tested against (``O(d)`` per step; for short horizons).
    ``R̄`` is the EWA's risk for ``tau``, the uniform average's with ``uniform=True``, else ``None``;
    ``R̄_0 = R_0`` (the average of no step is the initial weights).
    """
    lam = problem.eigenvalues
    g = problem.effective_steps(eta)
    rho = (1.0 - g) ** 2 + g**2 / batch_size
    v = g**2 / (batch_size * lam)
    q = 1.0 - g
    avg = uniform or tau is not None
    decay = 1.0 if uniform else (tau if tau is not None else 0.0)
    A = problem.initial_error.copy()
    C = np.zeros_like(A)
    U = np.zeros_like(A)
    risk = np.empty(steps + 1)
    risk_avg = np.empty(steps + 1) if avg else None
    risk[0] = float(lam @ A)
    if avg:
        risk_avg[0] = risk[0]
    norm = 0.0
    for t in range(1, steps + 1):
        P = float(lam @ A) + problem.sigma2
        C_prev = C
        A = rho * A + v * P
        if avg:
            C = decay * q * C_prev + A  # E[e_{t} u_t] with u_t = τ·u_{t−1} + e_t
            U = decay**2 * U + 2.0 * decay * q * C_prev + A
            norm = decay * norm + 1.0  # S_t(τ)
            risk_avg[t] = float(lam @ U) / norm**2
        risk[t] = float(lam @ A)
    return risk, risk_avg


# ---------------------------------------------------------------------------- exponential sums
def powers(nu: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``(1 − ν)^t`` for bases given by ``ν = 1 − base`` (accurate near base 1) and integer ``t``.

    ``nu`` (m,), ``t`` (T,) → (m, T). Bases may be negative (``ν > 1``).
    """
    nu = np.asarray(nu, dtype=float)[:, None]
    t = np.asarray(t, dtype=float)[None, :]
    with np.errstate(divide="ignore"):
        log_abs = np.where(nu < 1.0, np.log1p(-np.minimum(nu, 1.0)), np.log(np.abs(nu - 1.0)))
    out = np.exp(t * log_abs)
    negative = (nu > 1.0) & (np.mod(t, 2.0) == 1.0)
    return np.where(negative, -out, out)


def geometric_sum(nu: float, t: np.ndarray) -> np.ndarray:
    """``S_t = Σ_{n<t} (1 − ν)^n`` for each ``t``: ``(1 − (1 − ν)^t)/ν``, and ``t`` at ``ν = 0``."""
    t = np.asarray(t, dtype=float)
    if nu == 0.0:
        return t
    return -np.expm1(t * math.log1p(-nu)) / nu


@dataclass(frozen=True, kw_only=True, eq=False)
class RiskCurve:
    """``R(t) = (c + l·t + Σ_j coef_j·(1 − ν_j)^t)/S_t(τ)²`` for ``t ≥ 1``, ``R(0) = initial``.

    The last iterate has ``l = 0`` and ``S_t ≡ 1`` (``norm_nu = None``).
    """

    batch_size: int
    eta: float
    iterate: str
    tau: float | None
    const: float
    linear: float
    nu: np.ndarray
    """(m,) the rates ``ν_j = 1 − base_j``."""
    coef: np.ndarray
    """(m,) their coefficients."""
    norm_nu: float | None
    """``1 − τ`` of the normaliser ``S_t(τ)`` (0 for the uniform average), ``None`` for the last iterate."""
    initial: float
    """``R(0)``: the risk of ``w_0``."""
    asymptote: float
    """``lim R(t)`` as ``t → ∞``."""

    def __call__(self, t) -> np.ndarray:
        """The expected excess risk at integer step(s) ``t ≥ 0`` (an array like ``t``)."""
        t_arr = np.atleast_1d(np.asarray(t, dtype=float))
        value = self.const + self.linear * t_arr + self.coef @ powers(self.nu, t_arr)
        if self.norm_nu is not None:
            with np.errstate(divide="ignore", invalid="ignore"):
                value = value / geometric_sum(self.norm_nu, t_arr) ** 2
        value = np.where(t_arr == 0, self.initial, value)
        return value.reshape(np.shape(t))


@dataclass(frozen=True, kw_only=True, eq=False)
class Spectrum:
    """The spectral solution of the last-iterate recursion for one ``(B, η)`` (module doc)."""

    problem: Problem
    batch_size: int
    eta: float
    lam: np.ndarray
    """(d,) ``λ_i``, modes sorted by ``1 − ρ_i`` ascending (the order of the secular solver)."""
    g: np.ndarray
    """(d,) ``g_i = γ_iλ_i`` in that order."""
    nu: np.ndarray
    """(d,) ``ν_k = 1 − μ_k``, the eigenvalues' distances from 1."""
    inv_diff: np.ndarray
    """(d, d) ``1/(μ_k − ρ_i)`` at ``[k, i]``; ``λ_i·a_k,i = λ_iv_i/(μ_k − ρ_i)``."""
    zeta: np.ndarray
    """(d,) ``ζ_k``: the last iterate's risk is ``R_∞ + Σ_k ζ_k μ_k^t``."""
    a_inf: np.ndarray
    """(d,) the fixed point ``A_∞``."""
    r_inf: float
    """``R_∞ = Σ λ_i A_∞,i``: the last iterate's asymptotic excess risk."""
    initial: float

    @functools.cached_property
    def _weights(self) -> np.ndarray:
        """(d, d) ``λ_i·a_k,i = λ_iv_i/(μ_k − ρ_i)`` at ``[k, i]`` (the averages' coupling)."""
        return self.inv_diff * (self.g**2 / self.batch_size)

    def evaluate(self, curves: Sequence[RiskCurve], steps: np.ndarray) -> np.ndarray:
        """(len(curves), T): this spectrum's curves at ``steps``, sharing the tables ``μ_k^t`` and
        ``q_i^t`` (an EWA's ``(τq_i)^t`` is ``τ^t·q_i^t``) so that each extra ``τ`` costs two products."""
        steps = np.asarray(steps, dtype=float)
        d = self.nu.size
        mu_pow = powers(self.nu, steps)  # (d, T)
        q_pow = None
        out = np.empty((len(curves), steps.size))
        for n, c in enumerate(curves):
            if c.norm_nu is None:
                value = c.const + c.coef @ mu_pow
            else:
                if q_pow is None:
                    q_pow = powers(self.g, steps)  # q_i = 1 − g_i
                tau_t = powers(np.array([c.norm_nu]), steps)[0]
                value = c.const + c.linear * steps + c.coef[:d] @ mu_pow + (c.coef[d:2 * d] @ q_pow) * tau_t
                if c.coef.size > 2 * d:
                    value = value + c.coef[2 * d] * tau_t * tau_t
                with np.errstate(divide="ignore", invalid="ignore"):
                    value = value / geometric_sum(c.norm_nu, steps) ** 2
            out[n] = np.where(steps == 0, c.initial, value)
        return out

    @classmethod
    def solve(cls, problem: Problem, batch_size: int, eta: float) -> Spectrum:
        """Raises :class:`ConfigError` where ``η`` is not below ``η_crit(B)``."""
        batch_size = check_batch_size(batch_size)
        margin = stability_margin(problem, batch_size, eta)
        if not eta > 0 or not margin > 0:
            raise ConfigError("eta", eta, f"must be positive and below the critical step size at B = {batch_size}")
        lam0 = problem.eigenvalues
        g0 = problem.effective_steps(eta)
        eps0 = g0 * (2.0 - g0 * (1.0 + 1.0 / batch_size))  # 1 − ρ_i, exact to rounding
        order = np.argsort(eps0, kind="stable")
        lam, g, e = lam0[order], g0[order], eps0[order]
        if np.any(np.diff(e) <= 1e-13 * e[1:]):
            raise ConfigError("eta", eta, "makes two modes contract at the same rate; move it slightly")
        w = g**2 / batch_size  # λ_i v_i
        roots = solve_secular(e, w)
        inv = roots.inv_diff  # (d, d) 1/(μ_k − ρ_i)
        p_inf = problem.sigma2 / margin
        a_inf = (w / lam) * p_inf / e  # v_i P_∞/(1 − ρ_i)
        a0 = problem.initial_error[order]
        zeta = (inv @ (lam * (a0 - a_inf))) / (np.square(inv, out=roots.diff) @ w)  # ℓ_kᵀ(A_0 − A_∞)/h_k
        return cls(problem=problem, batch_size=batch_size, eta=float(eta), lam=lam, g=g, nu=roots.nu,
                   inv_diff=inv, zeta=zeta, a_inf=a_inf, r_inf=p_inf - problem.sigma2,
                   initial=problem.initial_risk)

    # ------------------------------------------------------------------ the three iterates
    def last(self) -> RiskCurve:
        """The last iterate: ``R_t = R_∞ + Σ_k ζ_k μ_k^t``."""
        return RiskCurve(batch_size=self.batch_size, eta=self.eta, iterate="last", tau=None, const=self.r_inf,
                         linear=0.0, nu=self.nu, coef=self.zeta, norm_nu=None, initial=self.initial,
                         asymptote=self.r_inf)

    def ewa(self, tau: float) -> RiskCurve:
        """The bias-corrected EWA with decay ``τ`` (the lab's :class:`cbscore.train.averaging.WeightAverage`)."""
        tau = check_tau(tau)
        kappa = 1.0 - tau
        for _ in range(8):
            curve = self._averaged(kappa)
            if curve is not None:
                return curve
            kappa *= 1.0 + 1e-7  # a coinciding pair of rates (module doc)
        raise ConfigError("tau", tau, "makes two rates of the averaged recursion coincide")

    def uniform(self) -> RiskCurve:
        """The uniform average of ``w_1 … w_t``."""
        curve = self._averaged(0.0)
        if curve is None:
            raise ConfigError("eta", self.eta, "makes a mode's rate coincide with the uniform average's; move it slightly")
        return curve

    def curve(self, iterate: str, tau: float | None = None) -> RiskCurve:
        iterate = check_iterate(iterate)
        if iterate == "last":
            return self.last()
        if iterate == "uniform":
            return self.uniform()
        return self.ewa(tau)

    def _averaged(self, kappa: float) -> RiskCurve | None:
        """The averaged risk for ``τ = 1 − κ`` (``κ = 0``: the uniform average); ``None`` on a resonance."""
        lam, g, nu, zeta = self.lam, self.g, self.nu, self.zeta
        W = self._weights  # (d, d) λ_i a_k,i
        tau = 1.0 - kappa
        q = 1.0 - g
        nu_sq = kappa * (2.0 - kappa)  # 1 − τ²
        nu_theta = kappa + g * tau  # 1 − τq_i
        gap = g - kappa  # τ − q_i
        if (np.any(np.abs(gap) <= _RESONANCE * np.maximum(g, kappa))
                or _near(nu, nu_theta) or (kappa > 0 and _near(nu, np.array([nu_sq])))):
            return None
        alpha = (tau + q) / gap
        beta = -2.0 * q / gap
        mu = 1.0 - nu
        zm = zeta * mu  # ζ_k μ_k
        wa = W @ alpha  # Σ_i λ_i a_k,i α_i
        wbe = np.subtract(nu_theta[None, :], nu[:, None])  # (d, d) μ_k − τq_i, as ν_θi − ν_k
        np.divide(W, wbe, out=wbe)  # λ_i a_k,i/(μ_k − τq_i)
        stat = lam * self.a_inf  # λ_i A_∞,i
        coef_mu = zm * (wbe @ beta)
        coef_theta = -beta * (zm @ wbe) - stat * beta / nu_theta
        const = float(np.sum(stat * beta / nu_theta))
        if kappa > 0:
            coef_mu += zm * wa / (nu_sq - nu)
            coef_sq = -float(np.sum(stat * alpha)) / nu_sq - float(np.sum(zm * wa / (nu_sq - nu)))
            const += float(np.sum(stat * alpha)) / nu_sq
            linear = 0.0
            rates = np.concatenate([nu, nu_theta, [nu_sq]])
            coefs = np.concatenate([coef_mu, coef_theta, [coef_sq]])
        else:  # τ² = 1: its terms are constant, and the stationary part grows like t
            coef_mu += zm * wa / (-nu)
            const += float(np.sum(zm * wa / nu))
            linear = float(np.sum(stat * alpha))
            rates = np.concatenate([nu, nu_theta])
            coefs = np.concatenate([coef_mu, coef_theta])
        # Long-run risk: the stationary part over S_∞² (EWA) or → 0 like 1/t (uniform).
        asymptote = (const * kappa**2) if kappa > 0 else 0.0
        return RiskCurve(batch_size=self.batch_size, eta=self.eta, iterate="uniform" if kappa == 0 else "ewa",
                         tau=None if kappa == 0 else tau, const=const, linear=linear, nu=rates, coef=coefs,
                         norm_nu=kappa, initial=self.initial, asymptote=asymptote)
