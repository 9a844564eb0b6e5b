"""The trainer on the built-in corpus (a small slice of it, tiny model, CPU): known answers."""

from __future__ import annotations

import math

import pytest
import torch

from cbscore.analysis import first_crossing
from cbscore.errors import ConfigError, DataError
from cbscore.train.callbacks import Callback
from cbscore.train.checkpoint import load_checkpoint
from cbscore.train.config import TrainConfig
from cbscore.train.trainer import train


def tiny(data, **changes) -> TrainConfig:
    """tiny-0.1M, 8 sequences of 32 tokens a step, one thread: about 30 steps a second here."""
    base = dict(
        model="tiny-0.1M", batch_size=8, context_tokens=32, max_tokens=8 * 32 * 60, lr=1e-2,
        warmup_tokens=8 * 32 * 10, ewa_taus=(0.9,), eval_windows=16, log_every_steps=5,
        data=data, device="cpu", threads=1,
    )
    return TrainConfig(**{**base, **changes})


class Recorder(Callback):
    def __init__(self):
        self.events = []
        self.metrics = []

    def pre_train(self, state):
        self.events.append(("pre_train", state.step))

    def post_step(self, state, metrics):
        if metrics is not None:
            self.metrics.append(metrics)

    def post_eval(self, state, point):
        self.events.append(("post_eval", point.step))

    def post_train(self, state, result):
        self.events.append(("post_train", result.status))


def test_loss_falls_on_the_builtin_corpus(builtin_slice_config):
    rec = Recorder()
    result = train(tiny(builtin_slice_config, max_tokens=8 * 32 * 120), callbacks=[rec])
    assert result.status == "finished"  # no target, budget spent
    assert result.steps == result.total_steps == 120 and result.tokens == 120 * 256
    first, last = result.eval_history[0], result.eval_history[-1]
    assert first.step == 0 and last.step == 120
    # the initial loss is ln V + σ²/2 ≈ 6.93 + 0.5 for V = 1024; 120 steps take off well over a nat
    assert first.loss == pytest.approx(math.log(1024) + 0.5, abs=0.3)
    assert last.loss < first.loss - 1.5
    assert last.raw_loss < first.raw_loss - 1.5
    assert result.final_eval_loss == last.loss == last.ewa_losses["0.9"]
    assert result.tokens_per_s > 0 and result.mfu is None  # CPU: no MFU
    assert result.n_params == 98_304 and result.flops_per_token == 6 * (98_304 + 64 * 1024) + 12 * 2 * 64 * 32  # head at the store's V = 1024
    # hooks: pre_train, an evaluation at 0 and at the last step, post_train; metrics on log steps only
    assert rec.events[0] == ("pre_train", 0) and rec.events[-1] == ("post_train", "finished")
    assert ("post_eval", 0) in rec.events and ("post_eval", 120) in rec.events
    assert all(m["step"] % 5 == 0 or m["step"] in {e.step for e in result.eval_history} for m in rec.metrics)
    assert {"step", "tokens", "train_loss", "lr", "grad_norm", "tokens_per_s", "mfu"} <= set(rec.metrics[0])


def test_stops_at_the_target_and_interpolates_the_crossing(builtin_slice_config):
    result = train(tiny(builtin_slice_config, max_tokens=8 * 32 * 200, target_loss=6.0))
    assert result.status == "reached"
    assert result.steps < result.total_steps
    *_, before, after = result.eval_history
    assert before.loss > 6.0 >= after.loss and after.step == result.steps
    # the local fit of the evaluations around the target (first_crossing), within the history
    expected = first_crossing([e.step for e in result.eval_history], [e.loss for e in result.eval_history], 6.0)
    assert result.steps_to_target == pytest.approx(expected)
    assert result.tokens_to_target == pytest.approx(expected * 256)
    assert result.eval_history[1].step < result.steps_to_target <= after.step


def test_interpolated_crossing_is_exact_on_a_synthetic_evaluation_curve():
    # the function the trainer stops with: loss = 10·step^-0.2 crosses 10·135^-0.2 at step 135 exactly
    steps = [0, 1, 2, 4, 8, 16, 32, 64, 100, 120, 140, 160]
    losses = [10.0] + [10 * s ** -0.2 for s in steps[1:]]
    assert first_crossing(steps, losses, 10 * 135 ** -0.2) == pytest.approx(135.0)


def test_target_never_reached_is_censored(builtin_slice_config):
    result = train(tiny(builtin_slice_config, max_tokens=8 * 32 * 20, target_loss=1.0))
    assert result.status == "censored"
    assert result.steps == 20 and result.steps_to_target is None and result.tokens_to_target is None


def test_a_huge_learning_rate_ends_diverged_not_raised(builtin_slice_config):
    result = train(tiny(builtin_slice_config, lr=10.0))
    assert result.status == "diverged"
    assert "running minimum" in result.stop_reason or "non-finite" in result.stop_reason
    assert result.steps < result.total_steps
    import json

    json.dumps(result.to_dict(), allow_nan=False)  # still strict JSON (non-finite numbers become null)


def test_gradient_accumulation_gives_the_full_batch_update(builtin_slice_config, tmp_path):
    full = train(tiny(builtin_slice_config, max_steps=4, log_every_steps=1, checkpoint_dir=str(tmp_path / "a")))
    accum = train(tiny(builtin_slice_config, max_steps=4, log_every_steps=1, micro_batch_size=2,
                       checkpoint_dir=str(tmp_path / "b")))
    torch.testing.assert_close([v for _, v in accum.train_log], [v for _, v in full.train_log], rtol=1e-5, atol=1e-5)
    a, b = load_checkpoint(tmp_path / "a")["model"], load_checkpoint(tmp_path / "b")["model"]
    # Summing micro-batch gradients reassociates floats (~1e-7 relative); Adam divides by sqrt(v),
    # so an element whose gradient is near zero carries that into its update. 5e-5 is half a
    # percent of one step at lr 1e-2 (a real accumulation bug moves weights by whole steps).
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-4, atol=5e-5)


class CrashAt(Callback):
    def __init__(self, step):
        self.step = step

    def post_step(self, state, metrics):
        if state.step == self.step:
            raise RuntimeError("simulated kill")


class StopAt(Callback):
    def __init__(self, step):
        self.step = step

    def post_step(self, state, metrics):
        if state.step == self.step:
            state.request_stop("cancelled by test")


def test_resume_after_a_crash_reproduces_the_uninterrupted_run(builtin_slice_config, tmp_path):
    config = tiny(builtin_slice_config, max_tokens=8 * 32 * 30, log_every_steps=1, checkpoint_every_steps=10,
                  checkpoint_dir=str(tmp_path / "ckpt"))
    uninterrupted = train(config.replace(checkpoint_dir=str(tmp_path / "other"), checkpoint_every_steps=None))
    with pytest.raises(RuntimeError, match="simulated kill"):
        train(config, callbacks=[CrashAt(17)])  # the checkpoint at step 10 survives
    resumed = train(config)
    assert resumed.resumed_from_step == 10
    assert resumed.status == uninterrupted.status == "finished"
    # batches are a pure function of the step: the losses after the resume are the same, bit for bit
    assert resumed.train_log == uninterrupted.train_log
    assert [e.to_dict() for e in resumed.eval_history] == [e.to_dict() for e in uninterrupted.eval_history]


def test_a_stopped_trial_keeps_a_checkpoint_and_resumes_to_the_same_end(builtin_slice_config, tmp_path):
    config = tiny(builtin_slice_config, max_tokens=8 * 32 * 25, log_every_steps=1, checkpoint_dir=str(tmp_path))
    stopped = train(config, callbacks=[StopAt(13)])
    assert (stopped.status, stopped.stop_reason, stopped.steps) == ("stopped", "cancelled by test", 13)
    resumed = train(config)
    uninterrupted = train(config.replace(checkpoint_dir=None))
    assert resumed.resumed_from_step == 13
    assert resumed.final_eval_loss == uninterrupted.final_eval_loss
    assert resumed.train_log == uninterrupted.train_log
    # the ended trial's checkpoint holds its result: running it again returns it without training
    again = train(config)
    assert again == resumed


def test_a_checkpoint_of_another_trial_is_refused(builtin_slice_config, tmp_path):
    config = tiny(builtin_slice_config, max_steps=2, checkpoint_dir=str(tmp_path))
    train(config)
    with pytest.raises(ConfigError, match=r"checkpoint_dir: holds a checkpoint of a different trial \(fields that differ: lr\)"):
        train(config.replace(lr=2e-2))


def test_warmup_steps_halve_when_the_batch_doubles(builtin_slice_config):
    small = train(tiny(builtin_slice_config, batch_size=4, max_steps=1, warmup_tokens=4 * 32 * 16))
    large = train(tiny(builtin_slice_config, batch_size=8, max_steps=1, warmup_tokens=4 * 32 * 16))
    assert (small.warmup_steps, large.warmup_steps) == (16, 8)


def test_a_budget_beyond_the_corpus_is_a_data_error(builtin_slice_config):
    with pytest.raises(DataError, match="max_tokens"):
        train(tiny(builtin_slice_config, max_tokens=10**9))


def test_a_time_based_checkpoint_is_written_atomically_and_resumed(builtin_slice_config, tmp_path):
    # checkpoint_every_seconds tiny: a checkpoint at every log step (steps 1, 2, 4, 5, 8, 10, 15, 16
    # here: multiples of 5 and the steps just before the log-spaced evaluations)
    config = tiny(builtin_slice_config, max_tokens=8 * 32 * 20, checkpoint_dir=str(tmp_path),
                  checkpoint_every_seconds=1e-9, eval_every_steps=100)
    with pytest.raises(RuntimeError):
        train(config, callbacks=[CrashAt(12)])
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]  # no temporary file left behind
    ckpt = load_checkpoint(tmp_path)
    assert ckpt["step"] == 10 and ckpt["result"] is None
    assert train(config).resumed_from_step == 10


def test_the_progress_bar_reports_tokens_and_loss(builtin_slice_config):
    import io

    from cbscore.train.callbacks import ProgressBar

    out = io.StringIO()
    train(tiny(builtin_slice_config, max_steps=10), callbacks=[ProgressBar(file=out)])
    text = out.getvalue()
    assert "2.56k/2.56k" in text  # 10 steps × 256 tokens, all done
    assert "loss=" in text and "tok/s=" in text


@pytest.mark.slow
def test_torch_compile_trains_to_the_same_losses_on_cpu(builtin_slice_config):
    eager = train(tiny(builtin_slice_config, max_steps=6, log_every_steps=1))
    compiled = train(tiny(builtin_slice_config, max_steps=6, log_every_steps=1, compile=True))
    torch.testing.assert_close([v for _, v in compiled.train_log], [v for _, v in eager.train_log], rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_cuda_bf16_compiled_training_reaches_a_target_and_reports_mfu(builtin_slice_config):
    result = train(tiny(builtin_slice_config, device="cuda", compile=True, max_tokens=8 * 32 * 200, target_loss=6.0,
                        threads=None))
    assert result.status == "reached"
    assert result.device.startswith("cuda")
    assert result.tokens_per_s > 0 and (result.mfu is None or 0 < result.mfu < 1)
    assert result.peak_memory_bytes > 0


def test_a_result_round_trips_through_json(builtin_slice_config):
    import json

    from cbscore.train.result import TrialResult

    result = train(tiny(builtin_slice_config, max_steps=6, target_loss=7.0))
    wire = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert TrialResult.from_dict(wire) == result


def test_a_checkpoint_names_no_class_of_the_project_so_it_loads_after_a_module_moves(builtin_slice_config, tmp_path):
    import pickle
    import zipfile

    train(tiny(builtin_slice_config, max_steps=2, checkpoint_dir=str(tmp_path)))
    globals_named = set()

    class Stub(dict):
        """Stands for any global: takes any arguments, items and state."""

        def __init__(self, *args, **kwargs):
            super().__init__()

        def __setstate__(self, state):
            pass

    class Names(pickle.Unpickler):
        """Records every global the pickle names instead of importing it."""

        def find_class(self, module, name):
            globals_named.add((module, name))
            return Stub

        def persistent_load(self, pid):  # a tensor's storage: not needed to read the names
            return None

    with zipfile.ZipFile(tmp_path / "checkpoint.pt") as archive:
        [pkl] = [n for n in archive.namelist() if n.endswith("/data.pkl")]
        Names(archive.open(pkl)).load()
    modules = {module for module, _ in globals_named}
    assert "torch._utils" in modules  # the tensors are there, rebuilt by torch
    # only torch and the standard library: no cbscore or workers class path that a move could break
    assert {m.split(".")[0] for m in modules} <= {"torch", "collections", "builtins"}, modules
