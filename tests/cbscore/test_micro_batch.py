"""The micro-batch: chosen from free memory, halved on an out-of-memory error (same update)."""

from __future__ import annotations

import pytest
import torch

from cbscore.errors import ConfigError
from cbscore.model.config import get_preset, padded_vocab_size
from cbscore.train.callbacks import Callback
from cbscore.train.config import TrainConfig
from cbscore.train.micro_batch import (
    activation_bytes_per_sequence,
    choose_micro_batch,
    is_out_of_memory,
    smaller_micro_batch,
    split_for_gns,
    static_bytes,
)
from cbscore.train.trainer import train


def test_activation_bytes_of_the_151m_preset_match_the_hand_count():
    cfg = get_preset("151M").config(vocab_size=8192)
    # 12 layers × 50·T·C (Korthikanti et al. eq. 1 with flash attention 34, + QK-norm and rotary 8,
    # + the fp32 residual stream and QK-norm inputs under bf16 autocast 8) + 10·T·V
    assert activation_bytes_per_sequence(cfg) == 12 * 50 * 512 * 1024 + 10 * 512 * 8192 == 356_515_840
    # the fp32 share is 19% of the blocks' 16-bit count
    assert 50 / 42 == pytest.approx(1.19, abs=0.005)
    assert static_bytes(1_000, n_taus=3) == 32_000


def test_an_h200_holds_256_sequences_of_the_151m_preset():
    per_seq = activation_bytes_per_sequence(get_preset("151M").config(vocab_size=8192))
    # ~139 GB free less ~2 GB of gradients and moments still to come: 0.8·137e9 / 0.357e9 = 307 → 256
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


def test_errors_that_are_an_allocation_failing_count_as_out_of_memory():
    assert is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_out_of_memory(RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"))
    assert is_out_of_memory(RuntimeError("CUDA error: out of memory"))
    try:  # torch.compile wraps what the kernel raised
        try:
            raise RuntimeError("CUBLAS_STATUS_ALLOC_FAILED")
        except RuntimeError as inner:
            raise RuntimeError("backend compiler failed") from inner
    except RuntimeError as wrapped:
        assert is_out_of_memory(wrapped)
    assert not is_out_of_memory(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert not is_out_of_memory(ValueError("out of memory"))


def test_a_one_pass_batch_is_split_in_two_to_measure_the_noise_scale():
    assert split_for_gns(64, 64) == 32 and split_for_gns(24, 24) == 12 and split_for_gns(6, 6) == 3
    assert split_for_gns(256, 128) == 128  # already two passes
    assert split_for_gns(1, 1) == 1  # nothing to split


class CublasFails(DeviceHolds):
    """Out of memory as cuBLAS reports it near the ceiling: a plain RuntimeError."""

    def pre_train(self, state):
        def hook(module, args):
            if torch.is_grad_enabled() and args[0].shape[0] > self.sequences:
                self.refused.append(args[0].shape[0])
                raise RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")

        state.model.register_forward_pre_hook(hook)


def test_out_of_memory_raised_as_a_runtime_error_halves_the_micro_batch_too(builtin_slice_config):
    device = CublasFails(2)
    halved = train(tiny(builtin_slice_config), callbacks=[device])
    assert device.refused == [8, 4] and halved.micro_batch_size == 2 and halved.steps == 12
    given = train(tiny(builtin_slice_config, micro_batch_size=2))
    assert [v for _, v in halved.train_log] == [v for _, v in given.train_log]


def test_another_runtime_error_is_raised_not_halved(builtin_slice_config):
    class Broken(Callback):
        def pre_train(self, state):
            def hook(module, args):
                raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (8x64 and 32x64)")

            state.model.register_forward_pre_hook(hook)

    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        train(tiny(builtin_slice_config, eval_windows=8), callbacks=[Broken()])


class DeviceHoldsEverywhere(DeviceHolds):
    """A device that holds ``sequences`` in a training pass and in an evaluation chunk alike."""

    def pre_train(self, state):
        def hook(module, args):
            if args[0].shape[0] > self.sequences:
                self.refused.append((torch.is_grad_enabled(), args[0].shape[0]))
                raise torch.OutOfMemoryError(f"CUDA out of memory (a pass of {args[0].shape[0]} sequences)")

        state.model.register_forward_pre_hook(hook)


def test_out_of_memory_in_an_evaluation_halves_its_chunk_and_training_caps_it(builtin_slice_config, capsys):
    device = DeviceHoldsEverywhere(2)
    result = train(tiny(builtin_slice_config), callbacks=[device])
    err = capsys.readouterr().err
    # the first evaluation (step 0) fails at chunks of 8 and 4; training at 8 and 4; never again after
    assert device.refused == [(False, 8), (False, 4), (True, 8), (True, 4)]
    assert err.count("out of memory evaluating chunks of") == 2 and "evaluating again in chunks of 2" in err
    # the evaluations are the same numbers as on a device that holds everything
    whole = train(tiny(builtin_slice_config, micro_batch_size=2))
    assert [e.step for e in result.eval_history] == [e.step for e in whole.eval_history]
    torch.testing.assert_close([e.loss for e in result.eval_history], [e.loss for e in whole.eval_history],
                               rtol=1e-6, atol=1e-6)
