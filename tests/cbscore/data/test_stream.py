"""WindowStream: batches are a pure function of (seed, step, batch_size), single pass by default."""

from __future__ import annotations

import numpy as np
import pytest

from cbscore.errors import DataError

T = 64


def _rows(array: np.ndarray) -> list[bytes]:
    return sorted(row.tobytes() for row in np.asarray(array, dtype=np.int64))


def test_batch_2b_at_step_t_equals_batch_b_at_steps_2t_and_2t_plus_1(builtin_slice_store):
    stream = builtin_slice_store.train_stream(T, seed=7)
    for batch_size, step in [(1, 0), (4, 3), (16, 5)]:
        big = stream.batch(step, 2 * batch_size)
        small = np.concatenate(
            [stream.batch(2 * step, batch_size), stream.batch(2 * step + 1, batch_size)]
        )
        np.testing.assert_array_equal(big, small)
    assert big.shape == (32, T + 1) and big.dtype == np.int64


def test_same_windows_for_a_step_at_the_full_corpus_and_paper_context(builtin_store):
    stream = builtin_store.train_stream(512, seed=0)
    assert stream.n_windows == builtin_store.manifest["splits"]["train"]["tokens"] // 513
    np.testing.assert_array_equal(
        stream.batch(10, 8), np.concatenate([stream.batch(20, 4), stream.batch(21, 4)])
    )
    np.testing.assert_array_equal(stream.batch(10, 8), stream.windows(80, 8))


def test_batches_are_a_pure_function_of_seed_step_and_batch_size(builtin_slice_store):
    a = builtin_slice_store.train_stream(T, seed=1).batch(9, 8)
    b = builtin_slice_store.train_stream(T, seed=1).batch(9, 8)  # a fresh stream: no state
    c = builtin_slice_store.train_stream(T, seed=2).batch(9, 8)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_one_epoch_is_a_permutation_of_the_non_overlapping_windows(builtin_slice_store):
    tokens = np.asarray(builtin_slice_store.tokens("train"), dtype=np.int64)
    stream = builtin_slice_store.train_stream(T, seed=0)
    n = len(tokens) // (T + 1)
    assert stream.n_windows == n
    grid = tokens[: n * (T + 1)].reshape(n, T + 1)
    epoch = stream.windows(0, n)
    assert _rows(epoch) == _rows(grid)
    assert not np.array_equal(epoch, grid)  # shuffled, not in file order


def test_asking_past_one_pass_is_an_error_stating_available_tokens(builtin_slice_store):
    stream = builtin_slice_store.train_stream(T, seed=0)
    available = stream.n_windows * T
    stream.check_tokens(available)  # exactly one pass is fine
    with pytest.raises(DataError, match=f"holds {available} training tokens"):
        stream.check_tokens(available + 1)
    last_step = stream.n_windows // 4 - 1
    stream.batch(last_step, 4)
    with pytest.raises(DataError, match=f"{available} training tokens available"):
        stream.batch(stream.n_windows // 4 + 1, 4)


def test_repetition_when_allowed_uses_a_fresh_permutation_per_epoch(builtin_slice_store):
    stream = builtin_slice_store.train_stream(T, seed=0, allow_repeat=True)
    n = stream.n_windows
    stream.check_tokens(10 * n * T)
    first, second = stream.windows(0, n), stream.windows(n, n)
    assert _rows(first) == _rows(second)  # the same windows...
    assert not np.array_equal(first, second)  # ...in a new order
    straddle = stream.windows(n - 2, 4)  # a batch across the epoch boundary
    np.testing.assert_array_equal(straddle[:2], first[-2:])
    np.testing.assert_array_equal(straddle[2:], second[:2])


def test_bad_arguments_are_clear_errors(builtin_slice_store):
    stream = builtin_slice_store.train_stream(T, seed=0)
    with pytest.raises(DataError, match="but got 0"):
        stream.batch(0, 0)
    with pytest.raises(DataError, match="but got -1"):
        stream.batch(-1, 4)
    with pytest.raises(DataError, match="context_tokens"):
        builtin_slice_store.train_stream(0, seed=0)
    with pytest.raises(DataError, match="fewer than one window"):
        builtin_slice_store.train_stream(10**7, seed=0)


def test_val_windows_are_fixed_held_out_windows(builtin_slice_store):
    val = np.asarray(builtin_slice_store.tokens("val"), dtype=np.int64)
    n = len(val) // (T + 1)
    every = builtin_slice_store.val_windows(T)
    assert every.shape == (n, T + 1) and every.dtype == np.int64
    np.testing.assert_array_equal(every, val[: n * (T + 1)].reshape(n, T + 1))
    some = builtin_slice_store.val_windows(T, max_windows=5)
    np.testing.assert_array_equal(some, every[np.linspace(0, n - 1, 5).round().astype(int)])
    np.testing.assert_array_equal(some, builtin_slice_store.val_windows(T, max_windows=5))
    with pytest.raises(DataError, match="validation split holds"):
        builtin_slice_store.val_windows(len(val))


def test_numpy_integers_are_accepted(builtin_slice_store):
    stream = builtin_slice_store.train_stream(np.int64(T), seed=np.int64(3))
    np.testing.assert_array_equal(stream.batch(np.int64(2), np.int64(4)), stream.batch(2, 4))
    assert builtin_slice_store.val_windows(np.int64(T), np.int64(2)).shape == (2, T + 1)
