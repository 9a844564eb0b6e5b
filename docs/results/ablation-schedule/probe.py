"""A probe before the run: one stable run of ablation-schedule (B = 32, lr 0.012, seed 0) and its six
WSD decay branches, trained in this process on one thread; prints each decayed run's raw-weights
loss beside the stable run's evaluation nearest its horizon.

    CBS_HOME=$PWD/.cbs/probe python docs/results/ablation-schedule/probe.py > docs/results/ablation-schedule/probe.txt
"""

import os
import tempfile

from cbscore.study import load_preset
from cbscore.study.decay_plan import decay_trials, run_keys, stable_trial_id
from cbscore.train.config import TrainConfig
from cbscore.train.trainer import train

spec = load_preset("ablation-schedule")
root = tempfile.mkdtemp(prefix="decay-probe-", dir=os.environ.get("TMPDIR"))
folders = {stable_trial_id(spec, b, lr, s): f"{root}/b{b}.lr{lr}.s{s}" for b, lr, s in run_keys(spec)}
trials = [t for t in decay_trials(spec, folders)
          if (t.batch_size, t.lr, t.seed) == (32, 0.012, 0) and t.role in ("stable", "decay")]
stable = None
for t in trials:
    result = train(TrainConfig.from_dict({**t.train_config, "device": "cpu", "threads": 1}))
    if t.role == "stable":
        stable = result.eval_history
        print(f"{t.trial_id}: {result.steps} steps, EWA {result.final_eval_loss:.4f}, raw {result.final_raw_loss:.4f}")
        continue
    horizon = int(t.trial_id.rsplit(".h", 1)[1])
    near = min(stable, key=lambda p: abs(p.step - horizon))
    print(f"H = {horizon:>4}: decayed raw {result.final_raw_loss:.4f}; stable at step {near.step}: "
          f"EWA {near.loss:.4f}, raw {near.raw_loss:.4f}")
