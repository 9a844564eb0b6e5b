"""TrainConfig: paper defaults, derived values, checks naming field and value, JSON round trip."""

from __future__ import annotations

import json

import pytest

from cbscore.data import DataConfig
from cbscore.errors import ConfigError
from cbscore.train.config import TrainConfig

BASE = dict(model="tiny-0.1M", batch_size=8, context_tokens=32, max_tokens=100_000, lr=1e-2)


def test_defaults_are_the_papers_recipe():
    c = TrainConfig(**BASE)
    assert (c.beta1, c.eps, c.weight_decay, c.grad_clip, c.schedule) == (0.95, 1e-8, 0.0, 1.0, "constant")
    # β2 and τ of a lone trial: the `fixed` rule with the run as its own reference (cbscore.recipe):
    # 390 steps, middle τ half-life 5.913% of them = 23.07 steps; β2 = 0.95^(1/8) (horizon floor).
    assert c.resolved_beta2() == 0.993609 and c.resolved_ewa_taus() == (0.94166, 0.970392, 0.985085)
    # at the paper's scale (T = 512, D = 3.072B) a reference run gets the table's τ back
    paper = TrainConfig(**{**BASE, "batch_size": 256, "context_tokens": 512, "max_tokens": 3_072_000_000})
    assert paper.resolved_beta2() == 0.995 and paper.resolved_ewa_taus()[1] == 0.9995
    assert TrainConfig(**{**BASE, "beta2": 0.9, "ewa_taus": [0.9, 0.99]}).resolved_ewa_taus() == (0.9, 0.99)


def test_budget_in_steps_rounds_down_and_respects_max_steps():
    c = TrainConfig(**BASE)  # 100000 // (8·32 = 256) = 390 steps
    assert c.batch_tokens == 256 and c.total_steps == 390
    assert TrainConfig(**{**BASE, "max_steps": 50}).total_steps == 50
    assert c.resolved_warmup_tokens() == 25_000  # 25% of max_tokens by default


def test_round_trip_through_json():
    c = TrainConfig(**BASE, ewa_taus=(0.9, 0.999), target_loss=4.5, micro_batch_size=4, schedule="wsd",
                    data=DataConfig(vocab_size=1024, max_documents=50), checkpoint_dir="/tmp/x", max_steps=7)
    wire = json.loads(json.dumps(c.to_dict()))
    assert TrainConfig.from_dict(wire) == c
    assert wire["data"]["vocab_size"] == 1024 and wire["ewa_taus"] == [0.9, 0.999]


@pytest.mark.parametrize(
    ("change", "field", "value"),
    [
        ({"batch_size": 0}, "batch_size", "0"),
        ({"batch_size": 8.0}, "batch_size", "8.0"),
        ({"batch_size": True}, "batch_size", "True"),
        ({"micro_batch_size": 3}, "micro_batch_size", "3"),
        ({"model": "gpt-9"}, "model", "'gpt-9'"),
        ({"lr": -1.0}, "lr", "-1.0"),
        ({"lr": float("nan")}, "lr", "nan"),
        ({"target_loss": float("inf")}, "target_loss", "inf"),
        ({"max_tokens": 100}, "max_tokens", "100"),
        ({"beta2": 1.0}, "beta2", "1.0"),
        ({"ewa_taus": (0.9, 1.5)}, "ewa_taus", "1.5"),
        ({"ewa_taus": ()}, "ewa_taus", "()"),
        ({"schedule": "linear"}, "schedule", "'linear'"),
        ({"device": "tpu"}, "device", "'tpu'"),
        ({"divergence_factor": 1.0}, "divergence_factor", "1.0"),
        ({"grad_clip": -1}, "grad_clip", "-1"),
        ({"checkpoint_every_steps": 10}, "checkpoint_every_steps", "10"),
        ({"warmup_tokens": -5}, "warmup_tokens", "-5"),
    ],
)
def test_bad_values_are_rejected_naming_field_and_value(change, field, value):
    with pytest.raises(ConfigError) as err:
        TrainConfig(**{**BASE, **change})
    assert err.value.field == field
    message = str(err.value)
    assert message.startswith(f"{field}: ") and message.endswith(f"but got {value}.")


def test_micro_batch_that_divides_is_accepted_and_one_that_does_not_is_never_rounded():
    assert TrainConfig(**BASE, micro_batch_size=2).micro_batch_size == 2
    with pytest.raises(ConfigError, match=r"micro_batch_size: must divide batch_size=8, but got 3\."):
        TrainConfig(**BASE, micro_batch_size=3)


def test_from_dict_rejects_unknown_and_missing_fields():
    with pytest.raises(ConfigError, match=r"^learning_rate: is not a TrainConfig field"):
        TrainConfig.from_dict({**BASE, "learning_rate": 1.0})
    with pytest.raises(ConfigError, match=r"^lr: is required"):
        TrainConfig.from_dict({k: v for k, v in BASE.items() if k != "lr"})
