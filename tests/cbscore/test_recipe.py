"""The paper's per-batch-size β2 and τ, and the nearest-column rule off the table."""

from __future__ import annotations

import pytest

from cbscore.recipe import paper_beta2, paper_ewa_tau


@pytest.mark.parametrize(
    ("batch_size", "beta2", "tau"),
    [(64, 0.999, 0.9995), (256, 0.995, 0.9995), (512, 0.99, 0.9995), (1024, 0.99, 0.999),
     (2048, 0.95, 0.998), (4096, 0.95, 0.995), (8192, 0.95, 0.99), (16384, 0.95, 0.99)],
)
def test_table_entries_are_the_papers(batch_size, beta2, tau):
    assert paper_beta2(batch_size) == beta2
    assert paper_ewa_tau(batch_size) == tau


@pytest.mark.parametrize(
    ("batch_size", "column"),
    [(1, 64), (16, 64), (90, 64), (91, 128), (180, 128), (182, 256), (1500, 2048), (1400, 1024), (10**6, 16384)],
)
def test_off_table_batch_sizes_take_the_nearest_column_in_log2(batch_size, column):
    # the log2 midpoint of 64 and 128 is 90.5; of 128 and 256, 181.0; of 1024 and 2048, 1448.2
    assert paper_beta2(batch_size) == paper_beta2(column)
    assert paper_ewa_tau(batch_size) == paper_ewa_tau(column)
