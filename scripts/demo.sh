#!/usr/bin/env bash
# The main job: a local ringtrain cluster on 127.0.0.1 — the coordinator and 4 worker agents
# (`ringctl up`) — trains the debug model (configs/debug_model.toml) with context parallelism
# cp = 4 (ring attention over Gloo, head-tail sharding), and the losses stream to this terminal
# (`ringctl submit --follow`). The cluster stops when the job ends or on Ctrl-C.
# Installs what is missing and builds first. Extra arguments are config overrides, e.g.
#   scripts/demo.sh --training.steps=200
# WORKERS=4 CP=4 (or CP=2 with --parallelism.data_parallel_replicate_degree=2) and
# RINGTRAIN_PORT=50051 choose the pool, the ring size and the coordinator port.
set -euo pipefail
cd "$(dirname "$0")/.."
WORKERS=${WORKERS:-4}
CP=${CP:-4}
PORT=${RINGTRAIN_PORT:-50051}
ADDR=127.0.0.1:$PORT
# Something already listening there (another cluster's coordinator, most likely) would take the
# job: `ringctl up` could not listen, and the job would go to that other cluster. Stop first.
if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
  echo "demo: something already answers on $ADDR (another ringtrain cluster?); nothing was" \
    "started or submitted. Stop it (\`ringctl workers --coordinator $ADDR\` shows whether it is" \
    "a coordinator), or choose another port: RINGTRAIN_PORT=50061 scripts/demo.sh" >&2
  exit 1
fi
scripts/setup.sh
echo "demo: building the coordinator, the agent, the trainer and ringctl (the first build takes several minutes)"
scripts/build.sh --target ringtrain-coordinator ringtrain-worker ringtrain-trainer ringctl \
  > build.log 2>&1 || { tail -50 build.log; exit 1; }
bin=build/bin
"$bin/ringctl" up --workers "$WORKERS" --listen "$ADDR" --dir outputs/cluster &
up=$!
trap 'kill -TERM "$up" 2>/dev/null; wait "$up" 2>/dev/null || true' EXIT
"$bin/ringctl" workers --coordinator "$ADDR" --wait "$WORKERS" --timeout 60 > /dev/null
# The workers that answered are this cluster's only if its `ringctl up` is still running.
kill -0 "$up" 2>/dev/null || { echo "demo: ringctl up stopped (see above); nothing submitted" >&2; exit 1; }
"$bin/ringctl" submit configs/debug_model.toml --coordinator "$ADDR" \
  --parallelism.context_parallel_degree="$CP" --follow "$@"
