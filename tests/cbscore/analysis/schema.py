"""A strict checker of the ``cbs fit --json`` object (keys exactly, types, nulls)."""

from __future__ import annotations

import math

SETTING_KEYS = [
    "setting", "n_params", "tokens", "batch_sizes", "steps", "s_min", "b_noise", "cbs",
    "cbs_ci", "cbs_empirical", "r2",
]
LAW_KEYS = ["coef", "exponent", "exponent_ci"]
JOINT_KEYS = ["coef", "exponent_n", "exponent_d", "exponent_n_ci", "exponent_d_ci"]


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


def check_fit_json(obj: dict) -> None:
    """Raise AssertionError naming the first path that breaks the schema."""
    assert list(obj) == ["settings", "scaling", "errors"], list(obj)
    assert isinstance(obj["settings"], list)
    for i, s in enumerate(obj["settings"]):
        path = f"settings[{i}]"
        assert list(s) == SETTING_KEYS, f"{path}: {list(s)}"
        assert isinstance(s["setting"], str)
        _number(s["n_params"], f"{path}.n_params")
        _number(s["tokens"], f"{path}.tokens")
        assert isinstance(s["batch_sizes"], list) and isinstance(s["steps"], list)
        assert len(s["batch_sizes"]) == len(s["steps"])
        for b in s["batch_sizes"]:
            assert isinstance(b, int) and b > 0, f"{path}.batch_sizes: {b!r}"
        for v in s["steps"]:
            _number(v, f"{path}.steps", nullable=False)
        for key in ("s_min", "b_noise", "cbs", "cbs_empirical", "r2"):
            _number(s[key], f"{path}.{key}")
        _pair(s["cbs_ci"], f"{path}.cbs_ci")
    scaling = obj["scaling"]
    assert list(scaling) == ["n", "d", "joint"], list(scaling)
    for key in ("n", "d"):
        law = scaling[key]
        if law is not None:
            assert list(law) == LAW_KEYS, f"scaling.{key}: {list(law)}"
            _number(law["coef"], f"scaling.{key}.coef", nullable=False)
            _number(law["exponent"], f"scaling.{key}.exponent", nullable=False)
            _pair(law["exponent_ci"], f"scaling.{key}.exponent_ci")
    joint = scaling["joint"]
    if joint is not None:
        assert list(joint) == JOINT_KEYS, list(joint)
        for key in ("coef", "exponent_n", "exponent_d"):
            _number(joint[key], f"scaling.joint.{key}", nullable=False)
        _pair(joint["exponent_n_ci"], "scaling.joint.exponent_n_ci")
        _pair(joint["exponent_d_ci"], "scaling.joint.exponent_d_ci")
    assert isinstance(obj["errors"], list) and all(isinstance(e, str) for e in obj["errors"])
