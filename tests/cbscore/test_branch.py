"""Branching a trial from another trial's snapshot (cbscore.train.branch): known answers on a CPU.

Base: tiny-0.1M, 8 sequences of 32 tokens a step (256 tokens), 30 steps, warm-up 10 steps;
snapshots after steps 6 (inside the warm-up) and 12.
"""

from __future__ import annotations

import hashlib
import math

import pytest
import torch

from cbscore.data.stream import WindowStream
from cbscore.errors import ConfigError
from cbscore.local import BranchSpec, branch_config
from cbscore.train.branch_config import BranchConfig, flat_dict
from cbscore.train.callbacks import Callback
from cbscore.train.checkpoint import load_checkpoint, save_checkpoint, snapshot_path
from cbscore.train.config import TrainConfig
from cbscore.train.trainer import train
from tests.cbscore.test_train import CrashAt, Recorder

STEP_TOKENS = 8 * 32


def base_config(data, snapshots, **changes) -> TrainConfig:
    fields = dict(
        model="tiny-0.1M", batch_size=8, context_tokens=32, max_tokens=STEP_TOKENS * 30, lr=1e-2,
        warmup_tokens=STEP_TOKENS * 10, ewa_taus=(0.9,), eval_windows=16, log_every_steps=1,
        data=data, device="cpu", threads=1,
        branch=None if snapshots is None else BranchConfig(snapshot_dir=str(snapshots),
                                                           snapshot_tokens=(STEP_TOKENS * 6, STEP_TOKENS * 12)),
    )
    return TrainConfig(**{**fields, **changes})


class WindowSpy:
    """Records the stream positions the trainer reads (wraps the real WindowStream.windows)."""

    def __init__(self, monkeypatch):
        self.calls = []
        real = WindowStream.windows

        def windows(stream, start, count):
            self.calls.append((start, count))
            return real(stream, start, count)

        monkeypatch.setattr(WindowStream, "windows", windows)

    def sequences(self) -> list[int]:
        return sorted(i for start, count in self.calls for i in range(start, start + count))


def folder_digest(folder) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def base_run(builtin_slice_config, tmp_path_factory):
    snapshots = tmp_path_factory.mktemp("snapshots")
    config = base_config(builtin_slice_config, snapshots)
    rec = Recorder()
    return config, train(config, callbacks=[rec]), rec.metrics


def test_a_base_run_keeps_a_snapshot_at_each_token_count(base_run):
    config, result, _ = base_run
    assert sorted(p.name for p in snapshot_path(config.branch.snapshot_dir, 0).parent.iterdir()) == [
        "tokens-000000000001536", "tokens-000000000003072"]
    ckpt = load_checkpoint(snapshot_path(config.branch.snapshot_dir, STEP_TOKENS * 6))
    assert (ckpt["step"], ckpt["tokens"], ckpt["result"]) == (6, 1536, None)
    assert result.steps == 30


def test_a_branch_at_k1_continues_the_base_trajectory_bit_for_bit(base_run):
    base, base_result, _ = base_run
    folder = snapshot_path(base.branch.snapshot_dir, STEP_TOKENS * 6)
    before = folder_digest(folder)
    config = branch_config(base, BranchSpec(checkpoint_tokens=STEP_TOKENS * 6, multiplier=1, window_tokens=STEP_TOKENS * 24,
                                            averaging="carry"), snapshot_dir=base.branch.snapshot_dir)
    assert (config.branch.branch_step, config.branch.branch_tokens, config.total_steps, config.lr) == (6, 1536, 24, base.lr)
    result = train(config)
    # the same update as not branching: every later step's loss, and (the base's averages carried
    # on) the final averaged weights' loss
    assert [v for _, v in result.train_log] == [v for s, v in base_result.train_log if s > 6]
    assert result.final_eval_loss == base_result.final_eval_loss
    assert (result.steps, result.tokens) == (24, base_result.tokens)
    assert folder_digest(folder) == before  # the base snapshot is read only


def test_a_branch_at_k2_sees_the_base_tokens_at_sqrt2_lr_without_rewarming(base_run, monkeypatch):
    base, _, base_metrics = base_run
    spy = WindowSpy(monkeypatch)
    rec = Recorder()
    config = branch_config(base, BranchSpec(checkpoint_tokens=STEP_TOKENS * 6, multiplier=2, window_tokens=STEP_TOKENS * 24),
                           snapshot_dir=base.branch.snapshot_dir)
    result = train(config, callbacks=[rec])
    assert (config.batch_size, result.steps) == (16, 12)
    assert config.lr == pytest.approx(math.sqrt(2) * base.lr)
    # base steps 6..29 read sequences 48..239; the branch reads the same ones, each once
    assert spy.sequences() == list(range(48, 240))
    # branch step j starts at base step 6 + 2j: the base's warm-up continues, ×√2
    base_lr = {m["step"]: m["lr"] for m in base_metrics}  # lr of the step that ended at "step"
    for m in rec.metrics:
        assert m["tokens"] == 1536 + m["step"] * 512
        assert m["lr"] == pytest.approx(math.sqrt(2) * base_lr[6 + 2 * (m["step"] - 1) + 1], rel=1e-12)
    assert rec.metrics[0]["lr"] < math.sqrt(2) * base.lr  # step 6 is inside the warm-up: no re-warm-up from 0.1·lr
    assert result.eval_history[0].tokens == 1536 and result.eval_history[-1].tokens == 30 * STEP_TOKENS


def test_a_killed_branch_resumes_from_its_own_checkpoint_to_the_same_end(base_run, tmp_path):
    base, _, _ = base_run
    spec = BranchSpec(checkpoint_tokens=STEP_TOKENS * 12, multiplier=2, window_tokens=STEP_TOKENS * 18)
    config = branch_config(base, spec, snapshot_dir=base.branch.snapshot_dir, checkpoint_dir=str(tmp_path / "branch"))
    config = config.replace(checkpoint_every_steps=3)
    uninterrupted = train(config.replace(checkpoint_dir=str(tmp_path / "other"), checkpoint_every_steps=None))
    with pytest.raises(RuntimeError, match="simulated kill"):
        train(config, callbacks=[CrashAt(5)])  # its own checkpoint at step 3 survives
    resumed = train(config)
    assert resumed.resumed_from_step == 3 and resumed.steps == uninterrupted.steps == 9
    assert resumed.train_log == uninterrupted.train_log
    assert [e.to_dict() for e in resumed.eval_history] == [e.to_dict() for e in uninterrupted.eval_history]


def test_a_branch_killed_before_its_first_checkpoint_starts_again_from_the_base(base_run, tmp_path):
    base, _, _ = base_run
    spec = BranchSpec(checkpoint_tokens=STEP_TOKENS * 12, multiplier=2, window_tokens=STEP_TOKENS * 6)
    config = branch_config(base, spec, snapshot_dir=base.branch.snapshot_dir, checkpoint_dir=str(tmp_path / "b"))
    with pytest.raises(RuntimeError, match="simulated kill"):
        train(config, callbacks=[CrashAt(2)])
    again = train(config)
    assert again.resumed_from_step is None
    assert again.train_log == train(config.replace(checkpoint_dir=None)).train_log


def test_a_branch_whose_base_does_not_match_is_refused_naming_the_field(base_run, tmp_path):
    base, _, _ = base_run
    spec = BranchSpec(checkpoint_tokens=STEP_TOKENS * 6, multiplier=2, window_tokens=STEP_TOKENS * 4)
    config = branch_config(base, spec, snapshot_dir=base.branch.snapshot_dir)
    with pytest.raises(ConfigError, match=r"branch_step: does not match the checkpoint at branch_from \(step 6\), but got 7"):
        train(config.replace(branch=config.branch.replace(branch_step=7)))
    with pytest.raises(ConfigError, match=r"seed: must be the base trial's \(0\) for a branch, but got 1"):
        train(config.replace(seed=1))
    with pytest.raises(ConfigError, match=r"ewa_taus: must give the base trial's"):
        train(config.replace(ewa_taus=(0.8,)))
    with pytest.raises(ConfigError, match=r"branch_from: holds no checkpoint.pt"):
        train(config.replace(branch=config.branch.replace(branch_from=str(tmp_path / "nowhere"))))
    assert not (tmp_path / "nowhere").exists()  # nothing made where the base was looked for


def test_branch_fields_are_checked_and_round_trip(base_run):
    base, _, _ = base_run
    config = branch_config(base, BranchSpec(checkpoint_tokens=STEP_TOKENS * 6, multiplier=1.5, window_tokens=STEP_TOKENS * 3),
                           snapshot_dir=base.branch.snapshot_dir)
    assert config.batch_size == 12 and config.lr == pytest.approx(math.sqrt(1.5) * base.lr)
    assert TrainConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ConfigError, match="branch_step: is required with branch_from"):
        config.branch.replace(branch_step=None)
    with pytest.raises(ConfigError, match="branch_tokens: needs branch_from"):
        base.branch.replace(branch_tokens=256)
    with pytest.raises(ConfigError, match="beta2: must be given for a branch"):
        config.replace(beta2=None)
    with pytest.raises(ConfigError, match="multiplier: must make a whole batch"):
        branch_config(base, BranchSpec(checkpoint_tokens=1536, multiplier=1.3, window_tokens=2048), snapshot_dir="s")
    with pytest.raises(ConfigError, match="window_tokens: must be a whole number of the branch's steps"):
        branch_config(base, BranchSpec(checkpoint_tokens=1536, multiplier=2, window_tokens=256), snapshot_dir="s")
    with pytest.raises(ConfigError, match="snapshot_tokens: must be a stream position"):
        base.replace(branch=base.branch.replace(snapshot_tokens=(300,)))


def test_a_checkpoint_written_before_branching_existed_still_resumes(builtin_slice_config, tmp_path):
    config = base_config(builtin_slice_config, None, max_tokens=STEP_TOKENS * 12, checkpoint_dir=str(tmp_path / "c"))
    with pytest.raises(RuntimeError, match="simulated kill"):
        train(config.replace(checkpoint_every_steps=5), callbacks=[CrashAt(7)])
    ckpt = load_checkpoint(tmp_path / "c")
    for name in ("branch", "schedule_batch_size", "schedule_tokens"):
        del ckpt["config"][name]  # as the trainer wrote it before these fields existed
    del ckpt["tokens"]
    save_checkpoint(tmp_path / "c", ckpt)
    resumed = train(config)
    assert resumed.resumed_from_step == 5
    assert resumed.train_log == train(config.replace(checkpoint_dir=None)).train_log
    assert torch.isfinite(torch.tensor(resumed.final_eval_loss))


# ------------------------------------------------------------------ issue 39: the average a branch is read on
class Iterates(Callback):
    """The iterates θ_1 .. θ_n: the averaged parameters after every step of the trial."""

    def __init__(self):
        self.thetas = []

    def post_step(self, state, metrics):
        self.thetas.append([p.detach().clone() for p in state.model.parameters()])


def ewa(thetas, tau, start=None, start_mass=0.0):
    """``ξ_n = τ^n·ξ_0 + Σ_i (1 − τ)·τ^(n−i)·θ_i`` and its bias correction ``ξ_n / (1 − Π τ)`` with
    ``Π τ = (1 − start_mass)·τ^n`` (Kingma & Ba 2015, §3; ``start`` = a carried shadow of mass ``start_mass``)."""
    n = len(thetas)
    total = [torch.zeros_like(p) for p in thetas[0]] if start is None else [tau ** n * s for s in start]
    for i, theta in enumerate(thetas, 1):
        for t, p in zip(total, theta):
            t += (1 - tau) * tau ** (n - i) * p
    return [t / (1 - (1 - start_mass) * tau ** n) for t in total]


def corrected(average: dict) -> list[torch.Tensor]:
    """ξ̂ of the first τ of a saved WeightAverage state."""
    return [s / (1 - average["decay"][0]) for s in average["shadows"][0]]


def test_a_branch_averaged_from_the_branch_holds_its_own_iterates_only(base_run, tmp_path):
    base, _, _ = base_run
    spec = BranchSpec(checkpoint_tokens=STEP_TOKENS * 12, multiplier=2, window_tokens=STEP_TOKENS * 8)
    config = branch_config(base, spec, snapshot_dir=base.branch.snapshot_dir, checkpoint_dir=str(tmp_path / "b"))
    assert (spec.averaging, config.branch.branch_ewa, config.ewa_batch_size) == ("branch", "reset", 8)  # the default
    seen = Iterates()
    train(config, callbacks=[seen])
    average = load_checkpoint(tmp_path / "b")["average"]
    # 4 steps of 16 sequences, τ = 0.9 per 8 (B0): 0.81 a step; the correction counts these 4 steps only
    assert len(seen.thetas) == average["count"] == 4
    assert average["decay"] == pytest.approx([0.81 ** 4], rel=1e-12)
    for got, want in zip(corrected(average), ewa(seen.thetas, 0.81)):
        torch.testing.assert_close(got, want)  # nothing of the base's 12 steps


def test_a_branch_carried_at_tau_k_keeps_the_same_share_of_the_base_at_every_k(base_run, tmp_path):
    base, _, _ = base_run
    snapshot = load_checkpoint(snapshot_path(base.branch.snapshot_dir, STEP_TOKENS * 12))["average"]  # 12 steps at τ = 0.9
    decays = {}
    for k in (1, 2):
        spec = BranchSpec(checkpoint_tokens=STEP_TOKENS * 12, multiplier=k, window_tokens=STEP_TOKENS * 8,
                          averaging="tokens")
        config = branch_config(base, spec, snapshot_dir=base.branch.snapshot_dir, checkpoint_dir=str(tmp_path / f"k{k}"))
        assert (config.branch.branch_ewa, config.ewa_batch_size) == ("carry", 8)
        seen = Iterates()
        train(config, callbacks=[seen])
        average = load_checkpoint(tmp_path / f"k{k}")["average"]
        decays[k] = average["decay"][0]
        # the base's shadow carried on at τ^k per step: ξ = τ^(k·n)·ξ_base + Σ (1 − τ^k)·τ^(k(n−i))·θ_i
        want = ewa(seen.thetas, 0.9 ** k, start=snapshot["shadows"][0], start_mass=1 - 0.9 ** 12)
        for got, w in zip(corrected(average), want):
            torch.testing.assert_close(got, w)
    # equal horizons in tokens: after the same 8·B0·T tokens both decayed by τ^(12 + 8) (the base's
    # share of the average is τ^8·(1 − τ^12)/(1 − τ^20) at either k; per step k = 2 would keep τ^4)
    assert decays[1] == pytest.approx(0.9 ** 20, rel=1e-12) and decays[2] == pytest.approx(0.9 ** 20, rel=1e-12)


def test_branch_averaging_fields_are_checked_and_round_trip(base_run):
    base, _, _ = base_run
    config = branch_config(base, BranchSpec(checkpoint_tokens=STEP_TOKENS * 6, multiplier=2, window_tokens=STEP_TOKENS * 4),
                           snapshot_dir=base.branch.snapshot_dir)
    assert TrainConfig.from_dict(config.to_dict()) == config
    old = flat_dict(config.to_dict())  # the flat form a checkpoint of before held
    del old["branch_ewa"], old["ewa_batch_size"]
    from cbscore.train.config import LATER_FIELDS
    assert TrainConfig.from_dict({**LATER_FIELDS, **old}).branch.branch_ewa == "carry"  # a checkpoint from before: as it ran
    with pytest.raises(ConfigError, match=r"^branch_ewa: must be one of carry, reset, but got 'fresh'\."):
        config.branch.replace(branch_ewa="fresh")
    with pytest.raises(ConfigError, match=r"^branch_ewa: needs branch_from .*, but got 'reset'\."):
        base.branch.replace(branch_ewa="reset")
    with pytest.raises(ConfigError, match=r"^ewa_batch_size: .*but got 0\."):
        base.replace(ewa_batch_size=0)
    with pytest.raises(ConfigError, match=r"^averaging: must be one of branch, tokens, carry, but got 'none'\."):
        BranchSpec(checkpoint_tokens=1536, multiplier=2, window_tokens=1024, averaging="none")


def test_branch_spec_wire_format_and_checks():
    spec = BranchSpec(checkpoint_tokens=1536, multiplier=1.5, window_tokens=1024, lr_rule="linear")
    assert spec.to_dict() == {"checkpoint_tokens": 1536, "multiplier": 1.5, "window_tokens": 1024,
                              "lr_rule": "linear", "averaging": "branch"}
    assert BranchSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(ConfigError, match=r"^window_tokens: is required, but got None\.$"):
        BranchSpec.from_dict({"checkpoint_tokens": 1536, "multiplier": 2})
    with pytest.raises(ConfigError, match=r"^k: is not a BranchSpec field, but got 2\.$"):
        BranchSpec.from_dict({**spec.to_dict(), "k": 2})
    with pytest.raises(ConfigError, match=r"^lr_rule: must be one of sqrt, linear, constant, but got 'cube'\.$"):
        BranchSpec(checkpoint_tokens=1536, multiplier=2, window_tokens=1024, lr_rule="cube")
    with pytest.raises(ConfigError, match=r"^multiplier: must be a finite number, but got nan\.$"):
        BranchSpec(checkpoint_tokens=1536, multiplier=float("nan"), window_tokens=1024)
