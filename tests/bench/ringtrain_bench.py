#!/usr/bin/env python3
"""ringtrain-bench: the performance comparisons of issues 16, 30 and 31, in one go on the machine at hand.

  ringtrain-bench [--quick] [--out results.json] [--markdown RESULTS.md] [--only 1,2,...]
                  [--threads 2] [--bin DIR] [--kernels cpu_flash,torch_flash,tiled] [--keep DIR]

  1  step time and peak memory vs PyTorch eager (SDPA, and the plain-math attention) and under
     torch.compile (inductor, SDPA; skipped, with a line saying why, without a C++ compiler)
  2  the machine's float32 GEMM rate; attention fwd+bwd rate per head dim; the step's MFU
  3  step time and peak memory per rank vs sequence length, cp = 1, 2, 4
  4  cp = 2 vs cp = 1 at a long sequence, one thread per rank
  5  share of ring transfer hidden behind compute, alltoall vs allgather
  6  per-rank attention compute max/min at cp = 4, headtail vs none
  7  the same job through the coordinator vs ringtrain-run
  8  packed documents: each balancer's work imbalance, block_causal vs causal, ring bytes
  9  context-parallel methods at cp = 4: ring (alltoall, allgather), ulysses, hybrid 2 x 2

Prints each run as it goes, then a table (figure, ours, peer, ratio, target, met) and writes the
rows, the raw figures and the machine to --out as JSON. Exits 1 when a run fails or a figure is
missing (not when a target is missed), 2 on bad flags. Standard library only; the PyTorch peer
runs on the project's venv Python. tests/bench/README.md says how each figure is measured.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_items import ITEMS, TITLES, Bench, machine  # noqa: E402
from bench_runner import ROOT, CaseError, Runner  # noqa: E402

# The block kernels, ours first (its figures carry the targets); those the build knows are run.
KERNELS = ["cpu_flash", "torch_flash", "tiled"]


def parse_args(argv):
    p = argparse.ArgumentParser(prog="ringtrain-bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="every comparison at a tiny size")
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument("--markdown", help="write the table as Markdown here (tests/bench/RESULTS.md)")
    p.add_argument("--only", help="comma-separated items to run (default: all, 1-9)")
    p.add_argument("--threads", type=int, default=2,
                   help="intra-op threads of single-rank runs and the GEMM (default 2)")
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"),
                   help="folder of ringtrain-run, ringtrain-trainer, attention_bench, ...")
    p.add_argument("--python", default=os.path.join(ROOT, ".venv", "bin", "python"),
                   help="Python with torch, for the peer and the weights (default: .venv)")
    p.add_argument("--kernels", help=f"block kernels, ours first (default: those of "
                                     f"{','.join(KERNELS)} the build knows)")
    p.add_argument("--keep", help="keep the runs' logs and records in this folder")
    p.add_argument("--version", action="store_true",
                   help="print the version and the commit of the build it runs (--bin), and exit")
    args = p.parse_args(argv)
    try:
        args.items = sorted({int(i) for i in args.only.split(",")}) if args.only else list(ITEMS)
    except ValueError:
        p.error(f"--only {args.only!r}: give item numbers 1-9, e.g. --only 1,3")
    if not set(args.items) <= set(ITEMS) or args.threads < 1:
        p.error(f"--only {args.only!r} / --threads {args.threads}: items are 1-9, threads >= 1")
    return args


def fmt(value, pattern):
    if value is None:
        return "-"
    return pattern.format(value)


HEADER = ("#", "figure", "ours", "peer", "ratio", "target", "met")


def table_lines(rows):
    return [(str(r["item"]), r["figure"], fmt(r["ours"], r["fmt"]), fmt(r["peer"], r["fmt"]),
             fmt(r["ratio"], "{:.3f}"), r["target"] or "",
             {True: "yes", False: "NO", None: ""}[r["met"]]) for r in rows]


def write_markdown(path, info, rows, errors):
    with open(path, "w") as f:
        f.write(f"# ringtrain-bench results\n\n{info['date']}, commit {info['commit']}, "
                f"{info['cpu']} ({info['cores']} cores, {info['memory_available_gib']} GiB "
                f"available), {info['threads']} threads, kernels {', '.join(info['kernels'])}, "
                f"{info['size']} run in {info['seconds']:.0f} s "
                f"(`build/bin/ringtrain-bench --markdown tests/bench/RESULTS.md`).\n\n")
        f.write("| " + " | ".join(HEADER) + " |\n|" + "---|" * len(HEADER) + "\n")
        for line in table_lines(rows):
            f.write("| " + " | ".join(line) + " |\n")
        if errors:
            f.write("\nFailed:\n\n" + "".join(f"- {e.splitlines()[0]}\n" for e in errors))


def print_table(rows):
    header = HEADER
    lines = table_lines(rows)
    widths = [max(len(x[i]) for x in lines + [header]) for i in range(len(header))]
    for line in [header] + lines:
        print("  ".join(c.ljust(w) if i < 2 else c.rjust(w) if i < 5 else c.ljust(w)
                        for i, (c, w) in enumerate(zip(line, widths))).rstrip())


def commit():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def version_line(bin_dir):
    """The build's version line, as its binaries print it, under this script's name."""
    line = subprocess.run([os.path.join(bin_dir, "ringtrain-run"), "--version"], check=True,
                          capture_output=True, text=True).stdout.strip()
    return "ringtrain-bench" + line[len("ringtrain-run"):]


def main(argv=None):
    args = parse_args(argv)
    if args.version:
        try:
            print(version_line(args.bin))
        except (OSError, subprocess.CalledProcessError) as e:
            sys.exit(f"ringtrain-bench: cannot run {args.bin}/ringtrain-run --version ({e})")
        return 0
    out_dir = args.keep or tempfile.mkdtemp(prefix="ringtrain-bench-")
    os.makedirs(out_dir, exist_ok=True)
    runner = Runner(args.bin, out_dir, args.python, log=print)
    try:
        known = runner.known_kernels()
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"ringtrain-bench: cannot run {args.bin}/attention_bench ({e}); build the "
                 f"attention_bench target or pass --bin DIR")
    kernels = args.kernels.split(",") if args.kernels else [k for k in KERNELS if k in known]
    unknown = [k for k in kernels if k not in known]
    if unknown or not kernels:
        print(f"ringtrain-bench: --kernels: unknown {unknown}; this build knows "
              f"{', '.join(known)}", file=sys.stderr)
        return 2
    bench = Bench(runner, "quick" if args.quick else "full", args.threads, kernels)
    info = dict(machine(), date=datetime.datetime.now(datetime.timezone.utc).isoformat(
        timespec="seconds"), commit=commit(), threads=args.threads, kernels=kernels,
        size="quick" if args.quick else "full")
    print(f"ringtrain-bench ({info['size']}): {info['cpu']}, {info['cores']} cores, "
          f"{info['memory_available_gib']} GiB available; commit {info['commit']}; "
          f"{args.threads} threads; kernels {', '.join(kernels)}; logs in {out_dir}", flush=True)
    start = time.time()
    for item in args.items:
        print(f"{item}. {TITLES[item]}", flush=True)
        before = len(bench.rows)
        item_start = time.time()
        try:
            ITEMS[item](bench)
        except CaseError as e:
            bench.errors.append(f"item {item}: {e}")
            print(f"  item {item} FAILED: {e}", flush=True)
        except Exception:  # a bug or an unexpected output: reported, the other items still run
            bench.errors.append(f"item {item}: {traceback.format_exc()}")
            print(f"  item {item} FAILED:\n{traceback.format_exc()}", flush=True)
        if len(bench.rows) == before and not any(e.startswith(f"item {item}:")
                                                 for e in bench.errors):
            bench.errors.append(f"item {item}: no figure")
        print(f"  item {item}: {time.time() - item_start:.0f} s", flush=True)
    info["seconds"] = round(time.time() - start, 1)

    bench.rows.sort(key=lambda r: r["item"])  # stable: item 1 adds item 2's MFU rows
    missing = [r["figure"] for r in bench.rows if r["ours"] is None]
    bench.errors += [f"no figure: {m}" for m in missing]
    print(f"\nringtrain-bench: {len(bench.rows)} figures in {info['seconds']:.0f} s\n")
    print_table(bench.rows)
    met = [r["met"] for r in bench.rows if r["met"] is not None]
    print(f"\ntargets met: {sum(met)} of {len(met)}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"machine": info, "rows": bench.rows, "raw": bench.raw,
                       "errors": bench.errors}, f, indent=1)
            f.write("\n")
        print(f"wrote {args.out}")
    if args.markdown:
        write_markdown(args.markdown, info, bench.rows, bench.errors)
        print(f"wrote {args.markdown}")
    if bench.errors:
        print("\nringtrain-bench FAILED:\n  " + "\n  ".join(bench.errors), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
