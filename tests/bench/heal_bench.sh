#!/usr/bin/env bash
# Healing-in-place figures (not part of the test suite), for the debug model and a model of about
# 1.1 GB of parameters and AdamW state, two ranks with cp 2 on this machine, trainers started by
# hand (no coordinator: its detection and scheduling come on top, see heal_in_place_test's output):
#   snapshot cost   mean step_seconds (rank 0's records) with checkpoint.memory_interval = 5
#                   against 0, over steps 3.. and over steps 13.. (the first two snapshots map their
#                   buffers fresh; later ones reuse them), and rank 0's resident peak. A mean, not a
#                   median: a snapshot slows two steps in five, which a median hides;
#   heal            rank 1 SIGKILLed after step 8; a replacement started as generation 1 and
#                   rank 0 told to rejoin: seconds from the kill to rank 0's first record of the
#                   healed world;
#   storage         both ranks SIGKILLed after step 8 and started again from the checkpoint of
#                   step 6 (checkpoint.interval = 3): seconds from the kill to the first record.
# Usage: tests/bench/heal_bench.sh [BUILD] [MODELS] (MODELS: "debug 1.1GB" by default)
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-build}/bin
work=$(mktemp -d)
pids=()
# On a failure the trainers' logs stay in the work folder, whose name is printed.
trap 'rc=$?; kill -9 "${pids[@]}" 2>/dev/null || true
      if [ $rc = 0 ]; then rm -rf "$work"; else echo "heal_bench: failed (exit $rc); logs in $work" >&2; fi' EXIT
big=(--model.dim=1024 --model.n_layers=6 --model.n_heads=16 --model.n_kv_heads=16
     --model.vocab_size=8192 --training.seq_len=64)
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
now() { date +%s.%N; }
records() { [ -f "$1" ] && wc -l < "$1" || echo 0; }
step_costs() {  # JSONL → mean step_seconds of steps 3.. and of steps 13.., and the resident peak
  python3 - "$1" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
mean = lambda first: statistics.mean(r["step_seconds"] for r in rows if r["step"] >= first)
print(f'{mean(3):.4f} s/step (steps 3..), {mean(13):.4f} s/step (steps 13.., after the first two '
      f'snapshots), resident peak {rows[-1]["peak_memory_bytes"] / 2**20:.0f} MiB')
PY
}
rank() {  # NAME RANK PORT ARGS...: a trainer in the background, its records in $dir/NAME.jsonl
  local name=$1 r=$2 p=$3
  shift 3
  RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p OMP_NUM_THREADS=1 \
    RINGTRAIN_CONTROL_FILE="$dir/$name.control" "$bin/ringtrain-trainer" configs/debug_model.toml \
    --parallelism.context_parallel_degree=2 --metrics.jsonl="$dir/$name.jsonl" "$@" \
    > "$dir/$name.log" 2>&1 &
  pids+=($!)
}
wait_records() {  # FILE N
  until [ "$(records "$1")" -ge "$2" ]; do sleep 0.02; done
}

for model in ${2:-debug 1.1GB}; do
  # Each model's files in a folder of their own: a name reused would find the last model's records.
  dir="$work/$model"
  mkdir -p "$dir"
  extra=()
  [ "$model" = 1.1GB ] && extra=("${big[@]}")
  steps=40
  [ "$model" = 1.1GB ] && steps=30
  for k in 0 5; do
    "$bin/ringtrain-run" --nproc 2 configs/debug_model.toml --parallelism.context_parallel_degree=2 \
      --training.steps=$steps --checkpoint.memory_interval=$k --metrics.jsonl="$dir/cost$k.jsonl" \
      "${extra[@]}" > "$dir/cost$k.log" 2>&1
    printf '%-6s snapshot cost, memory_interval %s: %s\n' "$model" "$k" "$(step_costs "$dir/cost$k.jsonl")"
  done
  grep -o "in-memory snapshots every .*" "$dir/cost5.log" | head -1 | sed "s/^/$model        /"

  # Heal in place.
  p=$(port)
  rank heal0 0 "$p" --training.steps=16 --checkpoint.memory_interval=3 "${extra[@]}"
  rank heal1 1 "$p" --training.steps=16 --checkpoint.memory_interval=3 "${extra[@]}"
  wait_records "$dir/heal0.jsonl" 8
  kill -9 "${pids[-1]}"
  t0=$(now)
  p=$(port)
  RINGTRAIN_HEAL_GENERATION=1 rank replacement 1 "$p" --training.steps=16 \
    --checkpoint.memory_interval=3 "${extra[@]}"
  printf '{"generation": 1, "master_addr": "127.0.0.1", "master_port": %s}\n' "$p" \
    > "$dir/heal0.control"
  until grep -q '"generation": 1' "$dir/heal0.jsonl"; do sleep 0.02; done
  t1=$(now)
  wait "${pids[-3]}" "${pids[-1]}"
  printf '%-6s heal in place: %.2f s from the kill to training again (%s)\n' "$model" \
    "$(echo "$t1 - $t0" | bc)" "$(grep -o 'rolled back to the step [0-9]* snapshot' "$dir/heal0.log")"

  # Restart from storage.
  p=$(port)
  ckpt=(--training.steps=16 --checkpoint.enable=true --checkpoint.interval=3
        --checkpoint.folder="$dir/ckpt")
  rank store0 0 "$p" "${ckpt[@]}" "${extra[@]}"
  rank store1 1 "$p" "${ckpt[@]}" "${extra[@]}"
  wait_records "$dir/store0.jsonl" 8
  kill -9 "${pids[-1]}" "${pids[-2]}"
  t0=$(now)
  p=$(port)
  rank restart0 0 "$p" "${ckpt[@]}" "${extra[@]}"
  rank restart1 1 "$p" "${ckpt[@]}" "${extra[@]}"
  wait_records "$dir/restart0.jsonl" 1
  t1=$(now)
  wait "${pids[-1]}" "${pids[-2]}"
  printf '%-6s restart from storage: %.2f s from the kill to training again (%s)\n' "$model" \
    "$(echo "$t1 - $t0" | bc)" "$(grep -o 'resumed from .*' "$dir/restart0.log" | sed 's/.*(/(/')"
done
