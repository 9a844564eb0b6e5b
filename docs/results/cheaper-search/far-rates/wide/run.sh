#!/bin/bash
# The wide-grid pair of issue 20's stop_far_rates (seven rates, 0.0015-0.096, 64x wide like the
# paper's 32x grid), as it ran: from the root of a fresh clone after `make install`. One lab, one
# worker running two trials at once (one torch thread each), both specs launched together so that
# they share the machine alike. Stop the worker and the watcher afterwards by this script's process
# group (kill -INT -- -PGID).
set -u
DIR=$(dirname "$0")
export CBS_HOME=$PWD/.cbs/home
mkdir -p "$CBS_HOME/mlflow"
export CBS_TRACKING_URI=sqlite:///$CBS_HOME/mlflow/mlflow.db
export HF_HOME=$PWD/.cache/hf HF_HUB_OFFLINE=1 MLFLOW_DISABLE_TELEMETRY=true
CBS=.venv/bin/cbs
date -u +"start %FT%TZ"
$CBS data prepare
$CBS worker --concurrency 2 > .cbs/worker.log 2>&1 &
$CBS study watch > .cbs/watch.log 2>&1 &
sleep 20
for mode in on off; do $CBS study launch "$DIR/spec-$mode.yaml"; done
for mode in on off; do
  while ! $CBS study status "far-rates-wide-$mode" 2>/dev/null | grep -q "^study .*: done"; do sleep 30; done
  date -u +"far-rates-wide-$mode done %FT%TZ"
done
for mode in on off; do
  $CBS study status "far-rates-wide-$mode"
  $CBS study report "far-rates-wide-$mode" --out ".cbs/study-$mode"
done
