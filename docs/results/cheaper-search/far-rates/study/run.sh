#!/bin/bash
# The stop_far_rates study (issue 20), as it ran: from the root of a fresh clone after `make install`,
# with this folder's spec.yaml. One worker, the runner, the launch, a wait for "done", the report.
# Stop the worker and the runner afterwards by this script's process group (kill -INT -- -PGID).
set -u
SPEC=${1:?usage: run.sh PATH/TO/spec.yaml}
NAME=$(sed -n "s/^name: //p" "$SPEC")
export CBS_HOME=$PWD/.cbs/home
mkdir -p "$CBS_HOME/mlflow"
export CBS_TRACKING_URI=sqlite:///$CBS_HOME/mlflow/mlflow.db
export HF_HOME=$PWD/.cache/hf HF_HUB_OFFLINE=1 MLFLOW_DISABLE_TELEMETRY=true
CBS=.venv/bin/cbs
date -u +"start %FT%TZ"
$CBS data prepare
$CBS worker --concurrency 1 > .cbs/worker.log 2>&1 &
$CBS study watch > .cbs/watch.log 2>&1 &
sleep 20
$CBS study launch "$SPEC"
while ! $CBS study status "$NAME" 2>/dev/null | grep -q "^study .*: done"; do sleep 30; done
date -u +"done %FT%TZ"
$CBS study status "$NAME"
$CBS study report "$NAME" --out ".cbs/study-$NAME"
