"""Run every benchmark script in turn and print what each reports (`make bench`).

Figures are measured, never asserted: compare them with the tables in docs/ (user guide, operating a lab, status).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = ("bench_fit.py", "bench_simulate.py", "bench_data.py", "bench_train.py", "bench_gns.py", "bench_workers.py",
           "bench_app.py")


def main() -> int:
    failed = []
    for name in SCRIPTS:
        print(f"\n=== {name} ===", flush=True)
        if subprocess.call([sys.executable, str(HERE / name)]) != 0:
            failed.append(name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
