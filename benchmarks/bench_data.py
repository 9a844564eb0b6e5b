"""Time ``prepare`` of the built-in corpus from scratch and print the corpus size.

    python benchmarks/bench_data.py [--vocab-size 8192] [--context 512] [--json]

Builds into a fresh temporary folder (never the user's stores), then times a second, no-op
``prepare`` and one batch read, and prints documents, characters and tokens per split.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="builtin")
    parser.add_argument("--vocab-size", type=int, default=8192)
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from cbscore.data import DataConfig, prepare

    with tempfile.TemporaryDirectory(prefix="bench-data-") as tmp:
        config = DataConfig(source=args.source, vocab_size=args.vocab_size, store_dir=str(Path(tmp) / "store"))
        started, cpu_started = time.perf_counter(), time.process_time()
        store = prepare(config)
        build_s, build_cpu_s = time.perf_counter() - started, time.process_time() - cpu_started

        started = time.perf_counter()
        prepare(config)
        noop_s = time.perf_counter() - started

        manifest = store.manifest
        stream = store.train_stream(args.context, seed=0)
        started = time.perf_counter()
        stream.batch(1, args.batch_size)
        batch_ms = (time.perf_counter() - started) * 1e3

        splits = manifest["splits"]
        result = {
            "source": args.source,
            "vocab_size": store.vocab_size,
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_1min": round(os.getloadavg()[0], 2),
            "prepare_from_scratch_s": round(build_s, 2),
            "prepare_cpu_s_all_threads": round(build_cpu_s, 2),
            "prepare_phases_s": manifest["build_phase_seconds"],
            "prepare_again_noop_s": round(noop_s, 4),
            "tokenizer_trained_on_characters": manifest["tokenizer_training"].get("trained_on_characters"),
            f"batch_{args.batch_size}x{args.context + 1}_ms": round(batch_ms, 2),
            "documents": {k: v["documents"] for k, v in splits.items()},
            "characters": {k: v["characters"] for k, v in splits.items()},
            "tokens": {k: v["tokens"] for k, v in splits.items()},
            "train_windows": stream.n_windows,
            "chars_per_token": round(
                sum(v["characters"] for v in splits.values()) / sum(v["tokens"] for v in splits.values()), 3
            ),
        }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        width = max(len(k) for k in result)
        for key, value in result.items():
            print(f"{key:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
