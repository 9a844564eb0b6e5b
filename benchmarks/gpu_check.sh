#!/usr/bin/env bash
# The one-call GPU check (issue 13): on a GPU host, in at most 8 minutes on one GPU, prints one JSON
# object on stdout: MFU and tokens/s of the 85M and 151M presets in bf16 with and without
# torch.compile, `pytest -m gpu`, one real trial through `cbs worker --gpu 0` on the filesystem broker,
# and a 2-rank DDP trial when two GPUs are visible (keys: README, "GPU check"). Progress goes to stderr.
#
#   bash benchmarks/gpu_check.sh > gpu_check.json
#
# Installs nothing: it uses .venv (or $PYTHON). Without a usable GPU it prints one line and exits 2.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3)"

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q "^GPU "; then
  echo "gpu_check: no NVIDIA GPU visible (nvidia-smi is missing or lists none): nothing to check"
  exit 2
fi
if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" >/dev/null 2>&1; then
  echo "gpu_check: nvidia-smi lists a GPU but $PY's torch cannot use it (a CPU-only build? run make, which requires a CUDA build here)"
  exit 2
fi
export CUDA_DEVICE_ORDER=PCI_BUS_ID MLFLOW_DISABLE_TELEMETRY=true HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec timeout --signal=TERM --kill-after=10 480 "$PY" benchmarks/gpu_check.py
