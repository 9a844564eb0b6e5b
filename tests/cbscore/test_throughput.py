"""MFU against the bf16 peak table, and the CPU allocator setting that keeps steps fault-free."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

import pytest
import torch

from cbscore.allocator import keep_freed_memory
from cbscore.throughput import PEAK_BF16_FLOPS, mfu, peak_flops, peak_memory_bytes


def test_mfu_is_achieved_flops_over_the_bf16_peak():
    # 85M at T = 512: 566,231,040 FLOPs per token; 500k tokens/s on an H100 (989e12)
    assert mfu(500_000, 566_231_040, PEAK_BF16_FLOPS["H100"]) == pytest.approx(0.28627, rel=1e-4)
    assert PEAK_BF16_FLOPS["A100"] == 312e12 and PEAK_BF16_FLOPS["H200"] == 989e12


def test_cpu_has_no_peak_and_no_mfu():
    assert peak_flops(torch.device("cpu")) is None
    assert mfu(10_000, 1e6, None) is None
    assert peak_memory_bytes(torch.device("cpu")) > 10 * 2**20  # the peak RSS of this process


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
