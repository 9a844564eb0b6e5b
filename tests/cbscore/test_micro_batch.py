"""The micro-batch: chosen from free memory, halved on an out-of-memory error (same update)."""

from __future__ import annotations

import pytest
import torch

from cbscore.callbacks import Callback
from cbscore.errors import ConfigError
from cbscore.micro_batch import (activation_bytes_per_sequence, choose_micro_batch, smaller_micro_batch,
                                 static_bytes)
from cbscore.model_config import get_preset, padded_vocab_size
from cbscore.train import train
from cbscore.train_config import TrainConfig


def test_activation_bytes_of_the_151m_preset_match_the_hand_count():
    cfg = get_preset("151M").config(vocab_size=8192)
    # 12 layers × 42·T·C (Korthikanti et al. eq. 1 with flash attention, + QK-norm and rotary) + 10·T·V
    assert activation_bytes_per_sequence(cfg) == 12 * 42 * 512 * 1024 + 10 * 512 * 8192 == 306_184_192
    assert static_bytes(1_000, n_taus=3) == 32_000


def test_an_h200_holds_256_sequences_of_the_151m_preset():
    per_seq = activation_bytes_per_sequence(get_preset("151M").config(vocab_size=8192))
    # ~139 GB free less ~2 GB of gradients and moments still to come: 0.8·137e9 / 0.306e9 = 358 → 256
    assert choose_micro_batch(1024, 137e9, per_seq) == 256
    assert choose_micro_batch(96, 137e9, per_seq) == 96  # the whole per-device batch fits
    assert choose_micro_batch(384, 137e9, per_seq) == 192  # the largest divisor that fits, not a power of 2
    assert choose_micro_batch(64, 0.0, per_seq) == 1  # nothing fits: 1, and the OOM handler says so


def test_out_of_memory_halves_to_the_largest_divisor_at_most_half():
    assert smaller_micro_batch(64, 64) == 32
    assert smaller_micro_batch(24, 24) == 12
    assert smaller_micro_batch(24, 12) == 6
    assert smaller_micro_batch(12, 3) == 1
    assert smaller_micro_batch(12, 1) is None
    with pytest.raises(ConfigError, match="local_batch"):
        choose_micro_batch(0, 1e9, 1e6)


def test_a_hub_vocabulary_is_padded_to_a_multiple_of_128():
    assert padded_vocab_size(50_277) == 50_304  # GPT-NeoX's tokenizer, the paper's
    assert padded_vocab_size(8192) == 8192 and padded_vocab_size(1024) == 1024
    assert padded_vocab_size(1) == 128
    with pytest.raises(ConfigError, match=r"^vocab_size: must be a positive integer, but got 0\.$"):
        padded_vocab_size(0)


class DeviceHolds(Callback):
    """A fault hook: the model raises CUDA's out-of-memory error on a training pass of more than
    ``sequences`` sequences, as a device of that size would (evaluation keeps no activations
    for backward and passes)."""

    def __init__(self, sequences: int):
        self.sequences = sequences
        self.refused: list[int] = []

    def pre_train(self, state):
        def hook(module, args):
            if torch.is_grad_enabled() and args[0].shape[0] > self.sequences:
                self.refused.append(args[0].shape[0])
                raise torch.OutOfMemoryError(f"CUDA out of memory (a pass of {args[0].shape[0]} sequences)")

        state.model.register_forward_pre_hook(hook)


def tiny(data, **changes) -> TrainConfig:
    base = dict(model="tiny-0.1M", batch_size=8, context_tokens=32, max_tokens=8 * 32 * 12, lr=1e-2,
                warmup_tokens=8 * 32 * 3, ewa_taus=(0.9,), eval_windows=8, log_every_steps=1,
                data=data, device="cpu", threads=1)
    return TrainConfig(**{**base, **changes})


def test_out_of_memory_halves_the_micro_batch_and_redoes_the_step_exactly(builtin_slice_config, capsys):
    device = DeviceHolds(2)
    halved = train(tiny(builtin_slice_config), callbacks=[device])
    assert device.refused == [8, 4]  # the whole batch, then 4, then 2 fit; once, not every step
    assert halved.micro_batch_size == 2 and halved.status == "finished" and halved.steps == 12
    assert "out of memory at a micro-batch of 8; redoing the step at 4" in capsys.readouterr().err
    # the same passes as a trial given micro-batch 2 from the start: bit for bit
    given = train(tiny(builtin_slice_config, micro_batch_size=2))
    assert [v for _, v in halved.train_log] == [v for _, v in given.train_log]
    # and the full-batch update up to float reassociation of the gradient sum
    whole = train(tiny(builtin_slice_config))
    torch.testing.assert_close([v for _, v in halved.train_log], [v for _, v in whole.train_log], rtol=1e-5, atol=1e-5)


def test_out_of_memory_at_one_sequence_is_raised_with_what_to_do(builtin_slice_config):
    with pytest.raises(torch.OutOfMemoryError, match=r"micro-batch of 1 sequence \(8 per device\): use more devices"):
        train(tiny(builtin_slice_config), callbacks=[DeviceHolds(0)])


def test_compile_defaults_to_cuda_only():
    config = TrainConfig(model="tiny-0.1M", batch_size=8, max_tokens=10**6, lr=1e-3)
    assert config.compile is None
    assert config.resolved_compile("cuda") is True and config.resolved_compile("cpu") is False
    assert config.replace(compile=False).resolved_compile("cuda") is False
    assert TrainConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ConfigError, match=r"^compile: must be true, false or null"):
        config.replace(compile="yes")
