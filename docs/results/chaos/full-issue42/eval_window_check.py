"""Does an evaluation change the training that follows it? The same b32 trial config (its trial_spec
from the fs-1 calm store, spec_b32.json) for 90 steps with evaluations every 33 and every 41 steps;
the logged train losses (each the mean since the previous log step) at the steps both log.

    CBS_HOME=/tmp/h CBS_DATA_ROOTS=<the fs-1 run's store folder> .venv/bin/python eval_window_check.py

Run from a clone at a240859 (the trainer is unchanged since) on the loaded 2-core VM (CPU, one torch thread); its output is eval_window_check.out.
"""
import json
from pathlib import Path

from cbscore.train.callbacks import Callback
from cbscore.train.config import TrainConfig
from cbscore.train.trainer import train

spec = json.loads((Path(__file__).parent / "spec_b32.json").read_text())["train_config"]


class Rec(Callback):
    def __init__(self):
        self.points = {}

    def post_step(self, state, metrics):
        if metrics and "train_loss" in metrics:
            self.points[state.step] = float(metrics["train_loss"])


out = {}
for every in (33, 41):
    cfg = TrainConfig.from_dict({**spec, "max_steps": 90, "max_tokens": 90 * 32 * 16, "eval_every_steps": every,
                                 "target_loss": None, "threads": 1})
    rec = Rec()
    train(cfg, callbacks=[rec])
    out[every] = rec.points
shared = sorted(set(out[33]) & set(out[41]))
for s in shared:
    print(s, out[33][s], out[41][s], "same" if out[33][s] == out[41][s] else "DIFF")
