"""First open of a real token store with checksums (issue 42, finding 6): a full verification vs a
stamped open on the same host vs an open in the same process.

    .venv/bin/python benchmarks/bench_store_checksums.py PATH_OF_A_PREPARED_STORE

Works on a copy in a temporary folder (the store itself is never written)."""
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import cbscore.data.checksums as c

src = Path(sys.argv[1])
with tempfile.TemporaryDirectory() as tmp:
    path = Path(tmp) / "store"
    shutil.copytree(src, path)
    t = time.perf_counter()
    c.add_to_manifest(path)
    add_s = time.perf_counter() - t
    size = sum((path / f).stat().st_size for f in c.FILES)
    runs = []
    for _ in range(5):
        c._seen.clear()
        shutil.rmtree(Path(tmp) / "stamps", ignore_errors=True)
        t = time.perf_counter()
        chk = c.verified(path, Path(tmp) / "stamps")
        runs.append(time.perf_counter() - t)
        assert chk.ok and not chk.from_stamp
    stamped = []
    for _ in range(5):
        c._seen.clear()
        t = time.perf_counter()
        chk = c.verified(path, Path(tmp) / "stamps")
        stamped.append(time.perf_counter() - t)
        assert chk.from_stamp
    t = time.perf_counter()
    for _ in range(100):
        c.verified(path, Path(tmp) / "stamps")
    memo = (time.perf_counter() - t) / 100
    print(json.dumps({"store": str(src), "bytes": size, "add_checksums_s": round(add_s, 4),
                      "first_open_verify_s_median": round(sorted(runs)[2], 4),
                      "first_open_MiB_per_s": round(size / 2**20 / sorted(runs)[2], 1),
                      "stamped_open_s_median": round(sorted(stamped)[2], 5), "same_process_open_s": round(memo, 7)}, indent=1))
