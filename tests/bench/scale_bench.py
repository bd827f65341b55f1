#!/usr/bin/env python3
"""Scale benchmark: peak memory and step time per rank for replicated, FSDP and CP meshes, with and
without activation checkpointing, through ringtrain-run. Standard library only.

  tests/bench/scale_bench.py [--bin build/bin] [--seq-len 8192] [--steps 3] [--quick]

Meshes (replicate, shard, cp) on 4 ranks: (4,1,1) replicated, (1,4,1) and (1,2,2) FSDP, (1,1,4) CP
alone (replicated weights); each with activation_checkpoint.mode none and full, on a wider debug
model (dim 256, 4 layers, vocab 4096) with one sequence per data-parallel rank. Each case trains
`--steps` steps; the first is a warm-up and is left out. "tensor MiB" is the step's peak of live
tensor memory on the rank (`device_memory_peak_bytes`: the CPU ranks' counting allocator, the CUDA
caching allocator on GPUs), "RSS MiB" the process's peak resident set (LibTorch's libraries
included). Ratios are against the replicated case without AC of the same run.
This machine has 2 cores: with 4 ranks two share each core, so step times are comparable only
within one run.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MESHES = [(4, 1, 1), (1, 4, 1), (1, 2, 2), (1, 1, 4)]


def run_case(args, name, overrides, out_dir):
    jsonl = os.path.join(out_dir, name + ".jsonl")
    cmd = [os.path.join(args.bin, "ringtrain-run"), "--nproc", "4",
           os.path.join(ROOT, "configs", "debug_model.toml"),
           "--model.dim=256", "--model.n_layers=4", "--model.vocab_size=4096",
           f"--training.seq_len={args.seq_len}", f"--model.max_seq_len={args.seq_len}",
           "--training.local_batch_size=1", f"--training.steps={args.steps}",
           "--lr_scheduler.warmup_steps=0", "--lr_scheduler.decay_ratio=0",
           "--metrics.log_freq=1000", f"--metrics.jsonl={jsonl}"] + overrides
    print(f"  {name}: {' '.join(overrides)}", flush=True)
    start = time.time()
    with open(os.path.join(out_dir, name + ".log"), "w") as log:
        code = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
    if code != 0:
        sys.exit(f"case {name} failed (exit {code}); see {out_dir}/{name}.log")
    records = [json.loads(line) for line in open(jsonl)]
    measured = records[1:] if len(records) > 1 else records
    ranks = range(len(measured[0]["ranks"]))
    peak = lambda key: max(rec["ranks"][r][key] for rec in measured for r in ranks)
    return {
        "name": name, "wall": time.time() - start,
        "step": sum(rec["step_seconds"] for rec in measured) / len(measured),
        "wait": max(sum(rec["ranks"][r]["comm_wait_seconds"] for rec in measured) / len(measured)
                    for r in ranks),
        "tensor": peak("device_memory_peak_bytes"), "rss": peak("peak_memory_bytes"),
        "loss": records[-1]["loss"],
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    p.add_argument("--seq-len", type=int, default=8192)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="seq 1024, 2 steps")
    args = p.parse_args()
    if args.quick:
        args.seq_len, args.steps = 1024, 2
    out_dir = tempfile.mkdtemp(prefix="ringtrain-scale-bench-")
    print(f"dim 256, 4 layers, vocab 4096, seq_len {args.seq_len}, one sequence per dp rank, "
          f"{args.steps} steps (first left out), 4 ranks on {os.cpu_count()} cores; logs in {out_dir}")
    results = []
    for replicate, shard, cp in MESHES:
        for ac in ("none", "full"):
            name = f"r{replicate}_s{shard}_c{cp}_ac-{ac}"
            overrides = [f"--parallelism.data_parallel_replicate_degree={replicate}",
                         f"--parallelism.data_parallel_shard_degree={shard}",
                         f"--parallelism.context_parallel_degree={cp}",
                         f"--activation_checkpoint.mode={ac}"]
            results.append(run_case(args, name, overrides, out_dir))

    MiB = 1024 * 1024
    base = results[0]
    print("\n(replicate, shard, cp) AC     tensor MiB  ×base   RSS MiB   step s  ×base   comm wait s")
    for r in results:
        print(f"{r['name']:<26} {r['tensor'] / MiB:9.1f}  {r['tensor'] / base['tensor']:5.2f}  "
              f"{r['rss'] / MiB:8.1f}  {r['step']:7.2f}  {r['step'] / base['step']:5.2f}  {r['wait']:9.2f}")


if __name__ == "__main__":
    main()
