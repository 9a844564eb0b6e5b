"""``cbs worker``, ``cbs study ...`` and ``cbs tracking``: their parsers and the study commands.

Heavy imports (celery, mlflow, optuna, torch) happen inside the handlers. ``cbs worker`` and
``cbs tracking`` replace this process (``exec``) with Celery or the MLflow server
(:mod:`workers.cli_processes`), so the worker parent never holds torch, and a process-group kill
reaches everything.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from cbscore.cli.study_fields import register_fields
from cbscore.errors import ConfigError
from workers.cli_processes import run_tracking, run_worker
from workers.cli_simulate import register_simulate
from workers.cli_slurm import register_slurm


def register(subparsers: argparse._SubParsersAction) -> None:
    worker = subparsers.add_parser(
        "worker", help="start a Celery worker that runs trials (one per child process)",
        description="Start a Celery worker on the cpu queue, or on the gpu queue pinned to its GPUs "
                    "(CUDA_VISIBLE_DEVICES is set before anything imports torch; GPU indices in nvidia-smi's "
                    "PCI bus order). With --gpus G1,...,Gn and --devices-per-trial K it runs n/K trials at "
                    "once, each on K GPUs with DDP.")
    worker.add_argument("--gpu", type=int, metavar="INDEX", default=None, help="run on this GPU (gpu queue)")
    worker.add_argument("--gpus", metavar="I,J,...", default=None,
                        help="run on these GPUs (gpu queue), --devices-per-trial of them per trial")
    worker.add_argument("--devices-per-trial", type=int, metavar="K", default=None,
                        help="devices (GPUs, or gloo processes on a CPU) that train each trial together with "
                             "DDP; overrides the spec's devices_per_trial (default: 1 on GPUs, the spec's on a CPU)")
    worker.add_argument("--concurrency", type=int, metavar="K", default=None,
                        help="trials at once (CPU: each gets one torch thread when K > 1; "
                             "default $CBS_WORKER_CONCURRENCY or 1; GPUs: one trial per GPU group)")
    worker.add_argument("--loglevel", default="INFO", help="Celery log level (default INFO)")
    worker.set_defaults(handler=run_worker)

    study = subparsers.add_parser("study", help="launch, watch, fit and export CBS studies")
    sub = study.add_subparsers(dest="study_command", metavar="ACTION")
    launch = sub.add_parser("launch", help="launch a study from a YAML spec or a preset")
    launch.add_argument("spec", metavar="SPEC.yaml|PRESET")
    launch.add_argument("--name", default=None, help="study name (default: the spec's)")
    launch.add_argument("--dry-run", action="store_true", help="print the plan and its cost; run nothing")
    launch.add_argument("--force", action="store_true", help="launch even above the spec's sanity limits")
    launch.add_argument("--tokens-per-s", type=float, default=None,
                        help="throughput of one worker for the time estimate (default: measured here per model)")
    launch.add_argument("--workers", type=int, default=1, metavar="K",
                        help="workers sharing the study, for the time estimate (default 1)")
    launch.set_defaults(handler=run_launch)
    register_simulate(sub)
    status = sub.add_parser("status", help="cells, trials by outcome, progress and tokens")
    status.add_argument("name")
    status.add_argument("--json", action="store_true")
    status.set_defaults(handler=run_status)
    fit = sub.add_parser("fit", help="S(B) fits and CBS from the study's trials (same output as cbs fit)")
    fit.add_argument("name")
    fit.add_argument("--json", action="store_true")
    fit.add_argument("--bootstrap", type=int, default=1000)
    fit.add_argument("--seed", type=int, default=0)
    fit.set_defaults(handler=run_fit)
    export = sub.add_parser("export", help="the steps table (the CSV that cbs fit reads)")
    export.add_argument("name")
    export.add_argument("-o", "--output", default=None, help="file to write (default: standard output)")
    export.add_argument("--all-columns", action="store_true", help="also lr, beta2, tau, run_id, ...")
    export.set_defaults(handler=run_export)
    extend = sub.add_parser("extend", help="grow a study (batch sizes, seeds, rates, settings, budgets): only the "
                                           "new trials run")
    extend.add_argument("name")
    extend.add_argument("patch", metavar="PATCH.yaml",
                        help="the study fields to change, as in a spec (e.g. `batch_sizes: [4, 8, 16, 32, 64]`)")
    extend.add_argument("--force", action="store_true", help="extend even above the spec's sanity limits")
    extend.set_defaults(handler=run_extend)
    warmup = sub.add_parser(
        "warmup", help="a local study: train its fitted batch-size warm-up beside small- and large-batch controls",
        description="Read the warm-up off the local study's fitted curve (double the batch where the local CBS "
                    "passes twice the current one, lr ×√2 each time; Merrill et al. 2025) and train it, per seed, "
                    "beside a small-batch control (B0, η0) and a large-batch control (the final batch and rate) at "
                    "equal tokens, as trials of the same study (an extension: local.warmup_run). The readout is "
                    "`cbs study fit NAME --json`'s `arms`.")
    warmup.add_argument("name")
    warmup.add_argument("--rule", choices=("merrill", "noise_aware"), default="merrill",
                        help="whose curve gives the schedule (default merrill, as the Local CBS page draws it; the noise-aware "
                             "rule errs more wherever the noise decides: docs/results/local-cbs/rule-noise/)")
    warmup.add_argument("--dry-run", action="store_true", help="print the three arms; launch nothing")
    warmup.add_argument("--force", action="store_true", help="launch even above the spec's sanity limits")
    warmup.set_defaults(handler=run_warmup)
    retry = sub.add_parser("retry", help="run a study's failed trials again, or its censored cells at a larger cap")
    retry.add_argument("name")
    retry.add_argument("--failed", action="store_true", help="failed trials, as new trials (the default)")
    retry.add_argument("--censored", action="store_true",
                       help="censored trials of cells that nothing reached, at --budget-factor times their cap")
    retry.add_argument("--budget-factor", type=float, default=2.0, metavar="F",
                       help="cap and budget of a censored retry as a multiple of the old (default 2)")
    retry.set_defaults(handler=run_retry)
    owner = sub.add_parser("owner", help="show a study's owner, or give it one (a study owned as oidc:<subject>, "
                                         "which no sign-in matches, is given its user's identity)")
    owner.add_argument("name")
    owner.add_argument("identity", nargs="?", help="the new owner: a verified e-mail or oidc:<issuer>#<subject>")
    owner.set_defaults(handler=run_owner)
    cancel = sub.add_parser("cancel", help="cancel every unfinished trial of a study")
    cancel.add_argument("name")
    cancel.set_defaults(handler=run_cancel)
    delete = sub.add_parser(
        "delete", help="delete a study as a whole: its MLflow runs (soft-deleted), ledger, Optuna studies, "
                       "checkpoints and artifacts",
        description="Delete a study: its MLflow runs and experiment (soft-deleted: `mlflow gc` purges them), its "
                    "leases and outcomes in the ledger, its Optuna studies, its trials' checkpoints and its kept "
                    "artifacts. Studies that reused its trials keep their own copies. A study with trials queued or "
                    "running is refused unless --force. Running it again finishes a delete that stopped half-way.")
    delete.add_argument("name")
    delete.add_argument("--yes", action="store_true", help="delete without asking (needed when stdin is not a terminal)")
    delete.add_argument("--force", action="store_true",
                        help="cancel a study with trials queued or running, wait for them to stop, then delete it")
    delete.add_argument("--wait", type=float, default=None, metavar="S",
                        help="with --force, how long to wait for the trials to stop (default 3×CBS_STALE_AFTER_S)")
    delete.set_defaults(handler=run_delete)
    watch = sub.add_parser("watch", help="advance every running study on a timer (the runner process)")
    watch.add_argument("--period", type=float, default=None, help="seconds between passes (CBS_WATCH_PERIOD_S)")
    watch.add_argument("--once", action="store_true", help="one pass, then exit")
    watch.set_defaults(handler=run_watch)
    listing = sub.add_parser("list", help="every study with its status")
    listing.set_defaults(handler=run_list)
    register_fields(sub)
    study.set_defaults(handler=lambda args: (study.print_help(), 2)[1])

    tracking = subparsers.add_parser(
        "tracking", help="start the MLflow tracking server and UI (127.0.0.1:5000, local SQLite store)")
    tracking.add_argument("--host", default="127.0.0.1")
    tracking.add_argument("--port", type=int, default=5000)
    tracking.add_argument("--workers", type=int, default=1, help="server worker processes (default 1)")
    tracking.add_argument("--auth", action="store_true",
                          help="run MLflow's basic-auth app: every request needs a user; the lab's service "
                               "account is $MLFLOW_TRACKING_USERNAME/$MLFLOW_TRACKING_PASSWORD (also $CBS_TRACKING_AUTH=1)")
    tracking.set_defaults(handler=run_tracking)
    register_slurm(subparsers)


# ---------------------------------------------------------------------------- cbs worker
def _human(n: float) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.3g}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def run_launch(args: argparse.Namespace) -> int:
    from workers.query import api

    spec = api.resolve_spec(args.spec)
    if args.name:
        spec = spec.replace(name=args.name)
    spec, chosen = api.apply_forecast_from(spec)
    if chosen is not None:
        print(f"cbs study: {chosen.describe()}")
    if args.dry_run:
        print(describe_plan(spec, args.tokens_per_s, n_workers=args.workers))
        return 0
    import getpass

    from workers.studies.runner import Runner

    name = Runner().launch(spec, force=args.force, owner=f"cli:{getpass.getuser()}")  # the operator, on the host
    print(f"cbs study: launched {name!r}; follow it with `cbs study status {name}`")
    if not api.alive_workers():
        print("cbs study: no worker is alive: start one with `cbs worker` (and the runner, `cbs study watch`), "
              "or everything with `cbs up`")
    return 0


def describe_plan(spec, tokens_per_s: float | None = None, *, n_workers: int = 1) -> str:
    """The dry-run text: settings, cells, trials, and compute at a tokens/s rate (one given
    figure, or measured here per model)."""
    from cbscore.study import estimate, measure_rates, plan
    from cbscore.study.kinds import study_kind
    from workers.studies.kinds import worker_kind
    from workers.studies.launch_checks import check_spec

    if isinstance(n_workers, bool) or not isinstance(n_workers, int) or n_workers < 1:
        raise ConfigError("--workers", n_workers, "must be a positive integer")
    if tokens_per_s is not None and not tokens_per_s > 0:
        raise ConfigError("--tokens-per-s", tokens_per_s, "must be a positive number")
    check_spec(spec, force=True)
    if tokens_per_s is None:
        # Several workers on one CPU run one torch thread each (`cbs worker --concurrency K`).
        rates, how = measure_rates(spec, threads=1 if n_workers > 1 else None)
        rate_note = "; ".join(f"{m} {r:,.0f} tokens/s ({how[m]})" for m, r in rates.items())
    else:
        rates, rate_note = tokens_per_s, f"{tokens_per_s:,.0f} tokens/s (given)"
    est = estimate(spec, rates, n_workers=n_workers)
    first = plan(spec, [], 0.0)
    lines = [f"study {spec.name!r} ({spec.kind}): {len(spec.resolve_settings())} settings × "
             f"{len(spec.batch_sizes)} batch sizes = {est.cells} cells, {est.trials} trials "
             f"({spec.search.kind} search), B_ref = {spec.b_ref}, r = {spec.overhead}"]
    for s in est.settings:
        lines.append(f"  {s.setting_id:<24} N = {_human(s.n_params):>6}  D = {_human(s.tokens):>6} tokens  "
                     f"grid {_human(s.grid_tokens)} tokens, {s.flops:.3g} FLOPs, {_duration(s.seconds)} on one worker")
    workers = "one worker" if n_workers == 1 else f"{n_workers} workers"
    lines.append(f"compute at fixed budgets (an upper bound): {_human(est.tokens)} tokens, {est.flops:.3g} FLOPs, "
                 f"{_duration(est.seconds)} on {workers}")
    lines.append(f"throughput per worker: {rate_note}")
    kind = worker_kind(spec)
    if study_kind(spec).stops_at_target:  # a schedule study's runs all train their whole horizon
        lines.append("stopping at the target, pruning and step caps spend less: `cbs study status` reports both")
    lines.extend(kind.dry_run_lines(spec, first, _human))
    if kind.shows_recipe:
        lines.extend(describe_recipe(spec))
    if est.over_limit:
        lines.append(f"over a sanity limit: {est.over_limit} (launch needs --force)")
    return "\n".join(lines)


def describe_recipe(spec) -> list[str]:
    """β2 and the middle τ of every cell, the τ's half-life in steps and as a share of D, and the
    floors and ceilings that set them (``cbscore.recipe``; docs/user-guide.md, "Recipe"): one line
    per batch size where every setting gets the same recipe (``fixed``, ``paper_table``, one D),
    else per setting."""
    from cbscore.recipe import EWA_HALF_LIFE_MULTIPLES, half_life_steps, reference_d_tokens, spec_recipe
    from cbscore.study.cell_trials import cell_recipe

    settings = spec.resolve_settings()
    d_ref = spec.recipe_d_ref_tokens or reference_d_tokens(s.tokens for s in settings)
    given = [name for name in ("beta2", "ewa_taus") if getattr(spec, name) is not None]
    ruled = [name for name in ("β2", "τ") if {"β2": "beta2", "τ": "ewa_taus"}[name] not in given]

    def cell(setting, b: int, d_tokens: int, d_name: str) -> str:
        beta2, taus = cell_recipe(spec, setting, b)
        mid = sorted(taus)[len(taus) // 2]
        steps = half_life_steps(mid)
        bounds = [x for x in spec_recipe(spec, batch_size=b, d_tokens=setting.tokens).bounds if x.split()[0] in ruled]
        return (f"B={b}: β2 {beta2:g}, τ {mid:g} ({steps:.3g} steps, {steps * b * spec.context_tokens / d_tokens:.1%} "
                f"of {d_name})" + (f" [{', '.join(bounds)}]" if bounds else ""))

    one = all(cell_recipe(spec, s, b) == cell_recipe(spec, settings[0], b) for s in settings for b in spec.batch_sizes)
    what = (f"one β2 and τ per batch size for the whole study, at the reference D_ref = {_human(d_ref)} tokens "
            f"(√(D_min·D_max) of the settings)" if spec.recipe == "fixed" else
            "β2 and τ per batch size" if spec.recipe == "paper_table" else "β2 and τ per setting's D")
    lines = [f"recipe {spec.recipe!r}" + (f" ({'/'.join(given)} given in the spec override it)" if given else "")
             + f": {what}; the EWA τ tracked are {len(EWA_HALF_LIFE_MULTIPLES)} half-lives ×"
             + "/".join(f"{m:g}" for m in EWA_HALF_LIFE_MULTIPLES)
             + "; the middle τ's half-life in steps and as a share of D; floors and ceilings hit in brackets:"]
    if one:
        lines.extend(f"  {cell(settings[0], b, d_ref, 'D_ref')}" for b in spec.batch_sizes)
    else:
        for setting in settings:
            lines.append(f"  {setting.setting_id:<24} "
                         + "; ".join(cell(setting, b, setting.tokens, "D") for b in spec.batch_sizes))
    return lines


def run_status(args: argparse.Namespace) -> int:
    from workers.query import api

    st = api.study_status(args.name)
    if args.json:
        d = {"name": st.name, "status": st.status, "counts": dict(st.counts), "n_trials": st.n_trials,
             "progress": st.progress, "tokens_spent": st.tokens_spent, "grid_tokens": st.grid_tokens,
             "tokens_saved": st.tokens_saved, "targets": dict(st.targets),
             "cells": [dataclasses.asdict(c) for c in st.cells], "errors": list(st.errors), "costs": st.costs.to_dict() if st.costs is not None else None}
        print(json.dumps(d, indent=2))
        return 0
    counts = ", ".join(f"{k} {v}" for k, v in sorted(st.counts.items())) or "none yet"
    print(f"study {st.name!r}: {st.status}; {st.progress:.0%} of {st.n_trials} trials ended ({counts})")
    saved = (f"{_human(st.tokens_saved)} saved ({st.tokens_saved / st.grid_tokens:.0%})" if st.status == "done"
             else "the saving is known when the study is done")
    print(f"tokens: {_human(st.tokens_spent)} spent; the fixed-budget grid would spend {_human(st.grid_tokens)}; {saved}")
    if st.costs is not None:
        from cbscore.study.costs import format_costs, format_pruned

        print(format_costs(st.costs, _human)
              + ("" if st.costs.stop_at_target_exact else " (≥: trials stopped before the target count what they trained)"))
        if st.costs.pruned_tokens_by_rule:
            print(format_pruned(st.costs.pruned_tokens_by_rule, st.costs.spent_tokens, _human)
                  + " (of the tokens spent; the rules: docs/user-guide.md, \"What a study costs\")")
    for setting, target in st.targets.items():
        print(f"target {setting}: {target:.4f} nats")
    print(f"{'cell':<34} {'role':<9} {'state':<9} {'trials':>6} {'S(B)':>9} {'cap':>6}  outcomes")
    for c in st.cells:
        s = "—" if c.steps_to_target is None else f"{c.steps_to_target:.1f}"
        cap = "—" if c.max_steps is None else str(c.max_steps)
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(c.counts.items()))
        print(f"{c.cell_id:<34} {c.role:<9} {c.state:<9} {c.n_trials:>6} {s:>9} {cap:>6}  {outcomes}")
        if c.rates_note:
            print(f"{'':<36}learning rates: {c.rates_note}")
    for e in st.errors:
        print(f"note: {e}")
    return 0


def run_fit(args: argparse.Namespace) -> int:
    from workers.query import api
    from workers.studies.kinds import worker_kind

    kind = worker_kind(api.study_spec(args.name))
    if kind.readout is not None:  # the kind's own readout (local CBS; S(B) and B* per schedule), not the lab's fit
        out = kind.readout(args.name, bootstrap=args.bootstrap, seed=args.seed)
        print(json.dumps(kind.json_of_readout(out), indent=2, allow_nan=False) if args.json
              else kind.format_readout(out))
        return 0
    analysis = api.study_fit(args.name, bootstrap=args.bootstrap, seed=args.seed)
    # the noise-scale forecast of each setting and its calibration against this fit
    forecast = api.study_forecast(args.name, analysis=analysis, bootstrap=args.bootstrap, seed=args.seed)
    if args.json:
        out = analysis.to_json_dict()
        out["forecast"], out["calibration"] = forecast.to_json_dict()
        print(json.dumps(out, indent=2, allow_nan=False))
        return 0
    from cbscore.cli.fit import format_analysis

    print(format_analysis(analysis))
    print(format_forecast(forecast))
    return 0


def format_forecast(forecast) -> str:
    """The text of ``cbs study fit``'s noise-scale section."""
    lines = ["", "noise-scale forecast (best reference run's B_simple; McCandlish et al. 2018, eqs. 2.11-2.12):"]
    for f in forecast.forecasts:
        lines.append(f"  {f.setting:<24} B̂ = {f.b_hat:.4g}  Ŝ_min = {f.s_min:.4g} steps  forecast B* = {f.cbs:.4g}  "
                     f"({f.n_values} values to step {f.target_step:.4g})")
    from cbscore.cli.fit import format_calibration

    lines += [f"note: {e}" for e in forecast.errors]
    if forecast.calibration is not None:
        lines.append(format_calibration(forecast.calibration))
    return "\n".join(lines)


def run_export(args: argparse.Namespace) -> int:
    from cbscore.analysis import steps_csv_text
    from workers.query import api
    from workers.studies.kinds import worker_kind

    table = worker_kind(api.study_spec(args.name)).table  # a schedule study's: one steps table per schedule
    rows = api.study_table(args.name) if table is None else table(args.name)
    columns = api.TABLE_COLUMNS if args.all_columns else api.FIT_COLUMNS
    text = steps_csv_text(rows, columns)  # the lab's table is typed; a kind's own may be mappings
    if args.output:
        from workers.infra.atomic_files import write_text

        write_text(args.output, text)  # whole or not at all
        print(f"cbs study export: {len(rows)} trials → {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _patch_text(patch: str) -> str:
    """The text of ``cbs study extend``'s PATCH: the file it names when it is one line ending in
    ``.yaml``/``.yml`` (read here, on the operator's host: the API takes text only), else itself."""
    if "\n" in patch or not patch.endswith((".yaml", ".yml")):
        return patch
    path = Path(patch)
    if not path.is_file():
        raise ConfigError("patch", patch, "names no file")
    return path.read_text()


def run_extend(args: argparse.Namespace) -> int:
    import getpass

    from workers.query import api

    spec, changes = api.extend_study(args.name, _patch_text(args.patch), author=f"cli:{getpass.getuser()}",
                                     force=args.force)
    print(f"cbs study: extended {args.name!r}:")
    for line in changes:
        print(f"  {line}")
    print(f"follow it with `cbs study status {args.name}`")
    return 0


def run_warmup(args: argparse.Namespace) -> int:
    import getpass

    from cbscore.study.kinds import require_kind
    from workers.query import api
    from workers.studies.local_fit import local_fit
    from workers.studies.local_study import describe_arms
    from workers.studies.local_warmup import launch_warmup, warmup_patch

    stored = api.study_spec(args.name)
    require_kind(args.name, stored, "local")  # the warm-up is local CBS's own
    if args.dry_run:
        from cbscore.study import StudySpec

        patch = warmup_patch(local_fit(args.name), args.rule)
        spec = StudySpec.from_dict({**stored.to_dict(), "local": {**stored.local.to_dict(), **patch["local"]}})
        print(f"cbs study: the warm-up of {args.name!r} by the {args.rule} curve, per seed ({len(spec.seeds)}), "
              "would train:")
        print("\n".join(describe_arms(spec)))
        return 0
    spec, changes = launch_warmup(args.name, rule=args.rule, author=f"cli:{getpass.getuser()}", force=args.force)
    print(f"cbs study: launched the warm-up of {args.name!r} and its controls ({args.rule} curve):")
    print("\n".join(describe_arms(spec)))
    print(f"follow it with `cbs study status {args.name}`; its readout: `cbs study fit {args.name}`")
    return 0


def run_retry(args: argparse.Namespace) -> int:
    import getpass

    from workers.query import api

    started = api.retry_study(args.name, failed=args.failed or not args.censored, censored=args.censored,
                              budget_factor=args.budget_factor, author=f"cli:{getpass.getuser()}")
    what = " and ".join(w for w, on in (("failed trials", args.failed or not args.censored),
                                        ("censored cells", args.censored)) if on)
    if not started:
        print(f"cbs study: {args.name!r} has no {what} to retry")
        return 0
    print(f"cbs study: {len(started)} trial(s) of {args.name!r} run again ({what}):")
    for trial_id in started:
        print(f"  {trial_id}")
    return 0


def run_owner(args: argparse.Namespace) -> int:
    """``cbs study owner NAME [IDENTITY]``: the operator's migration of an old-form owner."""
    from workers.query import api

    if args.identity is None:
        print(api.study_owner(args.name) or "(none recorded)")
        return 0
    before = api.set_study_owner(args.name, args.identity)
    print(f"cbs study: {args.name!r} is owned by {args.identity.strip()} (was {before or 'none recorded'})")
    return 0


def run_cancel(args: argparse.Namespace) -> int:
    from workers.query import api

    n = api.cancel_study(args.name)
    print(f"cbs study: cancelled {args.name!r} ({n} unfinished trials stopped or stopping)")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    """``cbs study delete``: what goes, a confirmation unless ``--yes``, then :func:`workers.query.api.delete_study`."""
    from cbscore.errors import CbsError
    from workers.query import api
    from workers.studies.delete import StudyInFlight

    preview = api.deletion_preview(args.name)  # an unknown study: an error naming it
    if preview.in_flight and not args.force:
        raise StudyInFlight(args.name, preview.in_flight)
    if not args.yes:
        if not sys.stdin.isatty():
            raise CbsError(f"not deleting {args.name!r} without a confirmation: standard input is not a terminal; "
                           "pass --yes to delete it")
        print(describe_deletion(preview, force=args.force))
        answer = input(f"Type the study's name ({args.name}) to delete it: ")
        if answer.strip() != args.name:
            print(f"cbs study: {args.name!r} was not deleted")
            return 1
    report = api.delete_study(args.name, force=args.force, wait_s=args.wait)
    print(f"cbs study: deleted {args.name!r}" + (" (finishing a delete that had stopped half-way)" if report.resumed
                                                else ""))
    if report.cancelled:
        print(f"  cancelled first: {report.cancelled} unfinished trial(s) stopped")
    print(f"  MLflow: {report.runs_deleted} run(s) soft-deleted, the experiment too (now {report.deleted_as!r}; "
          "`mlflow gc` purges them)")
    print(f"  ledger: {report.leases_deleted} lease(s); Optuna: {report.optuna_studies_deleted} study(ies); "
          f"checkpoints: {report.checkpoints_removed} folder(s); artifacts: "
          + ("removed" if report.artifacts_removed else "none"))
    if report.dependants:
        print(f"  kept: the copies of its trials that {', '.join(report.dependants)} reused (they stay theirs)")
    return 0


def describe_deletion(preview, *, force: bool = False) -> str:
    """What ``cbs study delete`` asks about: the study, what goes, what stays."""
    lines = [f"study {preview.study!r} ({preview.status or 'status unknown'}"
             + (f", owner {preview.owner}" if preview.owner else "") + f"): {preview.runs} MLflow run(s), its ledger "
             "entries, Optuna studies, checkpoints and artifacts will be deleted (MLflow's runs soft-deleted)"]
    if preview.in_flight and force:
        lines.append(f"  --force: it is cancelled first and its {len(preview.in_flight)} trial(s) queued or running "
                     "are stopped")
    if preview.dependants:
        lines.append(f"  {', '.join(preview.dependants)} reused trials of it: they keep their own copies")
    return "\n".join(lines)


def run_watch(args: argparse.Namespace) -> int:
    from workers.studies.runner import Runner
    from workers.tracking import wait_out

    runner = wait_out(Runner, what="cbs study watch", log=lambda m: print(m, flush=True))  # through an outage
    period = args.period or runner.settings.watch_period_s
    if not args.once:
        print(f"cbs study watch: advancing running studies every {period:g} s", flush=True)
    runner.watch(period_s=period, passes=1 if args.once else None, log=lambda m: print(m, flush=True))
    return 0


def run_list(args: argparse.Namespace) -> int:
    from workers.query import api

    for s in api.list_studies():
        counts = ", ".join(f"{k} {v}" for k, v in sorted(s.counts.items())) or "no trials yet"
        print(f"{s.name:<32} {s.kind:<10} {s.status:<10} {s.n_trials:>5} trials ({counts})")
    return 0
