"""cbscore.theory: the closed form against the step-by-step recursion, the secular roots, η_crit, inputs."""

from __future__ import annotations

import numpy as np
import pytest

from cbscore.errors import ConfigError
from cbscore.theory import (
    Problem,
    Spectrum,
    critical_step_size,
    direct_risk,
    stability_margin,
    step_grid,
    theory_exponents,
)
from cbscore.theory.secular import solve_secular

CASES = [  # (a, b, d, p, B, η/η_crit, τ)
    (1.5, 2.5, 50, 0.0, 4, 0.5, 0.9),
    (2.0, 1.5, 30, 0.3, 1, 0.9, 0.99),
    (1.2, 3.0, 64, 0.0, 64, 0.95, 0.5),
    (1.5, 2.5, 50, 0.0, 2, 0.1, 0.999),
]


@pytest.mark.parametrize("a, b, d, p, batch, frac, tau", CASES)
def test_closed_form_equals_the_step_by_step_recursion_for_every_iterate(a, b, d, p, batch, frac, tau):
    problem = Problem(a=a, b=b, sigma2=1.0, d=d, p=p)
    eta = frac * critical_step_size(problem, batch)
    steps = np.arange(1501)
    last, ewa = direct_risk(problem, batch, eta, 1500, tau=tau)
    _, uniform = direct_risk(problem, batch, eta, 1500, uniform=True)
    spec = Spectrum.solve(problem, batch, eta)
    assert spec.last()(steps) == pytest.approx(last, rel=1e-10)
    assert spec.ewa(tau)(steps) == pytest.approx(ewa, rel=1e-7)
    assert spec.uniform()(steps) == pytest.approx(uniform, rel=1e-9)
    # The shared-table evaluation is the same numbers.
    table = spec.evaluate([spec.last(), spec.ewa(tau), spec.uniform()], steps.astype(float))
    assert table == pytest.approx(np.stack([last, ewa, uniform]), rel=1e-7)


def test_risk_starts_at_the_initial_risk_and_tends_to_the_fixed_point():
    problem = Problem(a=1.5, b=2.5, sigma2=0.5, d=40)
    spec = Spectrum.solve(problem, 8, 0.5 * critical_step_size(problem, 8))
    assert float(spec.last()(0)) == pytest.approx(np.sum(np.arange(1, 41) ** -2.5), rel=1e-12)
    last, ewa = direct_risk(problem, 8, spec.eta, 20_000, tau=0.99)
    assert float(spec.last()(10**7)) == pytest.approx(spec.r_inf, rel=1e-9)
    assert spec.r_inf == pytest.approx(last[-1], rel=1e-9)
    assert spec.ewa(0.99).asymptote == pytest.approx(ewa[-1], rel=1e-6)


def test_secular_roots_are_the_eigenvalues_of_the_rank_one_update():
    rng = np.random.default_rng(3)
    e = np.sort(np.concatenate([rng.uniform(1e-6, 1e-3, 60), 0.3 + 1e-9 * np.arange(5), rng.uniform(0.1, 1.0, 35)]))
    w = rng.uniform(1e-9, 1e-3, e.size)
    roots = solve_secular(e, w)
    terms = w / roots.diff
    assert np.all(np.abs(terms.sum(axis=1) - 1.0) <= 1e-13 * np.abs(terms).sum(axis=1))
    s = np.sqrt(w)
    nu_eig = np.sort(1.0 - np.linalg.eigvalsh(np.diag(1.0 - e) + np.outer(s, s)))
    assert roots.nu == pytest.approx(nu_eig, rel=1e-6, abs=1e-15)
    assert np.all(roots.nu[1:] > e[:-1]) and np.all(roots.nu[1:] < e[1:]) and roots.nu[0] < e[0]


@pytest.mark.parametrize("batch, p", [(1, 0.0), (8, 0.0), (64, 0.5)])
def test_critical_step_size_is_where_the_second_moments_stop_converging(batch, p):
    problem = Problem(a=1.5, b=2.5, d=30, p=p)
    eta_c = critical_step_size(problem, batch)

    def spectral_radius(eta):
        g = problem.effective_steps(eta)
        rho = (1 - g) ** 2 + g**2 / batch
        v = g**2 / (batch * problem.eigenvalues)
        return np.abs(np.linalg.eigvals(np.diag(rho) + np.outer(v, problem.eigenvalues))).max()

    assert spectral_radius(0.999 * eta_c) < 1.0 < spectral_radius(1.001 * eta_c)
    assert stability_margin(problem, batch, 0.999 * eta_c) > 0 > stability_margin(problem, batch, 1.001 * eta_c)
    with pytest.raises(ConfigError, match="eta"):
        Spectrum.solve(problem, batch, 1.001 * eta_c)


@pytest.mark.parametrize("field, value", [("a", 1.0), ("b", 0.5), ("sigma2", -1.0), ("d", 0), ("d", 2.5),
                                          ("p", 1.0), ("a", float("nan")), ("b", "2")])
def test_a_bad_problem_names_the_field_and_the_value(field, value):
    with pytest.raises(ConfigError) as info:
        Problem(**{field: value})
    assert info.value.field == field
    assert repr(value) in str(info.value)


def test_problem_round_trips_through_its_wire_format():
    problem = Problem(a=1.7, b=2.1, sigma2=0.3, d=100, p=0.25)
    assert Problem.from_dict(problem.to_dict()) == problem
    with pytest.raises(ConfigError, match="not a Problem field"):
        Problem.from_dict({"alpha": 1})


def test_step_grid_is_geometric_without_repeats():
    steps = step_grid(3_000_000, 1.05)
    assert steps[0] == 0 and steps[1] == 1 and steps[-1] == 3_000_000
    assert np.all(np.diff(steps) >= 1)
    big = steps[steps >= 1000]
    assert np.max(big[1:-1] / big[:-2]) < 1.051


def test_theory_exponents_are_the_quoted_and_derived_formulas():
    assert theory_exponents(1.5, 2.5) == pytest.approx({"averaged": 0.4, "last": 0.5})
    assert theory_exponents(1.5, 5.0)["averaged"] == pytest.approx(1 - 1.5 / 4.0)  # min{b, 2a+1} = 2a+1
