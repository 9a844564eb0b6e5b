"""The chaos run's checks (``chaos.py``): the steps table as compared across phases, B*, what a phase
leaves behind (files, open Optuna trials) and the record of a phase."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from chaos_history import read_histories
from chaos_processes import cbs


def table(name: str, env: dict) -> list[dict]:
    rows = list(csv.DictReader(io.StringIO(cbs("study", "export", name, "--all-columns", env=env))))
    keep = ("trial_id", "setting", "batch_size", "lr", "seed", "steps", "outcome", "budget_steps", "tau", "beta2",
            "tokens")
    return sorted(({k: r[k] for k in keep} for r in rows), key=lambda r: r["trial_id"])  # the same in both phases


def comparable(rows: list[dict], prune_margin: float = 0.1) -> list[dict]:
    """Rows as compared across phases. A trial still above target past (1 + margin)·S_best of its
    cell is prunable: when the runner's stop reaches it (so its steps and tokens, and whether it
    crossed the target or its budget first) depends on timing, so only that it was prunable is
    compared."""
    best: dict = {}
    for r in rows:
        if r["outcome"] == "reached" and r["steps"]:
            cell = (r["setting"], r["batch_size"])
            best[cell] = min(best.get(cell, float("inf")), float(r["steps"]))
    out = []
    for r in rows:
        s_best = best.get((r["setting"], r["batch_size"]))
        late = s_best is not None and (r["outcome"] == "censored" or (
            r["outcome"] == "reached" and float(r["steps"]) > (1 + prune_margin) * s_best))
        prunable = r["outcome"] == "pruned" or late
        # tau is the EWA whose loss the trial reported at its end: for a prunable trial that end is
        # where the stop reached it (the full runs of issue 42: 0.997502 in one phase, 0.995011 in the other)
        out.append({**r, "outcome": "prunable", "steps": "", "tokens": "", "budget_steps": "", "tau": ""}
                   if prunable else r)
    return out


def b_star(name: str, env: dict) -> list:
    fit = json.loads(cbs("study", "fit", name, "--json", "--bootstrap", "0", env=env))
    return [(s["setting"], s["cbs"]) for s in fit["settings"]]


def leftovers(home: Path) -> list[str]:
    """Checkpoint files and temporary files left in ``home`` once everything ended."""
    out = []
    for p in home.rglob("*"):
        rel = str(p.relative_to(home))
        if p.is_file() and (rel.startswith("checkpoints/") or p.name.endswith((".tmp", ".part")) or ".tmp" in p.name):
            out.append(rel)
    return sorted(out)


def optuna_open(storage_url: str) -> list[str]:
    """Optuna trials of the chaos studies still RUNNING (asked, never told)."""
    import optuna

    out = []
    for summary in optuna.get_all_study_summaries(storage_url):
        study = optuna.load_study(study_name=summary.study_name, storage=storage_url)
        out += [f"{summary.study_name}#{t.number}" for t in study.get_trials(deepcopy=False)
                if t.state == optuna.trial.TrialState.RUNNING]
    return out


def phase_record(env: dict, studies: tuple[str, ...]) -> dict:
    """Tables, B*, histories and open runs of one phase's ``studies``, read while its lab is still up."""
    out = {"tables": {n: table(n, env) for n in studies}, "b_star": b_star("chaos-grid", env),
           "histories": [h for n in studies for h in read_histories(env["CBS_TRACKING_URI"], n)]}
    out["runs_left_open"] = [h.trial_id for h in out["histories"] if h.status in ("RUNNING", "SCHEDULED")]
    from workers.infra.settings import with_driver

    optuna_url = env.get("CBS_OPTUNA_STORAGE") or f"sqlite:///{Path(env['CBS_HOME']) / 'optuna' / 'optuna.db'}"
    out["optuna_trials_left_running"] = optuna_open(with_driver(optuna_url))
    return out
