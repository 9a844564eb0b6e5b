"""The GPU check behind ``benchmarks/gpu_check.sh`` (docs/operating.md, "GPU check"; issue 23).

    python benchmarks/gpu_check.py [--out FILE] [--parts 0,1,...] [--budget PART=SECONDS ...]
    python benchmarks/gpu_check.py --dry-run        # each part's time budget and the total
    python benchmarks/gpu_check.py --cpu-smoke      # the rehearsal: tiny models on the CPU

Runs on the GPU image as it is: torch, numpy and scipy, and cbscore through ``PYTHONPATH``; no
datasets, mlflow, celery or streamlit (the data is a synthetic token store written by numpy,
``benchmarks/synthetic_store.py``). Every part (``benchmarks/gpu_check_parts.py``) runs in its own
process with its own hard time limit (killed, SIGKILL to its process group, at the limit: a hang in
C code cannot outlive it) and ``TORCH_LOGS=recompiles,graph_breaks``; the moment it ends, one JSON
line with its figures, checks, recompiles and graph breaks is appended to ``$OUT/gpu_check.jsonl``
(or ``--out``), so a check cut short keeps what it measured. Time the earlier parts left unused
may lengthen a part's limit by up to half its budget; the total never exceeds :data:`TOTAL_BUDGET_S`. A final line summarises: the MFU of 85M
and 151M compiled against the goal (≥ 45%) and the parts that failed. On SIGTERM (the shell's
``timeout``) the running part is killed and recorded as ``cut``, and the summary is still written.

Without a usable GPU (and without ``--cpu-smoke`` or ``--dry-run``) it prints one line and exits 2.
Exit status otherwise: 0 when every part passed, 1 when one did not, 124 when cut.

The budgets are estimates for one H200 with a cold compile cache (``torch.compile`` of 85M or
151M takes about a minute there); none has been measured yet (docs/operating.md, "GPU check"). The CPU
rehearsal's own times are in its JSON lines (``seconds``).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARTS_SCRIPT = ROOT / "benchmarks" / "gpu_check_parts.py"

#: The whole check's wall-clock limit on one H200, seconds (8 minutes).
TOTAL_BUDGET_S = 480.0
#: The MFU the 85M and 151M presets should reach compiled in bf16 on an H200.
GOAL_MFU = 0.45
#: What the shell, the driver's start and the synthetic store take besides the parts.
SETUP_S = 10.0


@dataclass(frozen=True)
class Part:
    number: int
    name: str
    budget_s: float
    """Time limit on one H200 with a cold compile cache (an estimate: unmeasured)."""
    smoke_budget_s: float
    """Time limit of the CPU rehearsal's tiny version."""
    measures: str


PARTS = (
    Part(0, "environment", 20, 60, "torch/CUDA/Triton versions, device, MFU peak, free memory, 8192³ bf16 matmul"),
    Part(1, "85M compiled", 95, 90, "B=256, T=512, three τ, GNS, automatic micro-batch: compile s, tokens/s, MFU, "
         "memory against the estimate"),
    Part(2, "85M eager", 30, 60, "the same, eager"),
    Part(3, "151M compiled and eager", 105, 120, "151M at B=256, compiled then eager"),
    Part(4, "GNS overhead", 45, 90, "85M at a forced split, probe off and on twice each; B=64 automatic measures GNS"),
    Part(5, "1.2B eager", 50, 60, "B=128, a few steps: micro-batch chosen, peak against the estimate"),
    Part(6, "out of memory", 40, 60, "a micro-batch that cannot fit halves and gives the halved run's update"),
    Part(7, "DDP one rank", 20, 60, "DDP built on a one-rank NCCL group (the buffer keyword of this torch)"),
    Part(8, "compile and resume", 60, 120, "compiled vs eager losses over 20 steps; checkpoint stop and resume"),
)

RECOMPILE = re.compile(r"\[__recompiles\] (Recompiling function .*)")
RECOMPILE_REASON = re.compile(r"\[__recompiles\]\s+- (.*)")
GRAPH_BREAK = re.compile(r"\[__graph_breaks\] (Graph break.*)")


class Cut(Exception):
    """The check was told to end (SIGTERM): the running part is killed and recorded."""


def _raise_cut(signum, frame):
    raise Cut()


def _die_with_parent() -> None:
    """In a part's process: SIGKILL when the driver dies (Linux ``PR_SET_PDEATHSIG``), so a driver
    killed by the shell's ``timeout`` leaves no part holding the GPU."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


def torch_logs(text: str) -> dict:
    """Recompiles and graph breaks that ``TORCH_LOGS=recompiles,graph_breaks`` wrote in ``text``:
    their counts and the first few of each."""
    recompiles = RECOMPILE.findall(text)
    breaks = GRAPH_BREAK.findall(text)
    return {"recompiles": len(recompiles), "graph_breaks": len(breaks),
            "recompile_reasons": (recompiles[:3] + RECOMPILE_REASON.findall(text)[:3]) if recompiles else [],
            "graph_break_sites": breaks[:5]}


def commit() -> str | None:
    """The commit measured: ``CBS_COMMIT``, or git's HEAD where the checkout has its history."""
    if os.environ.get("CBS_COMMIT"):
        return os.environ["CBS_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


class Journal:
    """The JSON lines file: one line appended (and synced to disk) per finished part."""

    def __init__(self, path: Path, header: dict):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.header = header
        self.lines: list[dict] = []

    def append(self, line: dict) -> None:
        line = {**self.header, **line}
        with open(self.path, "a") as f:
            f.write(json.dumps(line, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.lines.append(line)


def run_part(part: Part, limit_s: float, *, mode: str, logs: Path, env: dict) -> dict:
    """Run one part in its own process group, killed at ``limit_s``; its JSON line."""
    result_file, log_file = logs / f"part-{part.number}.json", logs / f"part-{part.number}.log"
    result_file.unlink(missing_ok=True)
    started = time.monotonic()
    status, returncode, cut = None, None, None
    with open(log_file, "w") as log:
        proc = subprocess.Popen([sys.executable, str(PARTS_SCRIPT), str(part.number), "--mode", mode,
                                 "--result", str(result_file)], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent)
        try:
            returncode = proc.wait(timeout=limit_s)
        except (subprocess.TimeoutExpired, Cut) as exc:
            status = "timeout" if isinstance(exc, subprocess.TimeoutExpired) else "cut"
            cut = exc if isinstance(exc, Cut) else None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    seconds = time.monotonic() - started
    try:
        result = json.loads(result_file.read_text())
    except (OSError, ValueError):
        result = {}
    text = log_file.read_text(errors="replace")
    checks = result.get("checks", {})
    if status is None:
        status = "ok" if returncode == 0 and result.get("done") and all(checks.values()) else "failed"
    line = {"part": part.number, "name": part.name, "status": status, "seconds": round(seconds, 1),
            "limit_s": round(limit_s, 1), "budget_s": part.budget_s if mode == "gpu" else part.smoke_budget_s,
            "returncode": returncode, **torch_logs(text), "figures": result.get("figures", {}), "checks": checks,
            "failed_checks": [k for k, ok in checks.items() if not ok]}
    for key in ("error", "where"):
        if key in result:
            line[key] = result[key]
    if status != "ok":
        line["log_tail"] = [x[-300:] for x in text.strip().splitlines()[-15:]]
    if cut is not None:
        line["_cut"] = True
    return line


def _headline(line: dict) -> str:
    """A part's one-line account on stdout."""
    figures = line["figures"]
    rates = [f"{k}: {v['tokens_per_s']:.0f} tok/s" + (f", MFU {v['mfu']:.3f}" if v.get("mfu") is not None else "")
             for k, v in figures.items() if isinstance(v, dict) and v.get("tokens_per_s") and not v.get("running")]
    extra = f"; {'; '.join(rates)}" if rates else ""
    failed = f"; failed checks {', '.join(line['failed_checks'])}" if line["failed_checks"] else ""
    error = f"; {line['error']}" if line.get("error") else ""
    return (f"gpu_check: part {line['part']} {line['name']}: {line['status']} in {line['seconds']} s "
            f"(limit {line['limit_s']} s), recompiles {line['recompiles']}, graph breaks {line['graph_breaks']}"
            f"{extra}{failed}{error}")


def summary(lines: list[dict], seconds: float, mode: str) -> dict:
    """The final line: MFU of 85M and 151M compiled against the goal, and the parts that failed."""
    by_part = {line["part"]: line for line in lines}

    def compiled_mfu(number: int) -> float | None:
        return by_part.get(number, {}).get("figures", {}).get("compiled", {}).get("mfu")

    mfu_85m, mfu_151m = compiled_mfu(1), compiled_mfu(3)
    known = [m for m in (mfu_85m, mfu_151m) if m is not None]
    return {"summary": True, "seconds": round(seconds, 1), "mfu_85M_compiled": mfu_85m,
            "mfu_151M_compiled": mfu_151m, "goal_mfu": GOAL_MFU,
            "meets_goal": (len(known) == 2 and min(known) >= GOAL_MFU) if mode == "gpu" else None,
            "failed_parts": [line["part"] for line in lines if line["status"] != "ok"],
            "parts": {str(line["part"]): line["status"] for line in lines}}


def _summary_text(s: dict) -> str:
    def pct(m):
        return "unmeasured" if m is None else f"{100 * m:.1f}%"

    goal = {True: "met", False: "not met", None: "not judged (no GPU)"}[s["meets_goal"]]
    failed = ", ".join(map(str, s["failed_parts"])) or "none"
    return (f"gpu_check: summary: MFU 85M compiled {pct(s['mfu_85M_compiled'])}, 151M compiled "
            f"{pct(s['mfu_151M_compiled'])} (goal ≥ {100 * GOAL_MFU:.0f}%: {goal}); failed parts: {failed}; "
            f"{s['seconds']} s")


def dry_run(parts: list[Part]) -> int:
    total = sum(p.budget_s for p in parts)
    for p in parts:
        print(f"part {p.number}  {p.name:<24} {p.budget_s:>4.0f} s  {p.measures}")
    print(f"total {total:.0f} s of parts + {SETUP_S:.0f} s setup = {total + SETUP_S:.0f} s "
          f"(limit {TOTAL_BUDGET_S:.0f} s = {TOTAL_BUDGET_S / 60:.0f} min; budgets are H200 estimates, unmeasured)")
    return 0 if total + SETUP_S <= TOTAL_BUDGET_S else 1


def _parse_budgets(values: list[str]) -> dict[int, float]:
    budgets = {}
    for value in values:
        number, _, seconds = value.partition("=")
        try:
            budgets[int(number)] = float(seconds)
        except ValueError:
            raise SystemExit(f"gpu_check: --budget takes PART=SECONDS, but got {value!r}.") from None
    return budgets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The one-shot GPU check (issue 23).")
    default_out = Path(os.environ["OUT"]) / "gpu_check.jsonl" if os.environ.get("OUT") else \
        ROOT / ".cache" / "gpu_check" / "gpu_check.jsonl"
    parser.add_argument("--out", type=Path, default=default_out, help=f"JSON lines file (default {default_out})")
    parser.add_argument("--parts", default=",".join(str(p.number) for p in PARTS), help="parts to run, e.g. 0,1,7")
    parser.add_argument("--budget", action="append", default=[], metavar="PART=SECONDS",
                        help="another time limit for a part (repeatable)")
    parser.add_argument("--dry-run", action="store_true", help="print each part's time budget and the total")
    parser.add_argument("--cpu-smoke", action="store_true", help="the rehearsal: tiny models on the CPU")
    parser.add_argument("--home", type=Path, default=ROOT / ".cache" / "gpu_check" / "home",
                        help="CBS_HOME of the parts (the synthetic token store, the compile cache)")
    args = parser.parse_args(argv)
    try:
        chosen = {int(x) for x in args.parts.split(",") if x.strip()}
    except ValueError:
        print(f"gpu_check: --parts takes numbers separated by commas, but got {args.parts!r}.")
        return 2
    parts = [p for p in PARTS if p.number in chosen]
    if args.dry_run:
        return dry_run(parts)
    mode = "cpu-smoke" if args.cpu_smoke else "gpu"
    if mode == "gpu":
        import torch

        if not torch.cuda.is_available():
            print("gpu_check: no CUDA GPU visible to torch here: nothing to check (needs a GPU and a CUDA build of torch)")
            return 2
    overrides = _parse_budgets(args.budget)

    started = time.monotonic()
    run_id = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    logs = args.out.parent / "gpu_check_logs"
    logs.mkdir(parents=True, exist_ok=True)
    home = args.home.resolve()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
           "TORCH_LOGS": "recompiles,graph_breaks", "CBS_HOME": str(home), "PYTHONUNBUFFERED": "1",
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(home / "inductor"))
    journal = Journal(args.out, {"check": "gpu_check", "run": run_id, "mode": mode, "commit": commit()})
    deadline = started + (TOTAL_BUDGET_S - SETUP_S if mode == "gpu" else math.inf)
    signal.signal(signal.SIGTERM, _raise_cut)
    planned, cut = 0.0, False
    try:
        for part in parts:
            budget = overrides.get(part.number, part.budget_s if mode == "gpu" else part.smoke_budget_s)
            # what the parts before it left unused (never the time of those after it), up to half its budget
            unused = max(0.0, planned - (time.monotonic() - started))
            planned += budget
            limit = min(budget + min(unused, budget / 2), deadline - time.monotonic())
            if limit < min(5.0, budget):
                line = {"part": part.number, "name": part.name, "status": "skipped", "seconds": 0.0,
                        "limit_s": round(max(limit, 0.0), 1), "budget_s": budget, "returncode": None,
                        "recompiles": 0, "graph_breaks": 0, "figures": {}, "checks": {}, "failed_checks": [],
                        "error": f"{max(limit, 0.0):.0f} s left for a part budgeted {budget:.0f} s"}
            else:
                line = run_part(part, limit, mode=mode, logs=logs, env=env)
            cut = bool(line.pop("_cut", False))
            journal.append(line)
            print(_headline(line), flush=True)
            if cut:
                break
    except Cut:
        cut = True
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    final = summary(journal.lines, time.monotonic() - started, mode)
    journal.append(final)
    print(_summary_text(final), flush=True)
    if cut:
        return 124
    return 0 if not final["failed_parts"] else 1


if __name__ == "__main__":
    sys.exit(main())
