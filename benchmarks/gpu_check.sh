#!/usr/bin/env bash
# The one-shot GPU check (issue 23): in at most 8 minutes on one H200, with nothing installed
# (torch, numpy and scipy; cbscore through PYTHONPATH), nine parts each in its own process with its
# own hard time limit, one JSON line per part appended to $OUT/gpu_check.jsonl (or --out FILE) as
# it ends, and a summary line: MFU of 85M and 151M compiled against the goal (>= 45%), failed
# parts. Parts and keys: docs/operating.md, "GPU check", and benchmarks/gpu_check.py.
#
#   bash benchmarks/gpu_check.sh                  # on a GPU host
#   bash benchmarks/gpu_check.sh --dry-run        # each part's time budget and the total
#   bash benchmarks/gpu_check.sh --cpu-smoke      # the rehearsal: tiny models on the CPU
#
# It uses .venv when there is one, else $PYTHON or python3. Without a usable GPU it prints one line
# and exits 2.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3)"
export CUDA_DEVICE_ORDER=PCI_BUS_ID MLFLOW_DISABLE_TELEMETRY=true HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

case " $* " in
  *" --dry-run "* | *" --cpu-smoke "* | *" --help "* | *" -h "*) exec "$PY" benchmarks/gpu_check.py "$@" ;;
esac
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q "^GPU "; then
  echo "gpu_check: no NVIDIA GPU visible (nvidia-smi is missing or lists none): nothing to check"
  exit 2
fi
if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" >/dev/null 2>&1; then
  echo "gpu_check: nvidia-smi lists a GPU but $PY's torch cannot use it (a CPU-only build? run make, which requires a CUDA build here)"
  exit 2
fi
# TERM at 8 minutes: the driver kills the running part, records it as cut and writes the summary
exec timeout --signal=TERM --kill-after=10 480 "$PY" benchmarks/gpu_check.py "$@"
