"""A rank > 0 of a multi-device trial: ``python -m cbscore.train.distributed_rank RANK STORE_FILE KIND``
with the trial's config (JSON) on standard input (:func:`cbscore.train.distributed._spawn`).

Its own module, above both :mod:`cbscore.train.distributed` (the group) and :mod:`cbscore.train.trainer` (the
loop), so that neither imports the other: rank 0 runs the trainer, which launches the group; a
follower joins the group, then runs the trainer's rank loop.
"""

from __future__ import annotations

import contextlib
import json
import sys

import torch.distributed as dist

from cbscore.train.config import TrainConfig
from cbscore.train.distributed import _die_with_parent, _init, file_store
from cbscore.train.trainer import run_rank


def follow(rank: int, config_dict: dict, store_path: str, kind: str) -> None:
    """Rank ``rank > 0``: join rank 0's store and group, train, leave."""
    _die_with_parent()
    config = TrainConfig.from_dict(config_dict)
    store = file_store(store_path, config.devices, config.dist_timeout_s)
    group = _init(kind, rank, config.devices, store, config.dist_timeout_s)
    try:
        run_rank(config, group)
    finally:
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


if __name__ == "__main__":
    follow(int(sys.argv[1]), json.loads(sys.stdin.read()), sys.argv[2], sys.argv[3])
