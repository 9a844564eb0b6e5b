"""Check a chaos run's histories again from kept MLflow stores, with today's ``chaos_history``.

The chaos phase's ``$CBS_HOME`` is a tmpfs that ``chaos.py`` unmounts at its end, so a run's
histories can be checked again only from a copy of its store taken while it ran (on the ``fs``
backend, an SQLite ``mlflow.db``; ``sqlite3 SRC ".backup DST"`` gives a consistent one). The calm
phase's home stays on disk.

    .venv/bin/python benchmarks/chaos_recheck.py CALM_MLFLOW_DB CHAOS_MLFLOW_DB [--json out.json]

It prints (and writes) what ``chaos.py``'s report holds under the same keys:
``histories_with_gaps_or_duplicates``, ``histories_unlike_calm``, ``trials_in_one_phase_only``,
``budgets_differ`` and the counts checked.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chaos_history import compare_histories, read_histories  # noqa: E402

STUDIES = ("chaos-grid", "chaos-optuna")


def recheck(calm_db: Path, chaos_db: Path) -> dict:
    """The history checks of two kept phases' stores (both studies)."""
    calm, chaos = [], []
    for study in STUDIES:
        calm += read_histories(f"sqlite:///{calm_db.resolve()}", study)
        chaos += read_histories(f"sqlite:///{chaos_db.resolve()}", study)
    return compare_histories(calm, chaos)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("calm_db", type=Path)
    parser.add_argument("chaos_db", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    out = recheck(args.calm_db, args.chaos_db)
    text = json.dumps(out, indent=2, default=str)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0 if not (out["histories_with_gaps_or_duplicates"] or out["histories_unlike_calm"]
                     or out["trials_in_one_phase_only"]) else 1


if __name__ == "__main__":
    sys.exit(main())
