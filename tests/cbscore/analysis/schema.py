"""A strict checker of the ``cbs fit --json`` object (keys exactly, types, nulls)."""

from __future__ import annotations

import math

SETTING_KEYS = [
    "setting", "n_params", "tokens", "batch_sizes", "steps", "steps_min", "estimators", "lr_best", "s_min",
    "b_noise", "cbs",
    "cbs_ci", "cbs_empirical", "r2", "lower_bounds", "skipped", "b_noise_ci", "cbs_empirical_ci",
    "without_ref", "target_redrawn", "lr_at_edge", "interval_dof", "n_seeds", "doublings", "knee", "knee_ci", "lack_of_fit",
]
DOUBLING_KEYS = ["batch_size", "batch_size_doubled", "place", "ratio", "ratio_ci", "above_two", "seeds"]
NOISE_KEYS = ["rate_sd", "rate_dof", "seed_cell_sd", "seed_cell_dof", "seed_common_sd", "seed_common_dof",
              "lr_curvature", "lr_curvatures", "n_settings"]
TREND_KEYS = ["doublings", "place", "slope", "slope_ci", "dof", "settings"]
WITHOUT_REF_KEYS = ["b_noise", "b_noise_ci", "cbs", "cbs_ci"]
LAW_KEYS = [
    "variable", "fixed", "settings", "coef", "coef_ci", "coefficient_paper_units",
    "coefficient_paper_units_ci", "units", "exponent", "exponent_ci", "r2",
]
JOINT_KEYS = [
    "settings", "coef", "coefficient_paper_units", "coefficient_paper_units_ci", "units",
    "exponent_n", "exponent_d", "exponent_n_ci", "exponent_d_ci", "r2",
]
#: Per list of ``scaling``: the law's variable and what its settings share.
LAW_GROUPS = {"n": ("n", "tokens"), "d": ("d", "n_params"), "chinchilla": ("n", "tokens_per_param")}


def _number(value, path, nullable=True):
    if value is None and nullable:
        return
    assert isinstance(value, (int, float)) and not isinstance(value, bool), f"{path}: {value!r}"
    assert math.isfinite(value), f"{path}: {value!r}"


def _pair(value, path):
    if value is None:
        return
    assert isinstance(value, list) and len(value) == 2, f"{path}: {value!r}"
    for i, v in enumerate(value):
        _number(v, f"{path}[{i}]")


def _trend(t, path):
    if t is None:
        return
    assert list(t) == TREND_KEYS, f"{path}: {list(t)}"
    assert t["place"] in ("below", "first", "beyond"), f"{path}.place"
    _number(t["slope"], f"{path}.slope", nullable=False)
    _pair(t["slope_ci"], f"{path}.slope_ci")
    assert isinstance(t["dof"], int) and t["dof"] >= 1, f"{path}.dof"


def check_fit_json(obj: dict) -> None:
    """Raise AssertionError naming the first path that breaks the schema."""
    assert list(obj) == ["settings", "scaling", "scaling_without_ref", "scaling_empirical", "scaling_knee", "noise",
                         "shape", "verdict", "errors"], list(obj)
    noise = obj["noise"]
    assert noise is None or list(noise) == NOISE_KEYS, f"noise: {noise}"
    for i, shape in enumerate(obj["shape"]):
        assert list(shape) == ["variable", "law", "settings", "trends", "beyond_first"], f"shape[{i}]"
        for j, t in enumerate(shape["trends"]):
            _trend(t, f"shape[{i}].trends[{j}]")
        _trend(shape["beyond_first"], f"shape[{i}].beyond_first")
    assert list(obj["verdict"]) == ["verdict", "sentence", "trend"], obj["verdict"]
    assert obj["verdict"]["verdict"] in ("supported", "not supported", "inconclusive"), obj["verdict"]
    assert isinstance(obj["settings"], list)
    for i, s in enumerate(obj["settings"]):
        path = f"settings[{i}]"
        assert list(s) == SETTING_KEYS, f"{path}: {list(s)}"
        assert isinstance(s["setting"], str)
        _number(s["n_params"], f"{path}.n_params")
        _number(s["tokens"], f"{path}.tokens")
        assert isinstance(s["batch_sizes"], list) and isinstance(s["steps"], list)
        assert len(s["batch_sizes"]) == len(s["steps"]) == len(s["steps_min"]) == len(s["estimators"])
        assert set(s["estimators"]) <= {"fit", "min"}
        for low in s["steps_min"]:
            _number(low, f"{path}.steps_min", nullable=False)
        for b in s["batch_sizes"]:
            assert isinstance(b, int) and b > 0, f"{path}.batch_sizes: {b!r}"
        for v in s["steps"]:
            _number(v, f"{path}.steps", nullable=False)
        for key in ("s_min", "b_noise", "cbs", "cbs_empirical", "r2"):
            _number(s[key], f"{path}.{key}")
        _pair(s["cbs_ci"], f"{path}.cbs_ci")
        assert isinstance(s["lower_bounds"], list), f"{path}.lower_bounds"
        for j, bound in enumerate(s["lower_bounds"]):
            assert list(bound) == ["batch_size", "steps_at_least"], f"{path}.lower_bounds[{j}]"
            assert isinstance(bound["batch_size"], int)
            _number(bound["steps_at_least"], f"{path}.lower_bounds[{j}].steps_at_least", nullable=False)
        assert isinstance(s["skipped"], list) and all(isinstance(b, int) for b in s["skipped"])
        _pair(s["b_noise_ci"], f"{path}.b_noise_ci")
        _pair(s["cbs_empirical_ci"], f"{path}.cbs_empirical_ci")
        assert list(s["without_ref"]) == WITHOUT_REF_KEYS, f"{path}.without_ref: {list(s['without_ref'])}"
        for key in ("b_noise", "cbs"):
            _number(s["without_ref"][key], f"{path}.without_ref.{key}")
        for key in ("b_noise_ci", "cbs_ci"):
            _pair(s["without_ref"][key], f"{path}.without_ref.{key}")
        assert isinstance(s["target_redrawn"], bool), f"{path}.target_redrawn"
        assert isinstance(s["lr_at_edge"], list) and all(isinstance(b, int) for b in s["lr_at_edge"])
        assert s["interval_dof"] is None or isinstance(s["interval_dof"], int), f"{path}.interval_dof"
        assert isinstance(s["n_seeds"], int), f"{path}.n_seeds"
        for j, d in enumerate(s["doublings"]):
            assert list(d) == DOUBLING_KEYS, f"{path}.doublings[{j}]: {list(d)}"
            _number(d["ratio"], f"{path}.doublings[{j}].ratio", nullable=False)
            _pair(d["ratio_ci"], f"{path}.doublings[{j}].ratio_ci")
            assert isinstance(d["above_two"], bool)
        lof = s["lack_of_fit"]
        assert lof is None or list(lof) == ["f", "dof", "p_value"], f"{path}.lack_of_fit"
    scaling = obj["scaling"]
    assert list(scaling) == ["n", "d", "chinchilla", "joint"], list(scaling)
    for key, (variable, fixed) in LAW_GROUPS.items():
        assert isinstance(scaling[key], list), f"scaling.{key}"
        for i, law in enumerate(scaling[key]):
            path = f"scaling.{key}[{i}]"
            assert list(law) == LAW_KEYS, f"{path}: {list(law)}"
            assert law["variable"] == variable, path
            assert list(law["fixed"]) == [fixed], f"{path}.fixed: {law['fixed']}"
            _number(law["fixed"][fixed], f"{path}.fixed.{fixed}")
            assert isinstance(law["settings"], list) and len(law["settings"]) >= 2, f"{path}.settings"
            unit = "N in millions" if variable == "n" else "D in billions"
            assert isinstance(law["units"], str) and unit in law["units"], f"{path}.units"
            for name in ("coef", "coefficient_paper_units", "exponent"):
                _number(law[name], f"{path}.{name}", nullable=False)
            _number(law["r2"], f"{path}.r2")
            for name in ("coef_ci", "coefficient_paper_units_ci", "exponent_ci"):
                _pair(law[name], f"{path}.{name}")
    joint = scaling["joint"]
    if joint is not None:
        assert list(joint) == JOINT_KEYS, list(joint)
        for key in ("coef", "coefficient_paper_units", "exponent_n", "exponent_d"):
            _number(joint[key], f"scaling.joint.{key}", nullable=False)
        _number(joint["r2"], "scaling.joint.r2")
        for key in ("coefficient_paper_units_ci", "exponent_n_ci", "exponent_d_ci"):
            _pair(joint[key], f"scaling.joint.{key}")
    assert isinstance(obj["errors"], list) and all(isinstance(e, str) for e in obj["errors"])
