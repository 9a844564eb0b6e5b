"""``cbs slurm``: workers as SLURM jobs (issue 44). The script's tests run anywhere; the others run
against a real one-node SLURM cluster (:mod:`tests.workers.slurm_cluster`: slurmctld, slurmd and
munged started by the test) and skip with the reason where SLURM is not installed."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from cbs import main as cbs_main
from tests.workers.conftest import CBS, ROOT, tiny_spec, wait_for
from tests.workers.slurm_cluster import slurm, slurm_cluster  # noqa: F401 (fixtures)
from tests.workers.test_worker_process import postgres_env, redis_env  # noqa: F401 (fixtures)
from workers.infra.settings import WorkerSettings
from workers.query import api
from workers.tracking import Tracker

CPU = ["--gpus", "0", "--cpus-per-task", "1"]
#: The tests on the cluster run in one pytest-xdist process: one cluster, and its two cores, at a time.
on_the_cluster = pytest.mark.xdist_group("slurm")


def cbs(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = cbs_main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def saved_scripts(home: str) -> list[Path]:
    return sorted((Path(home) / "slurm").glob("*.sbatch"))


def job_log(home: str, job_id: str) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted((Path(home) / "slurm" / "logs").glob(f"*-{job_id}_*.out")))


# ---------------------------------------------------------------------------- the script (no SLURM needed)
def test_dry_run_prints_the_asked_partition_time_and_signal_and_submits_nothing(worker_env, capsys, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")  # an sbatch call would fail the command
    rc, out, _ = cbs(capsys, "slurm", "submit", "--count", "3", "--partition", "gpu-long", "--account", "lab42",
                     "--time", "2-00:00:00", "--signal-before", "240", "--mem", "32G", "--cpus-per-task", "8",
                     "--requeue", "--sbatch-option=--qos=high", "--sbatch-option=--constraint=a100|h100", "--dry-run")
    assert rc == 0
    lines = out.splitlines()
    assert lines[0] == "#!/bin/bash"
    for line in ("#SBATCH --array=0-2", "#SBATCH --gres=gpu:1", "#SBATCH --partition=gpu-long",
                 "#SBATCH --account=lab42", "#SBATCH --time=2-00:00:00", "#SBATCH --signal=B:USR1@240",
                 "#SBATCH --mem=32G", "#SBATCH --cpus-per-task=8", "#SBATCH --requeue", "#SBATCH --qos=high",
                 f"export CBS_HOME={worker_env['CBS_HOME']}", f"export CBS_TRACKING_URI={worker_env['CBS_TRACKING_URI']}",
                 "trap 'warm_shutdown USR1' USR1", "trap 'warm_shutdown TERM' TERM"):
        assert line in lines, line
    # one worker, one trial at a time, on the GPU SLURM granted this task
    [command] = [x for x in lines if " worker " in x and x.endswith("&")]
    assert command.endswith('cbs worker --gpu "$CUDA_VISIBLE_DEVICES" --concurrency 1 &')
    assert saved_scripts(worker_env["CBS_HOME"]) == []


def test_cpu_mode_asks_for_no_gpu_and_runs_a_cpu_worker(worker_env, capsys):
    rc, out, err = cbs(capsys, "slurm", "submit", "--count", "2", *CPU, "--time", "30", "--signal", "TERM",
                     "--signal-before", "60", "--dry-run")
    assert rc == 0
    assert "--gres" not in out and "CUDA_VISIBLE_DEVICES:?" not in out
    assert "#SBATCH --signal=B:TERM@60" in out.splitlines() and "#SBATCH --no-requeue" in out.splitlines()
    assert [x for x in out.splitlines() if x.endswith("worker --concurrency 1 &")]
    # this lab's stores are for one host: said on standard error, the script on standard output
    assert "note: the broker is the filesystem folder $CBS_HOME/broker" in err
    assert "CBS_TRACKING_URI, CBS_OPTUNA_STORAGE, CBS_LEDGER_URL are SQLite: on a cluster use PostgreSQL" in err


def test_a_requeue_job_puts_itself_back_in_the_queue_only_when_slurm_preempted_it(worker_env, capsys, tmp_path):
    """The script's tail, run by bash with a fake ``scontrol``: a running job whose PreemptTime SLURM
    set asks ``scontrol requeue`` for itself after its worker's warm shutdown; one signalled at its time
    limit (PreemptTime=None) does not, nor one that SLURM is cancelling or requeueing already (a cancel
    during the grace time stays a cancel); without ``--requeue`` the script never asks."""
    import subprocess

    rc, out, _ = cbs(capsys, "slurm", "submit", "--count", "1", *CPU, "--requeue", "--dry-run")
    assert rc == 0 and "#SBATCH --requeue" in out.splitlines() and "#SBATCH --open-mode=append" in out.splitlines()
    tail = out.split('echo "cbs slurm: worker pid $worker exited with status $status"\n', 1)[1]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "scontrol"
    fake.write_text('#!/bin/bash\nif [ "$1" = show ]; then echo "JobId=77 JobName=cbs-worker"; '
                    'echo "   JobState=$STATE Reason=None Dependency=(null)"; '
                    'echo "   PreemptEligibleTime=x PreemptTime=$PREEMPT_TIME"; '
                    'else echo "scontrol $*" >> "$CALLS"; fi\n')
    fake.chmod(0o755)
    for state, preempt_time, asked in (("RUNNING", "2026-12-05T02:42:13", ["scontrol requeue 77"]),
                                       ("RUNNING", "None", []), ("CANCELLED", "2026-12-05T02:42:13", []),
                                       ("COMPLETING", "2026-12-05T02:42:13", [])):
        calls = tmp_path / f"calls-{state}-{preempt_time}"
        calls.touch()
        done = subprocess.run(["bash", "-c", "status=0\n" + tail], capture_output=True, text=True, timeout=30,
                              env={"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "77", "STATE": state,
                                   "PREEMPT_TIME": preempt_time, "CALLS": str(calls)})
        assert done.returncode == 0 and calls.read_text().splitlines() == asked, (state, done.stdout + done.stderr)
    rc, out, _ = cbs(capsys, "slurm", "submit", "--count", "1", *CPU, "--dry-run")
    assert "#SBATCH --no-requeue" in out.splitlines() and "scontrol requeue" not in out


def test_a_worker_of_several_gpus_trains_one_trial_on_all_of_them(worker_env, capsys):
    rc, out, _ = cbs(capsys, "slurm", "submit", "--count", "1", "--gpus", "2", "--dry-run")
    assert rc == 0 and "#SBATCH --gres=gpu:2" in out.splitlines()
    [command] = [x for x in out.splitlines() if x.endswith("&")]
    assert command.endswith('cbs worker --gpus "$CUDA_VISIBLE_DEVICES" --devices-per-trial 2 --concurrency 1 &')


def test_a_password_in_a_url_is_never_written_into_the_script(worker_env, capsys, monkeypatch):
    monkeypatch.setenv("CBS_BROKER_URL", "redis://:s3cret-pw@10.0.0.5:6379/0")
    monkeypatch.setenv("CBS_CHECKPOINT_DIR", "/shared/cbs/checkpoints")
    rc, out, _ = cbs(capsys, "slurm", "submit", "--count", "1", "--dry-run")
    assert rc == 0 and "s3cret-pw" not in out
    assert ': "${CBS_BROKER_URL:?CBS_BROKER_URL must be set in the environment of sbatch}"' in out.splitlines()
    assert "export CBS_CHECKPOINT_DIR=/shared/cbs/checkpoints" in out.splitlines()


@pytest.mark.parametrize("argv, message", [
    (["--count", "0"], "--count: must be a positive integer, but got 0."),
    (["--count", "-2"], "--count: must be a positive integer, but got -2."),
    (["--count", "2", "--gpus", "-1"], "--gpus: must be a non-negative integer, but got -1."),
    (["--count", "2", "--time", "1h"], "--time: must be a SLURM time limit: MINUTES, MM:SS, HH:MM:SS or D-HH:MM:SS, "
                                       "but got '1h'."),
    (["--count", "2", "--time", "5", "--signal-before", "300"],
     "--signal-before: must be shorter than the time limit --time=5 (300 s), but got 300."),
    (["--count", "2", "--sbatch-option=qos=high"], "--sbatch-option: must be one sbatch option, --name or "
                                                   "--name=value, without spaces, quotes, backslashes or #, but got "
                                                   "'qos=high'."),
    (["--count", "2", "--sbatch-option=--qos=high --hold"], "but got '--qos=high --hold'."),
    (["--count", "2", "--sbatch-option=--array=0-99"], "--sbatch-option: sets --array, which cbs slurm writes itself"),
    (["--count", "2", "--partition", "gpu long"], "--partition: must be a SLURM name (letters, digits and _.,+-), "
                                                  "but got 'gpu long'."),
    (["--count", "2", "--mem", "lots"], "--mem: must be SLURM's memory size: an integer with K, M, G or T, but got 'lots'."),
])
def test_bad_input_is_refused_naming_the_field_and_the_value_and_nothing_is_submitted(worker_env, capsys, argv,
                                                                                       message):
    rc, out, err = cbs(capsys, "slurm", "submit", *argv)  # not a dry run: it would submit
    assert rc == 2 and message in err and out == ""
    assert saved_scripts(worker_env["CBS_HOME"]) == []


# ---------------------------------------------------------------------------- a real SLURM cluster
@on_the_cluster
def test_a_submitted_array_of_two_cpu_workers_shows_in_squeue_and_status_and_cancel_ends_it(worker_env, slurm,
                                                                                           capsys):
    rc, out, _ = cbs(capsys, "slurm", "submit", "--count", "2", *CPU, "--time", "10", "--job-name", "cbs-two")
    assert rc == 0
    job_id = out.split("job array ")[1].split()[0]
    [script] = saved_scripts(worker_env["CBS_HOME"])
    assert f"(script {script})" in out and "#SBATCH --array=0-1" in script.read_text()
    running = wait_for(lambda: [j for j in slurm.jobs() if j.endswith("RUNNING")] if len(
        [j for j in slurm.jobs() if j.endswith("RUNNING")]) == 2 else None, 30, what=lambda: f"two running tasks: {slurm.jobs()}")
    assert sorted(j.split()[0] for j in running) == [f"{job_id}_0", f"{job_id}_1"]
    # both workers start and beat in the lab's ledger: the script's settings reached them
    wait_for(lambda: len(api.alive_workers()) == 2, 60, every_s=1,
             what=lambda: "two workers alive in the ledger\n" + job_log(worker_env["CBS_HOME"], job_id)[-3000:])
    rc, out, _ = cbs(capsys, "slurm", "status", "--job-name", "cbs-two")
    assert rc == 0 and "2 worker task(s) named 'cbs-two' queued or running" in out
    assert f"{job_id}_0" in out and f"{job_id}_1" in out and out.count("RUNNING") == 2
    rc, out, _ = cbs(capsys, "slurm", "cancel", "--job-name", "cbs-two")
    assert rc == 0
    # 6-7 s here; once (stop 49) a worker's warm shutdown hung after its idle pool child died of the
    # SIGTERM, until SLURM's SIGKILL KillWait (60 s) later
    wait_for(lambda: not [j for j in slurm.jobs() if j.split()[0].startswith(job_id)], 90,
             what=lambda: f"the cancelled tasks to leave squeue: {slurm.jobs()}")
    rc, out, _ = cbs(capsys, "slurm", "status", "--job-name", "cbs-two")
    assert "0 worker task(s)" in out
    log = job_log(worker_env["CBS_HOME"], job_id)
    assert log.count("cbs slurm: SIGTERM received") == 2  # each batch shell passed the cancel on to its worker
    wait_for(lambda: api.alive_workers() == [], 15, what="the workers to leave the ledger")


@on_the_cluster
@pytest.mark.parametrize("how", ["time-limit-signal", "cancel"])
def test_a_worker_signalled_or_cancelled_mid_trial_shuts_down_warm_and_gives_its_trial_back(worker_env, slurm, capsys,
                                                                                            token_store, how):
    """``time-limit-signal``: what SLURM does at ``--signal=B:USR1@S`` (USR1 to the batch shell), sent
    at once with ``scancel --signal=USR1 --batch``. ``cancel``: ``cbs slurm cancel``, what a preemption
    does too (SIGTERM to every process of the job, the trial's child included, then SIGKILL after
    KillWait). Either way the worker stops its trial at a checkpoint, the same attempt goes back to
    the queue, and the job ends with the worker's status 0."""
    name = f"slurm-{how}"
    api.launch_study(tiny_spec(name, batch_sizes=[8], settings=[{"model": "tiny-0.1M", "tokens": 200_000}]))
    rc, out, _ = cbs(capsys, "slurm", "submit", "--count", "1", *CPU, "--time", "10", "--job-name", "cbs-warm")
    assert rc == 0
    job_id = out.split("job array ")[1].split()[0]
    tracker = Tracker(WorkerSettings.from_env().tracking_uri)
    [record] = api.study_records(name)
    wait_for(lambda: tracker.get_run(record.run_id).data.metrics.get("progress/step", 0) >= 20, 90, every_s=1,
             what=lambda: "the trial to pass step 20\n" + job_log(worker_env["CBS_HOME"], job_id)[-3000:])
    if how == "cancel":
        assert cbs(capsys, "slurm", "cancel", "--job-name", "cbs-warm")[0] == 0
    else:
        slurm.run("scancel", "--signal=USR1", "--batch", f"{job_id}_0")
    wait_for(lambda: not [j for j in slurm.jobs() if j.split()[0].startswith(job_id)], 75,
             what=lambda: f"the job to end: {slurm.jobs()}\n" + job_log(worker_env["CBS_HOME"], job_id)[-3000:])
    log = job_log(worker_env["CBS_HOME"], job_id)
    assert f"cbs slurm: SIG{'TERM' if how == 'cancel' else 'USR1'} received" in log
    assert "Warm shutdown" in log  # Celery's own line: the worker's warm-shutdown path ran
    if how != "cancel":  # a cancel signals the batch shell too; its closing line was missing once in CI (stop 38)
        assert "exited with status 0" in log
    [queued] = api.study_records(name)
    run = tracker.get_run(record.run_id)
    # no attempt spent
    assert (queued.status, queued.attempt, run.info.status) == ("queued", 1, "SCHEDULED"), log[-4000:]
    # (once in CI, 6 December 2026, the run was queued at attempt 1 without this tag: the message shows what it had)
    assert "interrupted_at_step" in run.data.tags, ({k: v for k, v in run.data.tags.items() if not k.startswith("mlflow.")},
                                                    log[-4000:])
    assert 20 <= int(run.data.tags["interrupted_at_step"]) < 1953  # stopped at a checkpoint mid-way
    state = slurm.run("scontrol", "show", "job", job_id)
    assert ("JobState=CANCELLED" if how == "cancel" else "JobState=COMPLETED") in state
    if how != "cancel":
        assert "ExitCode=0:0" in state


@pytest.mark.slow
@on_the_cluster
def test_a_preempted_worker_job_is_requeued_and_resumes_its_trial_to_the_undisturbed_result(worker_env, slurm, capsys,
                                                                                          processes, token_store):
    """A real preemption: a worker job on the test cluster's ``spot`` partition (PriorityTier 1,
    PreemptMode=REQUEUE, GraceTime 30 s) submitted with ``--requeue``, and a job of the ``urgent``
    partition (PriorityTier 10) that needs the whole node. SLURM preempts the worker job (SIGTERM to
    every process of it), the worker gives its trial back at a checkpoint without spending the
    attempt, SLURM puts the same job back in its queue and starts it again once the urgent job is
    done, and that job's worker resumes the trial from its checkpoint: the trial ends at attempt 1
    with the steps table and the history steps of an undisturbed run of the same spec."""
    from tests.workers.slurm_cluster import SPOT, URGENT
    from tests.workers.test_two_hosts import table
    from tests.workers.test_worker_process import no_run_left_running, study_done

    spec = dict(batch_sizes=[8], settings=[{"model": "tiny-0.1M", "tokens": 60_000}], reuse_trials=False)
    calm_worker = processes.worker()
    api.launch_study(tiny_spec("calm", **spec))
    wait_for(lambda: study_done("calm"), 120, every_s=1, what=lambda: "the calm study\n" + processes.log(calm_worker))
    processes.kill(calm_worker)

    name = "preempted"
    api.launch_study(tiny_spec(name, **spec))
    rc, out, _ = cbs(capsys, "slurm", "submit", "--count", "1", *CPU, "--time", "10", "--partition", SPOT,
                     "--requeue", "--job-name", "cbs-spot")
    assert rc == 0
    job_id = out.split("job array ")[1].split()[0]
    tracker = Tracker(WorkerSettings.from_env().tracking_uri)
    [record] = api.study_records(name)
    wait_for(lambda: tracker.get_run(record.run_id).data.metrics.get("progress/step", 0) >= 20, 90, every_s=0.5,
             what=lambda: "the trial to pass step 20\n" + job_log(worker_env["CBS_HOME"], job_id)[-3000:])
    urgent = slurm.run("sbatch", "--parsable", f"--partition={URGENT}", "--exclusive", "--job-name=urgent",
                       "--output=/dev/null", "--wrap", "sleep 2").strip()
    wait_for(lambda: "was preempted" in job_log(worker_env["CBS_HOME"], job_id), 60, every_s=0.5,
             what=lambda: f"the worker job to be preempted: {slurm.jobs()}\n"
             + job_log(worker_env["CBS_HOME"], job_id)[-3000:])
    wait_for(lambda: study_done(name), 180, every_s=1,
             what=lambda: f"the requeued job to finish the trial: {slurm.jobs()}\n"
             + job_log(worker_env["CBS_HOME"], job_id)[-3000:])
    log = job_log(worker_env["CBS_HOME"], job_id)
    # the preemption's signal (the job's --signal, at once: preempt_send_user_signal), the warm
    # shutdown, then the job back in SLURM's queue; the same job started again
    preempted, again = log.split("(restart 1)", 1)
    assert "cbs slurm: SIGUSR1 received" in preempted and "Warm shutdown" in preempted
    assert "exited with status 0" in preempted and "was preempted (PreemptTime=" in preempted
    assert "succeeded in" in again  # Celery's line: the requeued job's worker ran the trial to the end
    state = slurm.run("scontrol", "show", "job", f"{job_id}_0")
    assert "Restarts=1" in state and "Partition=spot" in state
    assert "JobState=COMPLETED" in slurm.run("scontrol", "show", "job", urgent)
    # given back, not lost: the attempt was not spent, and the trial resumed where it stopped
    [record] = api.study_records(name)
    run = tracker.get_run(record.run_id)
    assert (record.status, record.attempt, run.info.status) == ("finished", 1, "FINISHED")
    stopped_at = int(run.data.tags["interrupted_at_step"])
    assert 20 <= stopped_at < 585 and int(run.data.tags["resumed_from_step"]) == stopped_at
    assert table(name) == table("calm")
    [twin] = api.study_records("calm")
    raw = [m.step for m in tracker.client.get_metric_history(record.run_id, "train/loss")]
    assert sorted(raw) == sorted(m.step for m in tracker.client.get_metric_history(twin.run_id, "train/loss"))
    no_run_left_running(name)


@pytest.mark.slow
@on_the_cluster
def test_without_a_signal_at_the_preemption_slurm_requeues_the_job_after_its_grace_time_and_the_trial_resumes(
        worker_env, slurm, capsys, token_store):
    """SLURM's default (no ``preempt_send_user_signal``; here with ``GraceTime=5``): the batch job hears
    nothing during the grace time and its trial keeps training; then SIGTERM to every process, the
    warm shutdown within KillWait, and SLURM requeues the job itself (once: the script's own
    ``scontrol requeue`` adds no second restart). The restarted job resumes the trial at the step it
    stopped, at attempt 1, every train-loss step logged once and none missing."""
    from tests.workers.slurm_cluster import GRACE_S, SPOT, URGENT
    from tests.workers.test_worker_process import no_run_left_running, study_done

    conf = slurm.conf.read_text()
    slurm.conf.write_text(conf.replace("SlurmctldParameters=preempt_send_user_signal\n", "")
                          .replace(f"GraceTime={GRACE_S}", "GraceTime=5"))
    slurm.run("scontrol", "reconfigure")
    try:
        assert "preempt_send_user_signal" not in slurm.run("scontrol", "show", "config")
        name = "preempted-late"
        # 2,500 steps of tiny-0.8M: longer than the grace time and SLURM's check of it (every 30 s)
        api.launch_study(tiny_spec(name, batch_sizes=[8], settings=[{"model": "tiny-0.8M", "tokens": 256_000}]))
        rc, out, _ = cbs(capsys, "slurm", "submit", "--count", "1", *CPU, "--time", "10", "--partition", SPOT,
                         "--requeue", "--job-name", "cbs-late")
        job_id = out.split("job array ")[1].split()[0]
        tracker = Tracker(WorkerSettings.from_env().tracking_uri)
        [record] = api.study_records(name)
        wait_for(lambda: tracker.get_run(record.run_id).data.metrics.get("progress/step", 0) >= 20, 90, every_s=0.5,
                 what=lambda: "the trial to pass step 20\n" + job_log(worker_env["CBS_HOME"], job_id)[-3000:])
        slurm.run("sbatch", f"--partition={URGENT}", "--exclusive", "--job-name=urgent", "--output=/dev/null",
                  "--wrap", "sleep 2")
        wait_for(lambda: study_done(name), 300, every_s=1,
                 what=lambda: f"the requeued job to finish the trial: {slurm.jobs()}\n"
                 + job_log(worker_env["CBS_HOME"], job_id)[-3000:])
        preempted, again = job_log(worker_env["CBS_HOME"], job_id).split("(restart 1)", 1)
        assert "DUE TO PREEMPTION" in preempted and "cbs slurm: SIGTERM received" in preempted
        assert "SIGUSR1" not in preempted and "Warm shutdown" in preempted and "exited with status 0" in preempted
        assert "succeeded in" in again and "(restart 2)" not in again
        assert "Restarts=1" in slurm.run("scontrol", "show", "job", f"{job_id}_0")
        [record] = api.study_records(name)
        run = tracker.get_run(record.run_id)
        assert (record.status, record.attempt, run.info.status) == ("finished", 1, "FINISHED")
        stopped_at = int(run.data.tags["interrupted_at_step"])
        assert 20 <= stopped_at < 2500 and int(run.data.tags["resumed_from_step"]) == stopped_at
        raw = [m.step for m in tracker.client.get_metric_history(record.run_id, "train/loss")]
        steps, _ = tracker.history(run, "train/loss")
        assert sorted(raw) == sorted(set(raw)) and len(raw) == len(steps)  # each step once across the two runs
        every = int(run.data.params.get("log_every_steps", 10))
        assert set(range(every, 2500, every)) <= set(steps) and steps[-1] == 2500  # 1.25 · 256k / (8·16)
        no_run_left_running(name)
    finally:
        slurm.conf.write_text(conf)
        slurm.run("scontrol", "reconfigure")


@on_the_cluster
def test_submit_says_what_a_preemptible_partition_means_for_its_workers(worker_env, slurm, capsys):
    """Read off ``scontrol``: ``spot`` requeues preempted jobs, so a submit there without ``--requeue``
    is told to pass it; with it, how a preempted worker hears of it; ``debug`` (PreemptMode=OFF) and
    ``urgent`` say nothing of preemption."""
    from tests.workers.slurm_cluster import GRACE_S, SPOT, URGENT

    _, _, err = cbs(capsys, "slurm", "submit", "--count", "1", *CPU, "--partition", SPOT, "--dry-run")
    assert f"note: partition {SPOT} preempts by requeueing (PreemptMode=REQUEUE): pass --requeue" in err
    _, _, err = cbs(capsys, "slurm", "submit", "--count", "1", *CPU, "--partition", SPOT, "--requeue", "--dry-run")
    assert "pass --requeue" not in err
    assert (f"note: partition {SPOT} is preemptible: a preempted worker gets --signal=USR1 at the preemption and "
            f"GraceTime={GRACE_S} s to stop") in err
    for partition in (None, URGENT):
        _, _, err = cbs(capsys, "slurm", "submit", "--count", "1", *CPU, "--requeue", "--dry-run",
                        *(["--partition", partition] if partition else []))
        assert "preempt" not in err.replace("PreemptMode=OFF", "")
    assert saved_scripts(worker_env["CBS_HOME"]) == []


@on_the_cluster
def test_keep_submits_workers_up_to_the_count_while_a_study_has_trials_and_stops_when_it_is_done(worker_env, slurm,
                                                                                              capsys, token_store):
    """Held jobs (``--hold``) stay PENDING and use no CPU: they count as workers all the same. When
    the studies are done, keep cancels its idle tasks unless another running study still has trials
    (or ``--leave-workers``)."""
    name = "slurm-keep"
    api.launch_study(tiny_spec(name))
    keep = ["slurm", "keep", "--count", "2", *CPU, "--time", "10", "--job-name", "cbs-keep",
            "--sbatch-option=--hold", "--study", name]
    rc, out, _ = cbs(capsys, *keep, "--once")
    assert rc == 0 and "0 of 2 worker(s) in SLURM's queue for slurm-keep: submitted 2 more" in out
    assert len(slurm.jobs()) == 2
    rc, out, _ = cbs(capsys, *keep, "--once")  # never more than asked
    assert "2 worker(s) in SLURM's queue, 2 wanted" in out and len(slurm.jobs()) == 2
    slurm.run("scancel", f"{slurm.jobs()[0].split()[0]}")  # one task lost: the next pass replaces it
    wait_for(lambda: len(slurm.jobs()) == 1, 15, what=lambda: f"one task left: {slurm.jobs()}")
    rc, out, _ = cbs(capsys, *keep, "--once")
    assert "1 of 2 worker(s) in SLURM's queue for slurm-keep: submitted 1 more" in out and len(slurm.jobs()) == 2
    other = "slurm-keep-other"  # a running study with queued trials: the workers may be serving it
    api.launch_study(tiny_spec(other))
    api.cancel_study(name)
    rc, out, _ = cbs(capsys, *keep, "--period", "0.1")  # no --once: it ends by itself
    assert rc == 0 and "cbs slurm keep: no study left to run (slurm-keep): stopping" in out
    assert f"workers 'cbs-keep' left running: {other} still has trials" in out and len(slurm.jobs()) == 2
    api.cancel_study(other)
    rc, out, _ = cbs(capsys, *keep, "--period", "0.1", "--leave-workers")
    assert rc == 0 and "stopping" in out and "cancelled" not in out and len(slurm.jobs()) == 2
    rc, out, _ = cbs(capsys, *keep, "--period", "0.1")  # idle workers released: none would hold its node
    assert "cbs slurm keep: cancelled 2 idle worker task(s) 'cbs-keep'" in out
    wait_for(lambda: slurm.jobs() == [], 15, what=lambda: f"the idle tasks to leave squeue: {slurm.jobs()}")


@on_the_cluster
def test_keep_waits_out_an_unreachable_controller_and_submits_nothing_meanwhile(worker_env, slurm, capsys,
                                                                               token_store, tmp_path, monkeypatch):
    """The controller away (here: a copy of the cluster's configuration with a port nobody listens
    on): keep's pass says so and submits nothing, since it cannot count the live tasks."""
    import re

    from tests.workers.slurm_cluster import _free_port

    api.launch_study(tiny_spec("slurm-away"))
    away = tmp_path / "away.conf"
    away.write_text(re.sub(r"SlurmctldPort=\d+", f"SlurmctldPort={_free_port()}", slurm.conf.read_text()))
    monkeypatch.setenv("SLURM_CONF", str(away))
    rc, out, _ = cbs(capsys, "slurm", "keep", "--count", "2", *CPU, "--time", "10", "--study", "slurm-away", "--once")
    assert rc == 0 and "cbs slurm keep: SLURM's controller is unreachable (squeue failed (exit 1): " in out
    assert "Unable to contact slurm controller" in out and "submitted" not in out
    assert slurm.jobs() == [] and saved_scripts(worker_env["CBS_HOME"]) == []


def test_without_slurm_the_commands_say_what_is_missing(worker_env, capsys, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    rc, _, err = cbs(capsys, "slurm", "status")
    assert rc == 2 and "squeue is not installed here: cbs slurm runs on a SLURM login node" in err
    rc, _, err = cbs(capsys, "slurm", "submit", "--count", "1", *CPU)
    assert rc == 2 and "sbatch is not installed here" in err


def test_cancel_of_a_job_id_that_is_not_one_is_refused(worker_env, capsys):
    rc, _, err = cbs(capsys, "slurm", "cancel", "--job", "12;rm")
    assert rc == 2 and "--job: must be a SLURM job id (123 or 123_4), but got '12;rm'." in err


@pytest.mark.slow
@on_the_cluster
def test_a_worker_at_its_time_limit_gives_its_trial_back_and_the_next_job_resumes_it_without_a_gap(
        worker_env, slurm, capsys, processes, token_store):
    """A one-minute job with ``--signal-before 50``: SLURM signals the batch shell (its timer checks
    every few tens of seconds), the worker shuts down warm before the limit, and ``cbs slurm keep``
    submits the next job, whose worker resumes the trial at the step it stopped: every train-loss
    step logged once, none missing, and the study ends with no run left RUNNING."""
    from tests.workers.test_worker_process import no_run_left_running, study_done

    name = "slurm-limit"
    api.launch_study(tiny_spec(name, batch_sizes=[8], settings=[{"model": "tiny-0.3M", "tokens": 200_000}]))
    rc, out, _ = cbs(capsys, "slurm", "submit", "--count", "1", *CPU, "--time", "1", "--signal-before", "50",
                     "--job-name", "cbs-limit")
    job_id = out.split("job array ")[1].split()[0]
    tracker = Tracker(WorkerSettings.from_env().tracking_uri)
    [record] = api.study_records(name)
    wait_for(lambda: not [j for j in slurm.jobs() if j.split()[0].startswith(job_id)], 120, every_s=1,
             what=lambda: f"the job to end: {slurm.jobs()}\n" + job_log(worker_env["CBS_HOME"], job_id)[-3000:])
    log = job_log(worker_env["CBS_HOME"], job_id)
    assert "cbs slurm: SIGUSR1 received" in log and "Warm shutdown" in log and "exited with status 0" in log
    assert "JobState=COMPLETED" in slurm.run("scontrol", "show", "job", job_id)  # ended before the limit
    [queued] = api.study_records(name)
    assert (queued.status, queued.attempt) == ("queued", 1)
    stopped_at = int(tracker.get_run(record.run_id).data.tags["interrupted_at_step"])
    keeper = processes.start([CBS, "slurm", "keep", "--count", "1", *CPU, "--time", "10", "--job-name", "cbs-limit",
                              "--study", name, "--period", "2"], "keep")
    wait_for(lambda: study_done(name), 240, every_s=2, what=lambda: "the resumed trial to finish\n"
             + processes.log(keeper)[-2000:])
    assert keeper.wait(timeout=30) == 0 and "no study left to run (slurm-limit): stopping" in processes.log(keeper)
    [record] = api.study_records(name)
    run = tracker.get_run(record.run_id)
    assert (record.status, record.attempt, run.info.status) == ("finished", 1, "FINISHED")
    assert int(run.data.tags["resumed_from_step"]) == stopped_at
    raw = [m.step for m in tracker.client.get_metric_history(record.run_id, "train/loss")]
    steps, _ = tracker.history(run, "train/loss")
    assert sorted(raw) == sorted(set(raw)) and len(raw) == len(steps)  # each step once across the two jobs
    every = int(run.data.params.get("log_every_steps", 10))
    assert set(range(every, 1953, every)) <= set(steps)  # no log step missing, before or after the stop
    assert steps[-1] == 1953  # one curve, to the reference budget 1.25 · 200k / (8·16)
    no_run_left_running(name)


def slurm_section_commands() -> list[str]:
    """The command lines of docs/operating.md's "SLURM" section, in order."""
    section = (ROOT / "docs" / "operating.md").read_text().split("\n## SLURM\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.strip() for line in block.splitlines() if line.strip()]


@on_the_cluster
def test_the_commands_of_the_operating_pages_slurm_section_run_in_order_on_a_real_cluster(worker_env, slurm, capsys,
                                                                                         processes, token_store):
    """Each line as the page writes it, on the test node's GPU partition (two generic GPUs, no device
    behind them: the workers are GPU workers whose parents never touch CUDA, and the study's trials,
    queued for CPU workers, wait)."""
    commands = slurm_section_commands()
    assert [c.split()[1:3] for c in commands] == [["slurm", "submit"], ["slurm", "submit"], ["slurm", "status"],
                                                  ["slurm", "keep"], ["study", "cancel"], ["slurm", "cancel"]]
    dry, submit, status, keep, study_cancel, cancel = (shlex.split(c)[1:] for c in commands)
    api.launch_study(tiny_spec("my-study"))
    rc, out, _ = cbs(capsys, *dry)
    lines = out.splitlines()
    assert rc == 0 and saved_scripts(worker_env["CBS_HOME"]) == []
    for line in ("#SBATCH --array=0-1", "#SBATCH --gres=gpu:1", "#SBATCH --partition=gpu", "#SBATCH --time=12:00:00",
                 "#SBATCH --cpus-per-task=4", "#SBATCH --mem=16G", "#SBATCH --signal=B:USR1@300"):
        assert line in lines, line
    rc, out, _ = cbs(capsys, *submit)
    assert rc == 0
    job_id = out.split("job array ")[1].split()[0]
    # each task a GPU worker on the GPU SLURM gave it (CUDA_VISIBLE_DEVICES 0 and 1)
    live = wait_for(lambda: w if len(w := api.alive_workers()) == 2 else None, 60, every_s=1,
                    what=lambda: "two GPU workers alive in the ledger\n" + job_log(worker_env["CBS_HOME"], job_id)[-3000:])
    assert sorted((w.device, w.queue, w.concurrency) for w in live) == [("cuda:0", "gpu", 1), ("cuda:1", "gpu", 1)]
    rc, out, _ = cbs(capsys, *status)
    assert rc == 0 and "2 worker task(s) named 'cbs-worker' queued or running" in out and out.count("RUNNING") == 2
    keeper = processes.start([CBS, *keep], "keep")
    wait_for(lambda: "2 worker(s) in SLURM's queue, 2 wanted" in processes.log(keeper), 30,
             what=lambda: "keep's first pass\n" + processes.log(keeper))
    rc, out, _ = cbs(capsys, *study_cancel)
    assert rc == 0
    assert keeper.wait(timeout=30) == 0 and "no study left to run (my-study): stopping" in processes.log(keeper)
    assert "submitted" not in processes.log(keeper)  # two were there all along: never more
    rc, out, _ = cbs(capsys, *cancel)
    assert rc == 0
    # a task's warm shutdown may outlast the cluster's KillWait (60 s) under load: SLURM kills it then
    wait_for(lambda: not [j for j in slurm.jobs() if j.split()[0].startswith(job_id)], 90,
             what=lambda: f"the cancelled tasks to leave squeue: {slurm.jobs()}")
    assert job_log(worker_env["CBS_HOME"], job_id).count("cbs slurm: SIGTERM received") == 2


@pytest.mark.slow
@pytest.mark.services
# its own waits add up to 975 s (calm 300, step 120, cancel 75, jobs 480): past the default 600 s of
# pytest-timeout, which cut it at load 9 before its own wait could say what it waited for
@pytest.mark.timeout(1500)
def test_a_study_on_redis_and_postgresql_survives_a_cancelled_job_and_jobs_at_their_time_limit(
        redis_env, postgres_env, slurm, capsys, processes, token_store):
    """The scale-out path as a cluster runs it: broker on Redis, MLflow, Optuna and the ledger on
    PostgreSQL, workers as SLURM jobs. The same spec runs undisturbed on a plain worker, then on
    jobs beside the runner: the first job is cancelled mid-trial (as a preemption), then ``cbs slurm
    keep`` runs it on one-minute jobs that each shut down warm before their limit, until it is done. The steps
    table is the undisturbed one, every trial's history has the same steps (no gap, no duplicate),
    and no run is left RUNNING."""
    from tests.workers.test_two_hosts import table
    from tests.workers.test_worker_process import no_run_left_running, study_done
    from workers.tracking import prepare_store

    s = WorkerSettings.from_env()
    assert s.broker_url.startswith("redis://") and s.tracking_uri.startswith("postgresql")
    prepare_store(s.tracking_uri)
    tracker = Tracker(s.tracking_uri)
    spec = dict(settings=[{"model": "tiny-0.3M", "tokens": 60_000}], batch_sizes=[8, 16], reuse_trials=False)
    calm = processes.worker()
    api.launch_study(tiny_spec("calm", **spec))
    wait_for(lambda: study_done("calm"), 300, every_s=2, what=lambda: "the calm study\n" + processes.log(calm)[-2000:])
    processes.kill(calm)

    name = "jobs"
    api.launch_study(tiny_spec(name, **spec))
    # the runner, as on the service node: a trial whose worker was killed before it could give it
    # back (a KillWait too short for a loaded host) is queued again from the ledger
    processes.start([CBS, "study", "watch", "--period", "1"], "runner")
    rc, out, _ = cbs(capsys, "slurm", "submit", "--count", "1", *CPU, "--time", "10", "--job-name", "cbs-pg")
    first = out.split("job array ")[1].split()[0]
    [reference] = api.study_records(name)
    wait_for(lambda: tracker.get_run(reference.run_id).data.metrics.get("progress/step", 0) >= 20, 120, every_s=1,
             what=lambda: "the reference trial to pass step 20\n" + job_log(os.environ["CBS_HOME"], first)[-3000:])
    assert cbs(capsys, "slurm", "cancel", "--job", f"{first}_0")[0] == 0
    wait_for(lambda: not [j for j in slurm.jobs() if j.split()[0].startswith(first)], 75,
             what=lambda: f"the cancelled job to end: {slurm.jobs()}")
    assert "cbs slurm: SIGTERM received" in job_log(os.environ["CBS_HOME"], first)
    keeper = processes.start([CBS, "slurm", "keep", "--count", "1", *CPU, "--time", "1", "--signal-before", "50",
                              "--job-name", "cbs-pg", "--study", name, "--period", "2"], "keep")
    wait_for(lambda: study_done(name), 480, every_s=2,
             what=lambda: f"the study on one-minute jobs\n{processes.log(keeper)[-2000:]}")
    assert keeper.wait(timeout=30) == 0
    logs = "".join(p.read_text(errors="replace") for p in (Path(os.environ["CBS_HOME"]) / "slurm" / "logs").glob("*.out"))
    assert "cbs slurm: SIGUSR1 received" in logs  # at least one job reached its time limit's signal
    assert table(name) == table("calm")
    calm_runs = {(r.batch_size, r.lr, r.role): r for r in api.study_records("calm")}
    for record in api.study_records(name):
        twin = calm_runs[(record.batch_size, record.lr, record.role)]
        raw = [m.step for m in tracker.client.get_metric_history(record.run_id, "train/loss")]
        assert sorted(raw) == sorted(m.step for m in tracker.client.get_metric_history(twin.run_id, "train/loss"))
    assert int(tracker.get_run(reference.run_id).data.tags["resumed_from_step"]) > 0
    no_run_left_running(name)
