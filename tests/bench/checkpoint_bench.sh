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
run() {  # NAME NPROC ARGS...: saves at steps 2 and 4, then a resume from step 4 that saves step 6
  local name=$1 nproc=$2
  shift 2
  for mode in disabled async; do
    local dir="$work/$name-$mode"
    "$bin/ringtrain-run" --nproc "$nproc" configs/debug_model.toml --training.steps=4 \
      --training.local_batch_size=1 --checkpoint.enable=true --checkpoint.folder="$dir" \
      --checkpoint.interval=2 --checkpoint.async_mode=$mode "$@" > "$dir.log" 2>&1
    "$bin/ringtrain-run" --nproc "$nproc" configs/debug_model.toml --training.steps=6 \
      --training.local_batch_size=1 --checkpoint.enable=true --checkpoint.folder="$dir" \
      --checkpoint.interval=2 --checkpoint.async_mode=$mode "$@" > "$dir.resume.log" 2>&1
    # Rank 0's figures: step 2's save (the first: async staging is allocated) and step 4's (the
    # buffers reused; the step-2 write had two steps to finish).
    for step in 2 4; do
      saved=$(grep -o "saved checkpoint [^ ]*step-$step: training stalled [0-9.]* s, writing took [0-9.]* s ([0-9.]* MB" "$dir.log" | head -1)
      memory=$(grep -o "rank 0 saving its part of step $step: [0-9]* bytes, training stalled [0-9.]* s, CPU tensor memory +[0-9]* bytes" "$dir.log" | head -1)
      printf '%-13s %-8s step %s: stall %s s, write %s s, %s MB, CPU tensor memory +%s bytes\n' \
        "$name" "$mode" "$step" "$(sed -E 's/.*stalled ([0-9.]*) s,.*/\1/' <<< "$saved")" \
        "$(sed -E 's/.*took ([0-9.]*) s.*/\1/' <<< "$saved")" "$(sed -E 's/.*\(([0-9.]*) MB/\1/' <<< "$saved")" \
        "$(sed -E 's/.*\+([0-9]*) bytes/\1/' <<< "$memory")"
    done
    load=$(grep -o "rank 0 loaded its part of [^ ]* in [0-9.]* s: [0-9]* bytes read, CPU tensor memory +[0-9]* bytes" "$dir.resume.log" | head -1)
    printf '%-13s %-8s load:   %s\n' "$name" "$mode" "${load#rank 0 loaded its part of *step-4 }"
  done
}
run debug-1rank 1
run debug-shard2 2 --parallelism.data_parallel_shard_degree=2
run debug-shard4 4 --parallelism.data_parallel_shard_degree=4
run 1.1GB-1rank 1 "${big[@]}"
run 1.1GB-shard2 2 --parallelism.data_parallel_shard_degree=2 "${big[@]}"
run 1.1GB-shard4 4 --parallelism.data_parallel_shard_degree=4 "${big[@]}"
