"""MFU against the bf16 peak table, and the CPU allocator setting that keeps steps fault-free."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

import pytest
import torch

from cbscore.errors import ConfigError
from cbscore.train.allocator import keep_freed_memory
from cbscore.train.throughput import (
    PEAK_BF16_FLOPS,
    PEAK_FLOPS_ENV,
    mfu,
    normalise_device_name,
    peak_flops,
    peak_flops_for_name,
    peak_memory_bytes,
)


@pytest.fixture(autouse=True)
def _no_override(monkeypatch):
    monkeypatch.delenv(PEAK_FLOPS_ENV, raising=False)


def test_mfu_is_achieved_flops_over_the_bf16_peak():
    # 85M at T = 512 and V = 50,277: 797,907,456 FLOPs per token; 500k tokens/s on an H100 SXM
    assert mfu(500_000, 797_907_456, peak_flops_for_name("NVIDIA H100 80GB HBM3")) == pytest.approx(
        500_000 * 797_907_456 / 989e12)
    assert mfu(500_000, 797_907_456, 989e12) == pytest.approx(0.40339, rel=1e-4)


@pytest.mark.parametrize(("name", "peak"), [
    ("NVIDIA A100-SXM4-40GB", 312e12),
    ("NVIDIA A100-SXM4-80GB", 312e12),
    ("NVIDIA A100-PCIE-40GB", 312e12),
    ("NVIDIA A100 80GB PCIe", 312e12),
    ("NVIDIA H100 80GB HBM3", 989e12),
    ("NVIDIA H100 PCIe", 756e12),
    ("NVIDIA H100 NVL", 835e12),
    ("NVIDIA H200", 989e12),
    ("NVIDIA H200 NVL", 835e12),
    ("NVIDIA L40S", 362e12),
    ("NVIDIA L4", 121e12),
    ("NVIDIA A10G", 70e12),
])
def test_peak_is_the_dense_bf16_figure_of_the_exact_device(name, peak):
    assert peak_flops_for_name(name) == peak


def test_an_h100_pcie_does_not_get_the_sxm_peak():
    assert peak_flops_for_name("NVIDIA H100 PCIe") == 756e12 != PEAK_BF16_FLOPS["NVIDIA H100 80GB HBM3"]
    assert peak_flops_for_name("NVIDIA L4") != peak_flops_for_name("NVIDIA L40S")


def test_names_match_up_to_case_hyphens_and_spaces_only():
    assert normalise_device_name("NVIDIA A100-SXM4-80GB") == "A100 SXM4 80GB"
    assert peak_flops_for_name("  nvidia a100 sxm4 80gb ") == 312e12
    assert peak_flops_for_name("NVIDIA_H100__PCIe") == 756e12


@pytest.mark.parametrize("name", ["NVIDIA H100", "NVIDIA H100 80GB HBM3 (MIG 1g.10gb)", "NVIDIA GeForce RTX 4090", "H20"])
def test_unknown_device_has_no_peak_and_warns_naming_it_and_the_variable(name):
    with pytest.warns(UserWarning) as record:
        assert peak_flops_for_name(name) is None
    message = str(record[0].message)
    assert repr(name) in message and PEAK_FLOPS_ENV in message


def test_the_environment_override_wins_over_the_table_and_the_cpu(monkeypatch):
    monkeypatch.setenv(PEAK_FLOPS_ENV, "400e12")
    assert peak_flops_for_name("NVIDIA H100 80GB HBM3") == 400e12
    assert peak_flops_for_name("NVIDIA GeForce RTX 4090") == 400e12  # no warning: the peak is known
    assert peak_flops(torch.device("cpu")) == 400e12
    monkeypatch.setenv(PEAK_FLOPS_ENV, "  ")
    assert peak_flops(torch.device("cpu")) is None


@pytest.mark.parametrize("raw", ["fast", "0", "-1e12", "nan", "inf"])
def test_a_bad_override_is_a_config_error_naming_the_variable_and_value(monkeypatch, raw):
    monkeypatch.setenv(PEAK_FLOPS_ENV, raw)
    with pytest.raises(ConfigError) as info:
        peak_flops_for_name("NVIDIA H200")
    assert str(info.value).startswith(f"{PEAK_FLOPS_ENV}: ") and str(info.value).endswith(f"but got {raw!r}.")


def test_cpu_has_no_peak_and_no_mfu():
    assert peak_flops(torch.device("cpu")) is None
    assert mfu(10_000, 1e6, None) is None
    assert peak_memory_bytes(torch.device("cpu")) > 10 * 2**20  # the peak RSS of this process


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_this_gpu_is_in_the_peak_table():
    name = torch.cuda.get_device_name(0)
    assert peak_flops(torch.device("cuda", 0)) is not None, f"add {name!r} to PEAK_BF16_FLOPS"


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def _mallinfo() -> _Mallinfo2:
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.mallinfo2.restype = _Mallinfo2
    return libc.mallinfo2()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc only")
def test_kept_memory_serves_a_large_buffer_from_the_heap_and_keeps_it_after_free():
    assert keep_freed_memory()
    mmapped_before = _mallinfo().hblkhd
    x = torch.empty(16 * 2**20)  # 64 MiB: above glibc's largest mmap threshold (32 MiB)
    x.fill_(1.0)
    during = _mallinfo()
    del x
    after = _mallinfo()
    # not a fresh mmap (which munmap would hand back to the OS on free, to be faulted in again)...
    assert during.hblkhd == mmapped_before
    # ...but heap memory that stays with the process, free for the next step's buffer
    assert after.fordblks >= 64 * 2**20
    assert after.arena >= 64 * 2**20


def test_the_first_step_compilation_is_off_the_logged_and_final_throughput(builtin_slice_config):
    """A first step that takes 0.5 s (as compilation does) leaves tokens/s where the other steps put it:
    in the first logged interval too (it used to count the compile time there)."""
    import time

    from cbscore.train.trainer import train
    from tests.cbscore.test_train import Recorder, tiny

    class SlowFirstStep(Recorder):
        def pre_train(self, state):
            super().pre_train(state)
            calls = []

            def hook(module, args):
                if torch.is_grad_enabled() and not calls:
                    calls.append(1)
                    time.sleep(0.5)

            state.model.register_forward_pre_hook(hook)

    recorder = SlowFirstStep()
    result = train(tiny(builtin_slice_config, log_every_steps=3, max_tokens=8 * 32 * 12), callbacks=[recorder])
    rates = [m["tokens_per_s"] for m in recorder.metrics]
    # 256 tokens a step, the first log at step 1 or 3 (before an evaluation, or the interval): with
    # the 0.5 s inside, the first interval would be below 3·256 / 0.5 = 1,536 tokens/s
    assert len(rates) >= 4 and rates[0] > 0.2 * min(rates[1:]) and rates[0] > 3_000
    assert result.tokens_per_s > 3_000
