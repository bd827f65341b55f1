#!/usr/bin/env bash
# Checkpoint save and load figures (not part of the test suite): for the debug model and a model of
# about 1.1 GB of parameters and AdamW state, per mesh, the training stall and write time of a
# sync and an async save, and the load time, bytes read and CPU tensor memory a resume adds — the
# trainer's own log lines ("rank R saving its part …", "saved checkpoint …", "rank R loaded its part
# …"), measured on this machine with ringtrain-run. Usage: tests/bench/checkpoint_bench.sh [BUILD]
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-build}/bin
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
big=(--model.dim=1024 --model.n_layers=6 --model.n_heads=16 --model.n_kv_heads=16
     --model.vocab_size=8192 --training.seq_len=64)
run() {  # NAME NPROC STEPS ARGS...: two saves (steps 1 and 2), then a resume that saves step 3
  local name=$1 nproc=$2
  shift 2
  for mode in disabled async; do
    local dir="$work/$name-$mode"
    "$bin/ringtrain-run" --nproc "$nproc" configs/debug_model.toml --training.steps=2 \
      --training.local_batch_size=1 --checkpoint.enable=true --checkpoint.folder="$dir" \
      --checkpoint.interval=1 --checkpoint.async_mode=$mode "$@" > "$dir.log" 2>&1
    "$bin/ringtrain-run" --nproc "$nproc" configs/debug_model.toml --training.steps=3 \
      --training.local_batch_size=1 --checkpoint.enable=true --checkpoint.folder="$dir" \
      --checkpoint.interval=1 --checkpoint.async_mode=$mode "$@" > "$dir.resume.log" 2>&1
    # Step 2's save (the first one allocates async staging); rank 0's figures.
    stall=$(grep -o "saved checkpoint [^ ]*step-2: training stalled [0-9.]* s, writing took [0-9.]* s ([0-9.]* MB" "$dir.log" | head -1)
    load=$(grep -o "rank 0 loaded its part of [^ ]* in [0-9.]* s: [0-9]* bytes read, CPU tensor memory +[0-9]* bytes" "$dir.resume.log" | head -1)
    smem=$(grep -o "rank 0 saving its part of step 2: [0-9]* bytes, training stalled [0-9.]* s, CPU tensor memory +[0-9]* bytes" "$dir.log" | head -1)
    printf '%-22s %-8s | %s\n  save memory: %s\n  load: %s\n' "$name" "$mode" \
      "${stall#saved checkpoint }" "${smem#rank 0 saving its part of step 2: }" \
      "${load#rank 0 loaded its part of }"
  done
}
run debug-1rank 1
run debug-shard2 2 --parallelism.data_parallel_shard_degree=2
run debug-shard4 4 --parallelism.data_parallel_shard_degree=4
run 1.1GB-1rank 1 "${big[@]}"
run 1.1GB-shard2 2 --parallelism.data_parallel_shard_degree=2 "${big[@]}"
run 1.1GB-shard4 4 --parallelism.data_parallel_shard_degree=4 "${big[@]}"
