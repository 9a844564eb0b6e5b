"""The worker packages import one way (issue 25): infra <- tracking <- studies <- trials, studies <-
query, and only the CLI modules at the top import them all."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "workers"
#: Which worker packages each may import (its own always).
ALLOWED = {
    "infra": set(),
    "tracking": {"infra"},
    "studies": {"infra", "tracking"},
    "trials": {"infra", "tracking", "studies"},
    "query": {"infra", "tracking", "studies"},
}


def _imported_packages(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
        for name in names:
            parts = name.split(".")
            if parts[0] == "workers" and len(parts) > 1:
                out.add(parts[1])
    return out


def test_every_module_of_workers_lives_in_a_package_by_role():
    top = sorted(p.name for p in ROOT.glob("*.py") if p.name != "__init__.py")
    # Only the CLI layer sits at the top (it may import every package): the commands and what they run.
    assert top == ["cli.py", "cli_processes.py", "cli_simulate.py", "cli_slurm.py", "cli_slurm_jobs.py"]
    assert sorted(p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith("_")) == sorted(ALLOWED)


def test_worker_packages_import_one_way():
    bad = []
    for package, allowed in ALLOWED.items():
        for path in sorted((ROOT / package).rglob("*.py")):
            for used in _imported_packages(path) - allowed - {package}:
                bad.append(f"{path.relative_to(ROOT.parent)} imports workers.{used}")
    assert not bad, "\n".join(bad)
