"""Issue 24: a ``local`` study (Merrill et al. 2025) end to end: base run with snapshots, branches
from each snapshot, the readout in ``cbs study fit --json``; and a branch killed with its worker
(SIGKILL to the whole process group) resumes from its own checkpoint with numbers identical to a
branch that was never interrupted."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from cbs import main as cbs_main
from cbscore.study import StudySpec
from tests.workers.conftest import CBS, DATA, wait_for
from tests.workers.test_extend_retry import drain
from workers.infra.settings import WorkerSettings
from workers.query import api
from workers.studies.local_study import delete_study_artifacts, snapshot_dir
from workers.tracking import Tracker


def local_spec(name: str, **local) -> StudySpec:
    """tiny-0.1M at T = 16, B0 = 4 (64 tokens a step), D = 4,096 tokens: checkpoints at D/4 and D/2,
    k ∈ {1, 2, 4} (Δ a multiple of lcm(4, 8, 16)·16 = 256 tokens: 512 at both, fixed in tokens)."""
    fields = {"base_batch_size": 4, "base_lr": 0.01, "checkpoint_count": 2, "multipliers": [1, 2, 4]}
    fields.update(local)
    return StudySpec.from_dict(dict(name=name, kind="local", models=["tiny-0.1M"], tokens=[4096], context_tokens=16,
                                    eval_windows=16, data=dict(DATA), local=fields))


def test_a_local_study_runs_to_a_local_cbs_per_checkpoint(worker_env, token_store, capsys):
    name = "loc1"
    api.launch_study(local_spec(name))
    assert [r.trial_id for r in api.study_records(name)] == ["loc1.base.s0"]  # branches wait for its snapshots
    ran = drain(name)
    assert ran[0] == "loc1.base.s0"
    assert sorted(ran[1:]) == sorted(f"loc1.t{t}.k{k}.s0" for t in (1024, 2048) for k in (1, 2, 4))
    status = api.study_status(name)
    assert status.status == "done" and status.counts == {"finished": 7}
    # The snapshots are the study's artifacts: still there after the study ended, outside the checkpoints.
    folder = Path(snapshot_dir(name, 0))
    assert sorted(p.name for p in folder.iterdir()) == ["tokens-000000000001024", "tokens-000000000002048"]
    assert not (Path(worker_env["CBS_HOME"]) / "checkpoints" / "loc1.base.s0").exists()

    records = {r.trial_id: r for r in api.study_records(name)}
    branch = records["loc1.t1024.k2.s0"]
    assert branch.batch_size == 8 and branch.lr == pytest.approx(0.01 * 2 ** 0.5)
    assert branch.tokens == 512  # what it trained: Δ tokens, its stream continued from the checkpoint at 1024

    capsys.readouterr()
    assert cbs_main(["study", "fit", name, "--json"]) == 0
    fit = json.loads(capsys.readouterr().out)
    assert fit["kind"] == "local" and fit["base_batch_size"] == 4
    assert [c["tokens"] for c in fit["checkpoints"]] == [1024, 2048]
    assert [c["window_tokens"] for c in fit["checkpoints"]] == [512, 512]  # Merrill's Δ, fixed in tokens
    assert (fit["window_rule"], fit["averaging"]) == ("fixed", "branch")
    for c in fit["checkpoints"]:  # the raw weights read beside the averaged ones, and whether noise decided
        assert len(c["raw_loss"]) == 3 and c["noise_aware_raw"] is not None
        assert set(c["noise_decides"]) == {"noise_aware", "noise_aware_raw"}
    for c in fit["checkpoints"]:
        assert c["multipliers"] == [1.0, 2.0, 4.0]
        for rule in ("merrill", "noise_aware"):
            readout = c[rule]
            assert readout["local_cbs"] in (4.0, 8.0, 16.0)  # k*·B0 of the grid
            assert readout["local_cbs"] == readout["k_star"] * 4
        # Merrill's rule, re-derived from the smoothed losses: the largest k within ε of every smaller k
        losses = [row[0] for row in c["train_loss"]]
        passes = [all(losses[i] - losses[j] <= fit["epsilon"] for j in range(i)) for i in range(3)]
        assert c["merrill"]["k_star"] == [1.0, 2.0, 4.0][max(i for i, ok in enumerate(passes) if ok)]
    assert set(fit["curve"]) == {"merrill", "noise_aware"}
    merrill = fit["curve"]["merrill"]
    assert merrill is not None and merrill["tokens"] == [1024.0, 2048.0]
    warm = fit["warmup"]["merrill"]
    assert warm["constant_steps"] == 4096 // 64 and warm["steps"] + warm["steps_saved"] == warm["constant_steps"]
    # the text form names both rules
    assert cbs_main(["study", "fit", name]) == 0
    assert "merrill" in capsys.readouterr().out

    assert delete_study_artifacts(name) and not folder.exists()


def _branch_reference(config: dict, tmp: Path):
    """The branch run once more in this process, never interrupted: its result and logged losses."""
    from cbscore.train.callbacks import Callback
    from cbscore.train.config import TrainConfig
    from cbscore.train.trainer import train

    class Losses(Callback):
        def __init__(self):
            self.by_step = {}

        def post_step(self, state, metrics):
            if metrics is not None:
                self.by_step[state.step] = metrics["train_loss"]

    rec = Losses()
    result = train(TrainConfig.from_dict({**config, "checkpoint_dir": str(tmp), "threads": 1}), [rec])
    return result, rec.by_step


@pytest.mark.slow
def test_a_branch_killed_with_its_worker_resumes_with_identical_numbers(worker_env, processes, token_store, tmp_path):
    """B0 = 8 (128 tokens a step), D = 200k tokens; one checkpoint at 16,384 tokens, k ∈ {1, 2},
    Δ = 131,072 tokens (1,024 steps at k = 1): long enough to be caught mid-way."""
    name = "lockill"
    spec = StudySpec.from_dict(dict(
        name=name, kind="local", models=["tiny-0.1M"], tokens=[200_000], context_tokens=16, eval_windows=16,
        data=dict(DATA), local={"base_batch_size": 8, "checkpoint_count": 0, "checkpoint_tokens": [16384],
                                "multipliers": [1, 2], "window_tokens": 131072}))
    first = processes.worker()
    api.launch_study(spec)
    tracker = Tracker(WorkerSettings.from_env().tracking_uri)
    branch_id = f"{name}.t16384.k1.s0"
    ckpt = Path(worker_env["CBS_HOME"]) / "checkpoints" / branch_id / "checkpoint.pt"

    def branch_progressed():
        recs = {r.trial_id: r for r in api.study_records(name)}
        rec = recs.get(branch_id)
        if rec is None or rec.run_id is None or not ckpt.exists():
            return None
        step = tracker.get_run(rec.run_id).data.metrics.get("progress/step", 0)
        return rec if step >= 40 else None  # a branch counts its own steps: 40 past the branch point

    record = wait_for(branch_progressed, 240, every_s=0.5,
                      what=lambda: "the branch to pass 40 steps with a checkpoint\n" + processes.log(first)[-2000:])
    processes.kill(first, signal.SIGKILL)
    processes.worker()
    processes.start([CBS, "study", "watch", "--period", "1"], "runner")
    wait_for(lambda: api.study_status(name).status == "done", 300, every_s=2, what="the study to finish")

    record = {r.trial_id: r for r in api.study_records(name)}[branch_id]
    run = tracker.get_run(record.run_id)
    assert (record.status, record.attempt) == ("finished", 2)
    resumed = int(run.data.tags["resumed_from_step"])
    assert 0 < resumed < 1024  # from the branch's own checkpoint, not from the snapshot
    spec_dict = json.loads(run.data.tags["trial_spec"])
    stored = spec_dict["train_config"]
    config = {**stored, "branch": {**stored["branch"], "branch_from": str(Path(snapshot_dir(name, 0)) / "tokens-000000000016384")}}
    result, losses = _branch_reference(config, tmp_path / "reference")
    assert result.steps == 1024 and result.resumed_from_step is None
    assert float(run.data.metrics["summary/final_eval_loss"]) == result.final_eval_loss
    steps, values = tracker.history(run, "train/loss")
    assert list(steps) == sorted(losses) and list(values) == [losses[s] for s in sorted(losses)]


def test_the_dry_run_of_a_local_study_lists_its_base_run_checkpoints_and_branches(worker_env, token_store, tmp_path,
                                                                                  capsys):
    path = tmp_path / "loc.yaml"
    path.write_text(local_spec("locdry").to_yaml())
    assert cbs_main(["study", "launch", str(path), "--dry-run", "--tokens-per-s", "20000"]) == 0
    out = capsys.readouterr().out
    assert "first wave: 1 base run(s) at B0 = 4, η0 = 0.01 to D = 4,096 tokens" in out
    assert "t =        1,024  Δ =        512  branches k = 1, 2, 4 (lr × f(k), f = sqrt)" in out
    assert "carried over by every branch" in out and "reference trials" not in out
    assert "window: fixed Δ in tokens (Merrill et al. 2025); held-out loss averaged from the branch" in out
    assert api.list_studies() == []  # a dry run launches nothing
