"""The trainer: ``train(config, callbacks=()) -> TrialResult`` (DESIGN.md §1, "Steps-to-target").

One call trains one trial of the paper's recipe (Zhang et al. 2025, §3.1): AdamW, a linear
warm-up fixed in tokens then a constant (or cosine / WSD) learning rate, an exponential weight
average of the parameters after every step, and evaluations of the averaged weights on the
held-out split. It stops

- at the first evaluation whose best averaged loss is at or below ``target_loss`` (``reached``;
  steps-to-target read off a local power-law fit of the evaluations around the target,
  :func:`cbscore.analysis.first_crossing`; :mod:`cbscore.train.eval_schedule` makes them dense there),
- when the budget is spent (``censored`` with a target, ``finished`` without),
- when the loss is non-finite or a logged train loss exceeds ``divergence_factor`` × its running
  minimum after warm-up (``diverged``: an outcome, not an exception),
- or when a callback calls ``state.request_stop(reason)`` (``stopped``).

Device, dtype, autocast, compilation and the optimizer are decided once, before the loop. The
per-step path (:class:`cbscore.train.step.StepFn`) has no config branching, no I/O and no try/except but the
out-of-memory handler (free unless it fires); the train loss stays a device tensor and is read on
the host only at log steps (``# host sync``). Evaluation, checkpoints and logging callbacks run
off the throughput clock.

Several devices. With ``devices = k > 1`` the trial runs as k DDP processes
(:mod:`cbscore.train.distributed`): this process is rank 0, the only one that evaluates, checkpoints
and calls the callbacks; the others train their share of every batch. Before every step rank 0's
decisions (stop, the next evaluation step) are broadcast, so all ranks stop at the same step.

Out of memory. An out-of-memory error during a step's forward and backward passes frees them,
halves the micro-batch and redoes the passes; the optimizer has not stepped yet, so the update is
the same (a sum of the same gradients in another grouping). Near the ceiling an allocation can
fail inside cuBLAS or an attention kernel and surface as a ``RuntimeError`` that says so: it is
handled the same way (:func:`cbscore.train.micro_batch.is_out_of_memory`). An evaluation that runs out
of memory halves its chunk and starts again; a halving of the training micro-batch caps it too.

Throughput. The first step of a process (compilation, the allocator's warm-up) and a step redone
after an out-of-memory halving (a recompilation at the new shape) are off the tokens/s and MFU
clock, in the logged intervals and in the result alike.

Resuming. With ``checkpoint_dir`` set, a checkpoint (model, optimizer, averaged weights, step,
RNG states, evaluation history, the partial log interval and the next evaluation step) is
written atomically every ``checkpoint_every_steps`` steps or ``checkpoint_every_seconds``
seconds, when a callback stops the trial, and when it ends. A trial started where a checkpoint
exists continues from it; batches are a pure function of the step, so on CPU the resumed trial
reproduces the uninterrupted one's losses exactly. A checkpoint of a trial that already ended
holds its result, which is returned without training again.

Branches, batch-size schedules and snapshots (Merrill et al. 2025, arXiv 2505.23971). Every step
reads its windows and its learning rate by *stream position* in tokens (:mod:`cbscore.train.batch_plan`,
:class:`cbscore.train.schedules.TokenLrSchedule`), so a ``branch.batch_schedule`` changes the batch between
steps without a gap or a repeat in the data, and a branch (``branch.branch_from``) starts from another
trial's checkpoint, read only (:mod:`cbscore.train.branch`), and continues its data and schedule. A
trial's own checkpoint always takes precedence over its base (resume). With ``branch.snapshot_dir`` the
leader keeps a write-once copy of the state after the step that reaches each of
``branch.snapshot_tokens``; it is not this trial's resume point, so it is written whatever
``may_checkpoint`` says (its content is a pure function of the config, whichever attempt writes it).
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import time
from collections.abc import Sequence

import numpy as np
import torch

from cbscore.analysis import first_crossing
from cbscore.errors import ConfigError
from cbscore.model.config import get_preset, padded_vocab_size
from cbscore.model.gpt import GPT
from cbscore.train.allocator import keep_freed_memory
from cbscore.train.averaging import WeightAverage
from cbscore.train.batch_plan import Segment
from cbscore.train.branch_config import NO_BRANCH
from cbscore.train.callbacks import Callback, TrainState
from cbscore.train.checkpoint import rng_state, save_snapshot, set_rng_state
from cbscore.train.checkpointer import Checkpointer
from cbscore.train.config import TrainConfig
from cbscore.train.device import device_label, finite_or_none, resolve_device, torch_threads, trial_threads
from cbscore.train.distributed import SINGLE, Group, device_for_rank, launch
from cbscore.train.eval_schedule import EvalSchedule, default_every_steps, min_every_steps
from cbscore.train.gns import NO_GNS, GnsProbe
from cbscore.train.heldout import HeldOut
from cbscore.train.micro_batch import activation_bytes_per_sequence, choose_micro_batch, split_for_gns
from cbscore.train.progress import CHECKPOINT_FORMAT, Progress
from cbscore.train.result import EvalPoint, TrialResult, crossing_tau
from cbscore.train.step import StepFn
from cbscore.train.throughput import mfu, peak_flops, peak_memory_bytes


def train(config: TrainConfig, callbacks: Sequence[Callback] = ()) -> TrialResult:
    """Train one trial; see the module docstring for outcomes, evaluation and resuming.

    With ``config.devices > 1`` this process is rank 0 of a DDP trial and the other ranks are
    spawned (:func:`cbscore.train.distributed.launch`); a rank that dies raises
    :class:`cbscore.train.distributed.RankFailed`."""
    callbacks = tuple(callbacks)
    state = _new_state(config)
    with torch_threads(trial_threads(config)):
        try:
            if config.devices == 1:
                return _Trial(config, state, callbacks, SINGLE).run()
            kind = resolve_device(config.device).type
            return launch(config, kind, lambda group: _Trial(config, state, callbacks, group).run())
        except BaseException as exc:
            for cb in callbacks:
                cb.on_error(state, exc)
            raise


def run_rank(config: TrainConfig, group: Group) -> None:
    """Rank ``group.rank > 0`` of a multi-device trial: trains its share of every batch, reports
    nothing (rank 0 does); started by :mod:`cbscore.train.distributed`."""
    with torch_threads(trial_threads(config)):
        _Trial(config, _new_state(config), (), group).run()


def _new_state(config: TrainConfig) -> TrainState:
    preset = get_preset(config.model)
    return TrainState(
        config=config,
        total_steps=config.total_steps,
        warmup_steps=config.resolved_warmup_steps(),
        batch_tokens=config.batch_tokens,
        plan=config.batch_plan(),
        n_params=preset.n_params,
        flops_per_token=preset.flops_per_token(config.context_tokens),
        device=resolve_device(config.device).type,
        devices=config.devices,
    )


class _NoAverage:
    """Ranks > 0 keep no weight average: only rank 0 evaluates."""

    def update(self) -> None:
        pass

    def set_step_factor(self, factor: float) -> None:
        pass


class _Trial:
    """One process's share of one trial: its model, optimizer, averages, state and progress; its
    ``checkpointer`` (:class:`cbscore.train.checkpointer.Checkpointer`) decides where it resumes and
    when it saves what :meth:`state_dict` gives."""

    def __init__(self, config: TrainConfig, state: TrainState, callbacks: tuple[Callback, ...],
                 group: Group = SINGLE):
        self.config = config
        self.state = state
        self.callbacks = callbacks
        self.group = group
        self.leader = group.leader
        self.checkpointer = Checkpointer(config, callbacks)

    # ------------------------------------------------------------------------------ setup
    def _setup(self) -> None:
        cfg, leader = self.config, self.leader
        from cbscore.data import prepare

        self.device = device = self._device()
        self.state.device = device_label(device) + (f" × {cfg.devices}" if cfg.devices > 1 else "")
        total = cfg.total_steps

        # Data first: a DataError should come before a large model is built. (Ranks > 0 start
        # their setup once rank 0 has finished its own, so the store is prepared once.)
        store = prepare(cfg.data)
        self.stream = store.train_stream(cfg.context_tokens, cfg.seed, allow_repeat=cfg.allow_repeat)
        self.plan = cfg.batch_plan()
        self.stream.check_tokens(self.plan.end_tokens)
        if leader:
            val = store.val_windows(cfg.context_tokens, max_windows=cfg.eval_windows)  # (K, T + 1)
            val = torch.from_numpy(np.ascontiguousarray(val, dtype=np.int64)).to(device)

        # Model: initialised on the CPU from the seed, so the init is the same on every device.
        torch.manual_seed(cfg.seed)
        # The LM head padded to a multiple of 128 rows (a hub tokenizer's 50,277 → 50,304): the
        # matmul stays on the tensor cores' tiles; the padded rows are never a target.
        vocab = padded_vocab_size(int(store.vocab_size))
        model_config = get_preset(cfg.model).config(vocab_size=vocab, context_tokens=cfg.context_tokens)
        self.model = GPT(model_config).to(device)
        self.state.model = self.model
        # FLOPs per token with the LM head at the store's own vocabulary (MFU; PaLM appendix B).
        self.state.flops_per_token = model_config.flops_per_token()
        if leader:
            self.eval_model = copy.deepcopy(self.model).requires_grad_(False)

        if device.type == "cuda":
            torch.set_float32_matmul_precision("high")
            torch.cuda.reset_peak_memory_stats(device)
            self.autocast = lambda: torch.autocast("cuda", dtype=torch.bfloat16)
            self.sync = lambda: torch.cuda.synchronize(device)
        else:
            keep_freed_memory()  # no per-step page faults of the logits buffers (cbscore.train.allocator)
            self.autocast = contextlib.nullcontext
            self.sync = lambda: None

        decay = [p for p in self.model.parameters() if p.dim() >= 2]  # matrices and embeddings
        no_decay = [p for p in self.model.parameters() if p.dim() < 2]  # LayerNorm gains
        self.beta2 = cfg.resolved_beta2()
        # CUDA: one fused kernel. CPU: the multi-tensor path, not torch's default per-parameter
        # Python loop; on CPU it runs the same per-tensor kernels, so the update is the same bit
        # for bit (CPU's fused kernel is not: it rounds differently).
        self.adamw_kernels = {"fused": device.type == "cuda", "foreach": device.type != "cuda"}
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=cfg.lr, betas=(cfg.beta1, self.beta2), eps=cfg.eps, **self.adamw_kernels,
        )
        self.taus = cfg.resolved_ewa_taus()
        self.state.beta2, self.state.ewa_taus = self.beta2, self.taus
        self.average = WeightAverage(list(self.model.parameters()), self.taus) if leader else _NoAverage()
        self.lr_schedule = cfg.lr_schedule()  # by stream position (cbscore.train.schedules.TokenLrSchedule)
        if leader:
            self.eval_schedule = EvalSchedule(
                total_steps=total,
                every_steps=cfg.eval_every_steps or default_every_steps(total),
                target_loss=cfg.target_loss,
                near_fraction=cfg.eval_near_target,
                min_every_steps=min_every_steps(
                    eval_windows=len(val), context_tokens=cfg.context_tokens, n_models=1 + len(self.taus),
                    batch_tokens=cfg.batch_tokens, max_eval_fraction=cfg.max_eval_fraction),
            )
        self.model_config = model_config
        self.micro = self._micro_batch(model_config)
        self.state.micro_batch_size = self.micro
        self.gns = NO_GNS
        n_micro = cfg.local_batch_size // self.micro
        # Two batch sizes, micro and global: several micro-batches, or several ranks (rank 0's
        # probe sees its own micro-batch gradients before the all-reduce; McCandlish et al.
        # 2018, App. A.1, the data-parallel estimator at no extra pass).
        if cfg.measure_gns and self.leader and n_micro * cfg.devices >= 2:
            self.gns = GnsProbe(self.model.parameters(), n_micro=n_micro, micro_batch_size=self.micro,
                                batch_tokens=cfg.batch_tokens, half_life_tokens=cfg.resolved_gns_half_life_tokens(),
                                ranks=cfg.devices)
        if leader:
            self.heldout = HeldOut(val, chunk=cfg.micro_batch_size or self.micro, device=device, autocast=self.autocast)
        self.peak = peak_flops(device)
        self.progress = Progress(interval_loss=torch.zeros((), device=device))

    def _device(self) -> torch.device:
        device = resolve_device(self.config.device)
        if self.config.devices > 1 and device.type == "cuda":
            visible = torch.cuda.device_count()
            if visible < self.config.devices:
                raise ConfigError("devices", self.config.devices, f"needs as many GPUs, but {visible} are visible")
            return device_for_rank("cuda", self.group.rank)
        return device

    def _micro_batch(self, model_config, local_batch: int | None = None) -> int:
        """Sequences per pass. The config's ``micro_batch_size`` when it sets one and no extra
        split; else the split that measures the noise scale (``gns_micro_batch_size``, for
        single-device trials: under DDP the ranks already give two batch sizes), or the whole
        per-device batch; on CUDA capped by memory (:meth:`_auto_micro_batch`). On CUDA a fully
        automatic micro-batch of a trial that measures the noise scale makes two passes at least,
        so the noise scale is measured at every batch size, not only where the batch is too
        large for one pass (:func:`cbscore.train.micro_batch.split_for_gns`)."""
        cfg = self.config
        local_batch = local_batch or cfg.local_batch_size  # the current segment's per-device batch
        gns_split = cfg.gns_micro_batch_size if cfg.devices == 1 else None
        if cfg.micro_batch_size and not gns_split:
            return cfg.micro_batch_size
        most = gns_split or local_batch
        if self.device.type != "cuda":
            return most
        micro = self._auto_micro_batch(model_config, most)
        if cfg.measure_gns and cfg.devices == 1 and not gns_split and not cfg.micro_batch_size:
            micro = split_for_gns(local_batch, micro)
        return micro

    def _auto_micro_batch(self, model_config, most: int) -> int:
        """The largest divisor of ``most`` whose activations fit in the GPU's free memory
        (:mod:`cbscore.train.micro_batch`)."""
        free, _ = torch.cuda.mem_get_info(self.device)
        # blocks the caching allocator holds but nothing uses are free for this trial too
        free += torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(self.device)
        # the weights, the averages and the evaluation copy are allocated; fp32 gradients and
        # AdamW's two moments (4 + 8 bytes per parameter) come with the first step
        still_to_come = 12 * self.model.n_params_total
        return choose_micro_batch(most, free - still_to_come,
                                  activation_bytes_per_sequence(model_config, self.config.context_tokens))

    def _compile_and_wrap(self) -> None:
        """DDP (broadcasting rank 0's weights: call it after any checkpoint is loaded), then
        ``torch.compile`` where asked (on CUDA by default; the inductor cache under ``$CBS_HOME``)."""
        cfg = self.config
        # a loaded optimizer state brings the kernel choice of the process that saved it
        for group in self.optimizer.param_groups:
            group.update(self.adamw_kernels)
        train_model, no_sync = self.group.wrap(self.model, self.device)
        if cfg.resolved_compile(self.device.type):
            if not os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
                from cbscore.paths import subdir

                # every shape compiled once per worker host, not once per trial process
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(subdir("inductor"))
            train_model = torch.compile(train_model)
        self.step_fn = StepFn(
            train_model, self.optimizer, self.average, device=self.device,
            micro_batch_size=self.micro, batch_size=cfg.local_batch_size,
            autocast=self.autocast, grad_clip=cfg.grad_clip, no_sync=no_sync, on_resize=self._resized,
            gns=self.gns,
        )

    def _enter_segment(self, seg: Segment) -> None:
        """Before step ``seg.first_step`` (and at the start): the batch size and learning-rate
        multiplier of ``seg`` (:mod:`cbscore.train.batch_plan`). A new batch size gets its own
        micro-batch; the noise-scale probe follows it (or stops where one pass is all a step
        makes, the estimators needing two batch sizes)."""
        cfg, state = self.config, self.state
        self.segment = seg
        self.average.set_step_factor(cfg.ewa_step_factor(seg.batch_size))  # τ^(B/ewa_batch_size) per step
        self.rows = self.group.local_rows(seg.batch_size)  # this rank's (offset, count)
        state.batch_tokens = seg.batch_size * cfg.context_tokens
        local = seg.batch_size // cfg.devices
        if local == self.step_fn.batch_size:
            return
        micro = self._micro_batch(self.model_config, local)
        n_micro = local // micro
        if self.gns is not NO_GNS:
            if n_micro * cfg.devices >= 2:
                self.gns.resize(n_micro, micro)
                self.gns.batch_tokens = float(state.batch_tokens)
            else:
                self.gns.close()
                self.gns = NO_GNS
        self.step_fn.set_batch(local, micro, self.gns)
        self.micro = state.micro_batch_size = micro

    def _resized(self, micro: int) -> None:
        self.micro = self.state.micro_batch_size = micro
        if self.leader:
            self.heldout.cap_chunk(micro)

    # ------------------------------------------------------------------------------ checkpoints
    def _save(self, result: TrialResult | None = None) -> None:
        self.checkpointer.save(self.state, lambda: self.state_dict(result))

    def state_dict(self, result: TrialResult | None = None) -> dict:
        """What a checkpoint (or a snapshot) holds: plain tensors and values only, so that it
        loads with ``weights_only`` and records no class path."""
        return {
            "format": CHECKPOINT_FORMAT,
            "config": self.config.to_dict(),
            "step": self.state.step,
            "tokens": self.state.tokens,  # stream position (a branch's base position is checked on it)
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "average": self.average.state_dict(),
            "rng": rng_state(),
            "eval_history": [e.to_dict() for e in self.state.eval_history],
            "progress": self.progress.to_dict(),
            "gns": self.gns.state_dict(),  # noise-scale averages (None without a probe)
            "result": None if result is None else result.to_dict(),
        }

    def load_state_dict(self, ckpt: dict) -> None:
        """Rank 0 resumes from ``ckpt`` (:meth:`state_dict`)."""
        self.model.load_state_dict(ckpt["model"])
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.average.load_state_dict(ckpt["average"])
        set_rng_state(ckpt["rng"])
        self.gns.load_state_dict(ckpt.get("gns"))
        self.state.step = int(ckpt["step"])
        self.state.resumed_from_step = self.state.step
        self.state.eval_history = [EvalPoint.from_dict(e) for e in ckpt["eval_history"]]
        self.state.last_eval = self.state.eval_history[-1] if self.state.eval_history else None
        self.progress = Progress.from_dict(ckpt["progress"], self.device)
        if self.progress.train_log:
            self.state.train_loss = self.progress.train_log[-1][1]

    def _load_follower(self, ckpt: dict) -> None:
        """Rank > 0 resumes from what rank 0 resumed from: weights and AdamW state (the partial
        log interval in a checkpoint is already the mean over ranks, see ``_mean_interval``)."""
        self.model.load_state_dict(ckpt["model"])
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.state.step = int(ckpt["step"])
        saved = Progress.from_dict(ckpt["progress"], self.device)
        self.progress = Progress(interval_loss=saved.interval_loss, interval_steps=saved.interval_steps)

    def _branch(self) -> None:
        """A branch's first attempt starts from its base; the averages come with it on rank 0 with
        ``branch.branch_ewa = carry`` (with ``reset`` they start fresh at the branch). The data and
        schedule continue at ``branch.branch_tokens`` (``self.plan``)."""
        carry = self.leader and (self.config.branch or NO_BRANCH).branch_ewa == "carry"
        self.checkpointer.branch(self.model, self.optimizer, self.average if carry else None)

    def _mean_interval(self) -> None:
        """Replace every rank's partial log-interval loss by its mean over ranks (before a
        checkpoint: the mean is linear, so a rank that resumes with it and adds its own later
        steps still logs the global mean)."""
        self.progress.interval_loss = self.group.mean(self.progress.interval_loss)

    # ------------------------------------------------------------------------------ evaluation
    def _evaluate(self) -> EvalPoint:
        return self.heldout.point(self.model, self.eval_model, self.average, self.taus,
                                  step=self.state.step, tokens=self.state.tokens)

    # ------------------------------------------------------------------------------ the loop
    def _start(self) -> dict | None:
        """Setup and restore, rank 0 first: the others start theirs when it is done (the token
        store is then prepared once) and told the step it resumed from, or that it ended."""
        if self.leader:
            self._setup()
            ckpt = self.checkpointer.load()
            if ckpt is None:
                self._branch()
            elif ckpt["result"] is None:  # a checkpoint of a trial that ended holds its result only
                self.load_state_dict(ckpt)
            ended = ckpt is not None and ckpt["result"] is not None
            self.group.agree(int(ended), self.state.step)
            return ckpt
        ended, step = self.group.agree(0, 0)
        if ended:
            return {"result": True}
        self._setup()
        if step > 0:
            self._load_follower(self.checkpointer.load_at(step, self.group.rank))
        else:
            self._branch()
        return None

    def run(self) -> TrialResult | None:
        ckpt = self._start()
        if ckpt is not None and ckpt["result"] is not None:  # the trial already ended
            if not self.leader:
                return None
            result = TrialResult.from_dict(ckpt["result"])
            for cb in self.callbacks:
                cb.pre_train(self.state)
            for cb in self.callbacks:
                cb.post_train(self.state, result)
            return result
        self._compile_and_wrap()  # DDP broadcasts rank 0's (restored) weights here
        cfg, state, progress, group, leader = self.config, self.state, self.progress, self.group, self.leader
        for cb in self.callbacks:
            cb.pre_train(state)

        self.checkpointer.last_saved_at = time.monotonic()  # the interval counts from the first step
        self.start_step = state.step
        # (seconds, tokens) of the steps off the throughput clock: this process's first (compilation,
        # the allocator's warm-up) and any redone after an out-of-memory halving (a recompilation)
        self.off_clock = (0.0, 0)
        first = True
        status, reason = None, None
        log_every, ckpt_every = cfg.log_every_steps, cfg.checkpoint_every_steps
        interval_clock, interval_tokens = 0.0, 0
        self._enter_segment(self.plan.segment_at(state.step))
        row_offset, rows = self.rows
        snapshots = [t for t in (cfg.branch or NO_BRANCH).snapshot_tokens if t > state.tokens]  # still to write, in order

        while True:
            # ---- rank 0 decides (evaluation off the throughput clock) ----------------------
            if leader and status is None:
                if state.step == progress.next_eval:
                    t0 = time.perf_counter()
                    point = self._evaluate()
                    state.eval_seconds += time.perf_counter() - t0
                    state.eval_history.append(point)
                    state.last_eval = point
                    before = state.eval_history[-2] if len(state.eval_history) > 1 else None
                    progress.next_eval = self.eval_schedule.next_step(
                        state.step, point.loss, None if before is None else (before.step, before.loss))
                    for cb in self.callbacks:
                        cb.post_eval(state, point)
                    if not (math.isfinite(point.raw_loss) and math.isfinite(point.loss)):
                        status, reason = "diverged", f"non-finite evaluation loss at step {state.step}"
                    elif cfg.target_loss is not None and point.loss <= cfg.target_loss:
                        status = "reached"
                if status is None and state.step >= state.total_steps:
                    status = "censored" if cfg.target_loss is not None else "finished"
                if status is None and state.stop_requested:
                    status, reason = "stopped", state.stop_reason
            # ... and every rank follows (one host broadcast; nothing on one device)
            stop, progress.next_eval = group.agree(int(status is not None), progress.next_eval)
            if stop:
                break

            # ---- one optimizer step (the hot path) ---------------------------------------
            if state.step == self.segment.end_step:  # a batch-size schedule's switch, between steps
                self._enter_segment(self.plan.segment_at(state.step))
                row_offset, rows = self.rows
            t0 = time.perf_counter()
            resizes = self.step_fn.resizes
            # the schedule by stream position (no re-warm-up in a branch), × the segment's multiplier
            state.lr = self.segment.lr_multiplier * self.lr_schedule.lr_at_tokens(state.tokens)
            # this rank's rows of the global batch: windows from the step's stream position + offset
            batch = self.stream.windows(self.plan.first_sequence(state.step) + row_offset, rows)  # (B/k, T + 1)
            loss, grad_norm = self.step_fn(batch, state.lr)
            progress.interval_loss += loss
            progress.interval_steps += 1
            state.step += 1

            # log steps (and the step before an evaluation) and checkpoint steps stop the clock
            # with the device's work done, so that none of it is timed as evaluation or I/O
            is_log = state.step % log_every == 0 or state.step == progress.next_eval
            is_ckpt = ckpt_every is not None and state.step % ckpt_every == 0
            untimed = first or self.step_fn.resizes != resizes
            if is_log or is_ckpt or untimed:
                self.sync()
            dt = time.perf_counter() - t0
            state.train_seconds += dt
            state.last_step_at = time.time()
            if untimed:
                self.off_clock = (self.off_clock[0] + dt, self.off_clock[1] + state.batch_tokens)
            else:
                interval_clock += dt
                interval_tokens += state.batch_tokens
            first = False

            metrics = None
            if is_log:
                # the mean over ranks of each rank's sum over the interval: the global batch's
                mean_loss = group.mean(progress.interval_loss).item() / progress.interval_steps  # host sync
                norm = grad_norm.item()  # host sync; the gradient is already averaged over ranks
                self.gns.sync()  # host sync of the steps' gradient norms since the last log step
                progress.train_log.append((state.step, mean_loss))
                progress.interval_loss.zero_()
                progress.interval_steps = 0
                state.train_loss = mean_loss
                state.tokens_per_s = interval_tokens / interval_clock if interval_clock > 0 else None
                state.tokens_per_s_per_device = None if state.tokens_per_s is None else state.tokens_per_s / cfg.devices
                state.mfu = mfu(state.tokens_per_s_per_device, state.flops_per_token, self.peak)
                interval_clock, interval_tokens = 0.0, 0
                metrics = {
                    "step": state.step, "tokens": state.tokens, "train_loss": mean_loss, "lr": state.lr,
                    "grad_norm": norm, "tokens_per_s": state.tokens_per_s,
                    "tokens_per_s_per_device": state.tokens_per_s_per_device, "mfu": state.mfu,
                    # the noise scale (empty without a probe): every log step, and so at every
                    # evaluation step too, which max_eval_fraction can space far apart
                    **self.gns.metrics(),
                }
                if not math.isfinite(mean_loss):
                    status, reason = "diverged", f"non-finite train loss at step {state.step}"
                elif state.step > state.warmup_steps and mean_loss > cfg.divergence_factor * progress.running_min:
                    status, reason = "diverged", (
                        f"train loss {mean_loss:.4g} at step {state.step} is above {cfg.divergence_factor:g}× "
                        f"its running minimum {progress.running_min:.4g}"
                    )
                progress.running_min = min(progress.running_min, mean_loss)
            if is_ckpt:
                self._mean_interval()  # every rank: the checkpoint carries the global partial interval
            if not leader:
                continue
            if snapshots and state.tokens == snapshots[0]:  # kept for branches (write once)
                save_snapshot(cfg.branch.snapshot_dir, snapshots.pop(0), self.state_dict())
            for cb in self.callbacks:
                cb.post_step(state, metrics)
            if status is None and self.checkpointer.due(is_ckpt_step=is_ckpt, is_log_step=is_log):
                self._save()

        self._mean_interval()  # every rank: a stopped trial's checkpoint carries the global interval
        if not leader:
            return None
        return self._finish(status, reason)

    def _finish(self, status: str, reason: str | None) -> TrialResult:
        result = self.result(status, reason)
        # A stopped trial keeps a resumable checkpoint; an ended one records its result.
        self._save(None if status == "stopped" else result)
        for cb in self.callbacks:
            cb.post_train(self.state, result)
        return result

    def result(self, status: str, reason: str | None) -> TrialResult:
        """The result of a loop that ended with ``status``: the crossing read off the evaluations,
        the throughput of this process's own steps (a resumed trial's counted from
        ``start_step``) with the ``off_clock`` ``(seconds, tokens)`` left out, and the losses a
        report shows."""
        cfg, state, plan, history = self.config, self.state, self.plan, self.state.eval_history
        steps_to_target = target_tau = None
        if status == "reached":
            steps_to_target = first_crossing([e.step for e in history], [e.loss for e in history], cfg.target_loss)
            target_tau = crossing_tau(history, cfg.target_loss)
        trained_tokens = plan.tokens_at(state.step) - plan.tokens_at(self.start_step)
        off_seconds, off_tokens = self.off_clock
        tokens_per_s = None
        if trained_tokens > 0 and state.train_seconds > 0:
            tokens_per_s = trained_tokens / state.train_seconds
            if trained_tokens > off_tokens and state.train_seconds > off_seconds:
                tokens_per_s = (trained_tokens - off_tokens) / (state.train_seconds - off_seconds)
        finite = [e.loss for e in history if math.isfinite(e.loss)]
        return TrialResult(
            status=status,
            stop_reason=reason,
            target_loss=cfg.target_loss,
            steps_to_target=steps_to_target,
            # tokens this run trained up to the crossing (a branch's base tokens not counted)
            tokens_to_target=None if steps_to_target is None else plan.tokens_at(steps_to_target) - plan.start_tokens,
            final_eval_loss=finite_or_none(history[-1].loss) if history else None,
            best_eval_loss=min(finite) if finite else None,
            final_raw_loss=finite_or_none(history[-1].raw_loss) if history else None,
            steps=state.step,
            tokens=state.tokens,
            total_steps=state.total_steps,
            warmup_steps=state.warmup_steps,
            beta2=self.beta2,
            ewa_taus=self.taus,
            tokens_per_s=tokens_per_s,
            mfu=mfu(None if tokens_per_s is None else tokens_per_s / cfg.devices, state.flops_per_token, self.peak),
            n_params=state.n_params,
            flops_per_token=state.flops_per_token,
            train_seconds=state.train_seconds,
            eval_seconds=state.eval_seconds,
            peak_memory_bytes=peak_memory_bytes(self.device),
            device=state.device,
            resumed_from_step=state.resumed_from_step,
            devices=cfg.devices,
            micro_batch_size=self.micro,
            target_tau=target_tau,
            eval_history=tuple(history),
            train_log=tuple(self.progress.train_log),
        )
