"""Scaling laws only where they are defined: per shared D, per shared N, per D/N ratio, joint."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cbscore.analysis import analyze_table, fit_scaling_laws, power_law

from .schema import check_fit_json
from .synthetic import table_rows

N1, N2 = 151e6, 604e6
D1, D2 = 3.072e9, 12.288e9


def _spec(name, n, d, b_noise):
    return {"setting": name, "n_params": n, "tokens": d, "s_min": 1500.0, "b_noise": b_noise}


def test_custom_study_gives_a_law_per_shared_variable_and_never_pools_across_the_other():
    # (N1, D1), (N1, D2), (N2, D1): the law in D comes from the two N1 settings, the law in N from
    # the two D1 settings; nothing is fitted across all three (their other variable differs).
    specs = [_spec("n1-d1", N1, D1, 1000.0), _spec("n1-d2", N1, D2, 2000.0), _spec("n2-d1", N2, D1, 1100.0)]
    analysis = analyze_table(table_rows(specs), bootstrap=200, seed=1)
    laws = analysis.scaling
    cbs = {s.setting: s.cbs for s in analysis.settings}
    (d_law,) = laws.d_laws
    assert d_law.settings == ("n1-d1", "n1-d2") and d_law.fixed_value == pytest.approx(N1)
    assert d_law.exponent == pytest.approx(np.log(cbs["n1-d2"] / cbs["n1-d1"]) / np.log(D2 / D1))
    (n_law,) = laws.n_laws
    assert n_law.settings == ("n1-d1", "n2-d1") and n_law.fixed_value == pytest.approx(D1)
    assert n_law.exponent == pytest.approx(np.log(cbs["n2-d1"] / cbs["n1-d1"]) / np.log(N2 / N1))
    assert laws.chinchilla == () and laws.joint is None
    assert all(len(law.settings) == 2 for law in laws.laws)  # no law pools all three
    # Two settings per law: a law, and a sentence instead of an interval.
    assert d_law.exponent_ci is None and n_law.exponent_ci is None
    assert ("scaling law in tokens at fixed n_params = 1.51e+08: no interval from 2 settings (an interval "
            "needs at least 3, so that their scatter around the law can be measured)") in analysis.errors
    obj = analysis.to_json_dict()
    check_fit_json(obj)
    assert obj["scaling"]["d"][0]["fixed"] == {"n_params": 151_000_000}
    assert obj["scaling"]["n"][0]["fixed"] == {"tokens": 3_072_000_000}
    assert obj["scaling"]["d"][0]["settings"] == ["n1-d1", "n1-d2"]
    assert obj["scaling"]["chinchilla"] == [] and obj["scaling"]["joint"] is None
    # Forecasts come only from a law that holds the other variable where asked.
    assert laws.forecast(n_params=N1, tokens=6e9).law == "d"
    assert laws.forecast(n_params=3e8, tokens=D1).law == "n"
    with pytest.raises(Exception, match="no scaling law"):
        laws.forecast(n_params=3e8, tokens=6e9)
    # Deterministic: the same seed gives the same object.
    again = analyze_table(table_rows(specs), bootstrap=200, seed=1).to_json_dict()
    assert json.dumps(again, sort_keys=True) == json.dumps(obj, sort_keys=True)


def test_one_law_per_group_with_intervals_from_three_settings():
    # Two fixed-N studies (3 D each) and the paper's fixed-D shape (3 N at one D).
    n = [N1, N1, N1, N2, N2, N2, 85e6, 302e6]
    d = [D1, 6.144e9, D2, D1, 6.144e9, D2, D1, D1]
    cbs = list(300.0 * (np.array(d) / D1) ** 0.47 * (np.array(n) / N1) ** 0.087)
    rng = np.random.default_rng(0)
    samples = [c * np.exp(0.05 * rng.standard_normal(200)) for c in cbs]
    names = [f"s{i}" for i in range(len(n))]
    laws = fit_scaling_laws(names, n, d, cbs, samples, n_draws=200, seed=0)
    assert [law.fixed_value for law in laws.d_laws] == pytest.approx([N1, N2])
    assert [law.settings for law in laws.d_laws] == [("s0", "s1", "s2"), ("s3", "s4", "s5")]
    for law in laws.d_laws:
        assert law.exponent == pytest.approx(0.47) and law.exponent_ci[0] < 0.47 < law.exponent_ci[1]
    # A law in N at each D: at D1 over s0, s3, s6, s7; at 6.144e9 and D2 over the two N of each.
    assert [law.settings for law in laws.n_laws] == [("s0", "s3", "s6", "s7"), ("s1", "s4"), ("s2", "s5")]
    assert all(law.exponent == pytest.approx(0.087) for law in laws.n_laws)
    assert laws.n_laws[0].exponent_ci[0] < 0.087 < laws.n_laws[0].exponent_ci[1]
    assert laws.joint is not None
    assert (laws.joint.exponent_n, laws.joint.exponent_d) == pytest.approx((0.087, 0.47))
    assert laws.joint.exponent_d_ci[0] < 0.47 < laws.joint.exponent_d_ci[1]


def test_chinchilla_law_needs_a_shared_tokens_per_parameter_ratio():
    # Three settings at ~20 tokens per parameter and two at ~80: one law per ratio; the five
    # together are not one "N and D together" law.
    n = np.array([85e6, 151e6, 302e6, 151e6, 604e6])
    d = n * np.array([20.5, 20.3, 20.3, 80.0, 80.0])
    cbs = list(power_law(n, 2.0, 0.47) * np.array([1, 1, 1, 1.5, 1.5]))
    laws = fit_scaling_laws(list("abcde"), list(n), list(d), cbs)
    assert [law.settings for law in laws.chinchilla] == [("a", "b", "c"), ("d", "e")]
    assert [law.fixed_value for law in laws.chinchilla] == pytest.approx([20.37, 80.0], rel=1e-3)
    assert laws.chinchilla[0].exponent == pytest.approx(0.47)
    assert laws.n is laws.chinchilla[0]  # the headline law in N: the most settings
    assert laws.forecast(n_params=1.2e9).cbs == pytest.approx(2.0 * 1.2e9**0.47)
    # N and D do vary independently across the five: a joint law, which forecasts (N, D).
    assert laws.joint is not None and laws.forecast(n_params=1.2e9, tokens=80 * 1.2e9).law == "joint"
