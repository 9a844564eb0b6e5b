"""The Launch form's fields of a ``local`` study (Merrill et al. 2025), read into the spec's
``local`` mapping and written back, and the Preview's table of its trials. Pure: no Streamlit.

The fields are :class:`cbscore.study.LocalSpec`'s; lists are typed as text (``1, 1.5, 2``) like the
rest of the form (:mod:`app.spec_form`, which holds their labels), and every error is a ConfigError
naming ``local.<field>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.kinds import has_local_cbs
from app.spec_form import build_spec, format_count, format_list, parse_counts, parse_floats
from cbscore.errors import ConfigError

#: What the rules of f(k) mean, as the form offers them.
LR_RULE_LABELS = {"sqrt": "√k (Adam; Malladi et al. 2022)", "linear": "k (SGD; Goyal et al. 2017)"}


def local_form_values(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The form's values of the ``local`` fields of a spec dict (a non-local spec: the defaults)."""
    from cbscore.study import LocalSpec

    local = LocalSpec.from_dict(spec.get("local") or {})
    return {
        "local.base_batch_size": local.base_batch_size,
        "local.base_lr": float(local.base_lr),
        "local.checkpoint_count": local.checkpoint_count,
        "local.checkpoint_tokens": ", ".join(format_count(t) for t in local.checkpoint_tokens),
        "local.multipliers": format_list(local.multipliers),
        "local.early_multipliers": format_list(local.early_multipliers),
        "local.early_checkpoints": local.early_checkpoints,
        "local.lr_rule": local.lr_rule,
        "local.window_fraction": float(local.window_fraction),
        "local.window_tokens": int(local.window_tokens or 0),
        "local.epsilon": float(local.epsilon),
    }


def build_local_spec(base: Mapping[str, Any], values: Mapping[str, Any]):
    """:func:`app.spec_form.build_spec` of a ``local`` study, its ``local`` mapping from the form
    (a local study has no target: the branches run their window, not to a loss)."""
    local = parse_local(base.get("local"), values)
    return build_spec({**base, "local": local}, {**values, "kind": "local", "target_rule": "reference"})


def parse_local(base: Mapping[str, Any] | None, values: Mapping[str, Any]) -> dict[str, Any]:
    """The spec's ``local`` mapping from the form's values (fields the form does not show, ``z``
    and ``smooth_fraction``, keep ``base``'s)."""
    window = int(values["local.window_tokens"])
    return {
        **(base or {}),
        "base_batch_size": int(values["local.base_batch_size"]),
        "base_lr": float(values["local.base_lr"]),
        "checkpoint_count": int(values["local.checkpoint_count"]),
        "checkpoint_tokens": parse_counts("local.checkpoint_tokens", values["local.checkpoint_tokens"]),
        "multipliers": parse_floats("local.multipliers", values["local.multipliers"]),
        "early_multipliers": parse_floats("local.early_multipliers", values["local.early_multipliers"]),
        "early_checkpoints": int(values["local.early_checkpoints"]),
        "lr_rule": values["local.lr_rule"],
        "window_fraction": float(values["local.window_fraction"]),
        "window_tokens": window or None,  # 0 = the share of each checkpoint's tokens
        "epsilon": float(values["local.epsilon"]),
    }


def local_rows(spec) -> list[dict[str, Any]]:
    """One row per trial of a local study, in the order the planner can start them."""
    from cbscore.study.local_plan import local_trials

    if not has_local_cbs(spec.kind):
        raise ConfigError("kind", spec.kind, "must be local for the branches' table")
    from cbscore.train.config import TrainConfig

    rows = []
    for ts in local_trials(spec, {s: "(snapshots)" for s in spec.seeds}):
        branch = ts.train_config.get("branch") or {}
        start = branch.get("branch_tokens") or 0
        # the warm-up's steps change with its batch: the trainer's own count
        steps = TrainConfig.from_dict(ts.train_config).total_steps if branch.get("batch_schedule") else \
            (ts.max_tokens - start) // (ts.batch_size * spec.context_tokens)
        rows.append({"trial": ts.trial_id, "role": ts.role, "from (tokens)": start, "to (tokens)": ts.max_tokens,
                     "k": ts.batch_size / spec.local.base_batch_size, "B (sequences)": ts.batch_size, "lr": ts.lr,
                     "steps": steps, "seed": ts.seed})
    return rows
