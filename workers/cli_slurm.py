"""``cbs slurm submit | status | cancel | keep``: workers as SLURM jobs (:mod:`workers.cli_slurm_jobs`)."""

from __future__ import annotations

import argparse
import sys

from workers.cli_slurm_jobs import SlurmJob


def _job_options(parser: argparse.ArgumentParser, *, count_required: bool = True) -> None:
    parser.add_argument("--count", type=int, required=count_required, metavar="N",
                        help="workers: tasks of the job array, one worker (one trial at a time) each")
    parser.add_argument("--gpus", type=int, default=1, metavar="K",
                        help="GPUs per worker (--gres=gpu:K; default 1); 0: CPU workers, no GPU asked for")
    parser.add_argument("--partition", default=None, help="SLURM partition (default: the cluster's default)")
    parser.add_argument("--account", default=None, help="SLURM account to charge (default: yours)")
    parser.add_argument("--time", default="4:00:00", metavar="LIMIT",
                        help="wall time of each worker: MINUTES, HH:MM:SS or D-HH:MM:SS (default 4:00:00)")
    parser.add_argument("--cpus-per-task", type=int, default=4, metavar="C", help="CPU cores per worker (default 4)")
    parser.add_argument("--mem", default=None, metavar="SIZE", help="memory per worker, e.g. 32G (default: the partition's)")
    parser.add_argument("--signal", choices=("USR1", "TERM"), default="USR1",
                        help="the signal SLURM sends the batch shell before the time limit (default USR1): the "
                             "worker's warm shutdown (its trial checkpoints and goes back to the queue)")
    parser.add_argument("--signal-before", type=int, default=300, metavar="S",
                        help="seconds before the time limit that the signal comes (default 300)")
    parser.add_argument("--requeue", action="store_true",
                        help="let SLURM requeue a preempted task (preemptible partitions)")
    parser.add_argument("--job-name", default="cbs-worker", help="the jobs' name, which status/cancel/keep find "
                                                                 "them by (default cbs-worker)")
    parser.add_argument("--sbatch-option", action="append", default=[], metavar="--NAME[=VALUE]",
                        help="one more sbatch option for the script, e.g. --sbatch-option=--qos=high (repeatable)")


def _job(args: argparse.Namespace) -> SlurmJob:
    return SlurmJob(count=args.count, gpus=args.gpus, time=args.time, signal_before_s=args.signal_before,
                    signal=args.signal, partition=args.partition, account=args.account,
                    cpus_per_task=args.cpus_per_task, mem=args.mem, requeue=args.requeue, job_name=args.job_name,
                    extra=tuple(args.sbatch_option))


def register_slurm(subparsers: argparse._SubParsersAction) -> None:
    slurm = subparsers.add_parser(
        "slurm", help="run workers as SLURM jobs: submit a job array, status, cancel, keep N while trials remain",
        description="Workers as a SLURM job array: each task runs `cbs worker --concurrency 1` on its own GPU "
                    "(--gres=gpu:1) against the lab's broker and tracking (the CBS_* settings of this shell). "
                    "Before the time limit, and on preemption or scancel, the worker shuts down warm: its trial "
                    "checkpoints and goes back to the queue. Scripts and logs: $CBS_HOME/slurm/.")
    sub = slurm.add_subparsers(dest="slurm_command", metavar="ACTION")
    submit = sub.add_parser("submit", help="write, save and sbatch the script of N workers")
    _job_options(submit)
    submit.add_argument("--dry-run", action="store_true", help="print the script; submit and save nothing")
    submit.set_defaults(handler=run_submit)
    status = sub.add_parser("status", help="the worker jobs SLURM lists (squeue)")
    status.add_argument("--job-name", default="cbs-worker")
    status.set_defaults(handler=run_status)
    cancel = sub.add_parser("cancel", help="scancel the worker jobs (their trials go back to the queue)")
    cancel.add_argument("--job-name", default="cbs-worker")
    cancel.add_argument("--job", action="append", default=[], metavar="ID",
                        help="only this job or array task (123 or 123_4; repeatable)")
    cancel.set_defaults(handler=run_cancel)
    keep = sub.add_parser("keep", help="keep N workers queued or running while studies have trials; never more")
    _job_options(keep)
    keep.add_argument("--study", action="append", default=[], metavar="NAME",
                      help="the study to keep workers for (repeatable; default: every running study)")
    keep.add_argument("--period", type=float, default=60.0, metavar="S", help="seconds between passes (default 60)")
    keep.add_argument("--once", action="store_true", help="one pass, then exit")
    keep.add_argument("--leave-workers", action="store_true",
                      help="when every study is done, leave the worker tasks to their time limit (default: cancel "
                           "them unless another running study still has trials)")
    keep.set_defaults(handler=run_keep)
    slurm.set_defaults(handler=lambda args: (slurm.print_help(), 2)[1])


def run_submit(args: argparse.Namespace) -> int:
    from workers.cli_slurm_jobs import job_script, lab_environment, preemption_notes, single_host_notes, submit

    job = _job(args)
    for note in single_host_notes() + preemption_notes(job):  # on standard error: a dry run's output is the script
        print(f"cbs slurm: note: {note}", file=sys.stderr)
    if args.dry_run:
        print(job_script(job), end="")
        return 0
    job_id, path = submit(job)
    _, required = lab_environment()
    print(f"cbs slurm: submitted {job.count} worker(s) as job array {job_id} (script {path})")
    if required:
        print(f"cbs slurm: taken from this shell's environment, not written in the script: {', '.join(required)}")
    print("follow them with `cbs slurm status`; stop them with `cbs slurm cancel`")
    return 0


def run_status(args: argparse.Namespace) -> int:
    from workers.cli_slurm_jobs import LIVE_STATES, worker_tasks

    tasks = worker_tasks(args.job_name)
    live = sum(t.tasks for t in tasks if t.state in LIVE_STATES)
    print(f"cbs slurm: {live} worker task(s) named {args.job_name!r} queued or running")
    if tasks:
        print(f"{'job':<20} {'state':<12} {'elapsed':>10} {'limit':>10}  reason/node")
    for t in tasks:
        print(f"{t.job_id:<20} {t.state:<12} {t.elapsed:>10} {t.time_limit:>10}  {t.reason}")
    return 0


def run_cancel(args: argparse.Namespace) -> int:
    from workers.cli_slurm_jobs import cancel

    cancel(args.job_name, tuple(args.job))
    what = ", ".join(args.job) if args.job else f"every job named {args.job_name!r}"
    print(f"cbs slurm: cancelled {what}: their workers shut down warm (running trials go back to the queue)")
    return 0


def run_keep(args: argparse.Namespace) -> int:
    from workers.cli_slurm_jobs import keep

    keep(_job(args), tuple(args.study), period_s=args.period, once=args.once,
         release=not args.leave_workers, log=lambda m: print(m, flush=True))
    return 0
