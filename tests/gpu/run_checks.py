#!/usr/bin/env python3
"""The steps of tests/gpu/check.sh (which checks the machine first, then runs this), one table.

Each step runs a bundle binary (with $RINGTRAIN_BUNDLE_LD_LIBRARY_PATH as its LD_LIBRARY_PATH)
or eager_llama.py (on this Python) under a time limit; the limits are also cut to the whole run's
budget (7 minutes; 110 s with --self-test), so the run ends well under 8 minutes whatever hangs.

  1. attention: `ringtrain-gpu-check attention --device DEV`, its rows as they come
     (each row carries its own tolerance, or none: the gap is reported).
  2. the debug config on DEV against the CPU: fp32 losses within 1e-4; bf16
     (training.mixed_precision_param) on DEV against CPU fp32 and against CPU bf16: the gap.
  3. cp = 2 on DEV (two ranks through ringtrain-run, both on DEV, comm.backend = gloo) against
     cp = 1 on DEV: losses within 1e-5; the same with context_parallel_method = ulysses (the
     all-to-alls around attention); and packed documents (model.attn_mask_type = block_causal,
     EOS token 0 of the synthetic data, the document balancer) at cp = 2 on DEV against cp = 1 on
     the CPU: losses within 1e-4.
  4. the bench shape (BENCH below) in bf16: the trainer's tokens/s (median after the warm-up steps)
     and MFU, next to PyTorch eager (eager_llama.py: SDPA, same shape, same device) and the
     device's measured bf16 matmul rate, against which both MFUs are taken.

Compared values are the max |loss difference| over all steps. With --self-test (DEV = cpu) every
step runs with small shapes, so CI exercises this plumbing in well under 2 minutes.
Writes OUT/results.json, OUT/results.md and every step's output in OUT/logs/.
Exit status 0 when every checked row passed, 1 otherwise.
"""

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
import traceback

# The debug config; --self-test shrinks it (5 steps of seq 128 x batch 2, 1 warm-up step).
DEBUG_CONFIG = "configs/debug_model.toml"
DEBUG_STEPS = 20
SELF_TEST_DEBUG_STEPS = 5
SELF_TEST_DEBUG_OVERRIDES = ["--training.seq_len=128", "--training.local_batch_size=2",
                             "--lr_scheduler.warmup_steps=1"]

# The bench shape (the larger config), given to the trainer as overrides of the debug config
# and to eager_llama.py as flags. vocab_size: Llama 3's tokenizer.
BENCH = dict(dim=2048, n_layers=16, n_heads=16, n_kv_heads=8, vocab_size=128256, multiple_of=256,
             norm_eps=1e-5, rope_theta=500000.0, seq_len=8192, batch=1, steps=10, warmup=3,
             matmul_size=8192)
SELF_TEST_BENCH = dict(BENCH, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=512,
                       multiple_of=64, seq_len=256, steps=6, warmup=3, matmul_size=256)

FP32_ATOL = 1e-4  # the debug config, DEV against the CPU
CP_ATOL = 1e-5    # cp = 2 against cp = 1 on DEV

# Seconds each step may take, and the whole run.
LIMITS = dict(attention=60, debug=90, cp=90, bench_trainer=180, bench_eager=150)
BUDGET, SELF_TEST_BUDGET = 420, 110

ERROR_LINES = 12  # the last lines of a crashed step's output that the report shows


class StepError(Exception):
    """A step that did not produce its numbers; the message ends with its output's last lines."""


class Runner:
    """Runs the steps' commands: logs in OUT/logs, the binaries' LD_LIBRARY_PATH, time limits."""

    def __init__(self, bundle, out, budget_seconds):
        self.bundle = bundle
        self.logs = os.path.join(out, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.budget_seconds = budget_seconds
        self.deadline = time.monotonic() + budget_seconds
        self.bin_env = dict(os.environ)
        lib_path = os.environ.get("RINGTRAIN_BUNDLE_LD_LIBRARY_PATH")
        if lib_path is None:
            raise SystemExit("run_checks.py: RINGTRAIN_BUNDLE_LD_LIBRARY_PATH is not set; "
                             "run tests/gpu/check.sh, which sets it")
        self.bin_env["LD_LIBRARY_PATH"] = lib_path

    def bin(self, name):
        return os.path.join(self.bundle, "bin", name)

    def path(self, name):
        return os.path.join(self.logs, name)

    def run(self, name, argv, limit, binary=True):
        """Runs argv with output to logs/NAME.log; returns (exit status, output). Raises StepError
        when it cannot start or runs past min(limit, what is left of the budget)."""
        left = self.deadline - time.monotonic()
        if left < 5:
            raise StepError(f"not run: the whole run's {self.budget_seconds} s budget is spent")
        limit = min(limit, left)
        log_path = self.path(name + ".log")
        start = time.monotonic()
        with open(log_path, "w") as log:
            if binary:
                log.write(f"# LD_LIBRARY_PATH={self.bin_env['LD_LIBRARY_PATH']}\n")
            log.write("$ " + " ".join(argv) + "\n")
            log.flush()
            try:
                # Its own process group, so that a limit stops ringtrain-run's ranks too.
                proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True,
                                        env=self.bin_env if binary else None)
            except OSError as e:
                raise StepError(f"cannot start {argv[0]}: {e}")
            try:
                rc = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                rc = None
        with open(log_path, errors="replace") as f:
            if binary:
                f.readline()  # the LD_LIBRARY_PATH line: in the log, not in error messages
            output = f.read()
        print(f"  {name}: {'timed out' if rc is None else f'exit {rc}'} after "
              f"{time.monotonic() - start:.1f} s (log: {log_path})", flush=True)
        if rc is None:
            raise StepError(f"stopped after {limit:.0f} s (its time limit)\n" + tail(output))
        return rc, output


def tail(text, n=ERROR_LINES):
    return "\n".join(text.rstrip("\n").splitlines()[-n:])


def read_jsonl(path):
    """The rows of a trainer's metrics.jsonl that report a training step."""
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [r for r in rows if "step" in r and "loss" in r]


def train(runner, name, device, config, overrides, steps, limit, nproc=1):
    """Runs the trainer (through ringtrain-run when nproc > 1); returns its per-step JSONL rows."""
    jsonl = runner.path(name + ".jsonl")
    if os.path.exists(jsonl):
        os.remove(jsonl)
    args = [os.path.join(runner.bundle, config), f"--device={device}", f"--training.steps={steps}",
            f"--metrics.jsonl={jsonl}"] + overrides
    if nproc == 1:
        argv = [runner.bin("ringtrain-trainer")] + args
    else:
        argv = [runner.bin("ringtrain-run"), "--nproc", str(nproc)] + args
    rc, output = runner.run(name, argv, limit)
    if rc != 0:
        raise StepError(f"exit status {rc}\n" + tail(output))
    rows = read_jsonl(jsonl) if os.path.exists(jsonl) else []
    if len(rows) != steps:
        raise StepError(f"{jsonl} has {len(rows)} step rows, not {steps}\n" + tail(output))
    return rows


def attempt(fn, *args, **kwargs):
    """(result, None) or (None, the StepError's message)."""
    try:
        return fn(*args, **kwargs), None
    except StepError as e:
        return None, str(e)


class Report:
    """The table's rows and the crashed steps' messages."""

    def __init__(self):
        self.rows = []
        self.errors = []

    def add(self, check, value, status, tolerance=None, unit="", note=""):
        self.rows.append(dict(n=len(self.rows) + 1, check=check, value=value, unit=unit,
                              tolerance=tolerance, status=status, note=note))

    def error(self, check, crashed):
        """An ERROR row for `check`, whose steps {step name: message} crashed; each step's message
        is kept once however many rows it spoils."""
        self.add(check, None, "ERROR", note="crashed: " + ", ".join(crashed) + " (below)")
        for step, message in crashed.items():
            if all(e["step"] != step for e in self.errors):
                self.errors.append(dict(step=step, message=message))

    def compare_losses(self, check, a, b, tolerance):
        """Max |loss difference| between two runs' rows: ok/FAIL within tolerance, else gap."""
        diff = max(abs(x["loss"] - y["loss"]) for x, y in zip(a, b))
        if not math.isfinite(diff):
            status = "FAIL"
        elif tolerance is None:
            status = "gap"
        else:
            status = "ok" if diff <= tolerance else "FAIL"
        self.add(check, diff, status, tolerance)

    def passed(self):
        return all(r["status"] in ("ok", "gap", "info") for r in self.rows)

    def markdown(self):
        lines = ["| # | check | value | tolerance | status | note |",
                 "|---|---|---|---|---|---|"]
        for r in self.rows:
            value = "" if r["value"] is None else f"{format_value(r['value'])}{r['unit']}"
            tol = "" if r["tolerance"] is None else f"{r['tolerance']:.0e}"
            lines.append(f"| {r['n']} | {r['check']} | {value} | {tol} | {r['status']} | "
                         f"{r['note']} |")
        return "\n".join(lines)


def format_value(v):
    if isinstance(v, str):
        return v
    if v != 0 and (abs(v) < 1e-2 or abs(v) >= 1e6):
        return f"{v:.3e}"
    return f"{v:.4g}" if abs(v) < 1000 else f"{v:,.0f}"


# ---- step 1 -------------------------------------------------------------------------------------

def check_attention(runner, report, device):
    name = f"attention ({device} vs cpu)"
    try:
        rc, output = runner.run("attention", [runner.bin("ringtrain-gpu-check"), "attention",
                                              "--device", device], LIMITS["attention"])
    except StepError as e:
        report.error(name, {"attention": str(e)})
        return
    rows = []
    for line in output.splitlines():
        if line.startswith("{"):
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "check" in row and "max_abs_diff" in row:  # attention's rows, or any it adds
                rows.append(row)
    if not rows:
        report.error(name, {"attention": f"exit status {rc} and no result rows\n" + tail(output)})
        return
    any_failed = False
    for row in rows:
        diff, tol = float(row["max_abs_diff"]), row.get("tolerance")
        if tol is None:
            status = "gap" if math.isfinite(diff) else "FAIL"
        else:
            status = "ok" if row.get("ok") and diff <= tol else "FAIL"
        any_failed |= status == "FAIL"
        report.add(f"{row['check']} {row.get('case', '')}, vs cpu", diff, status, tol)
    if rc not in (0, 1) or (rc == 1) != any_failed:
        report.error(name, {"attention": f"exit status {rc} does not match its rows "
                                         f"({'some' if any_failed else 'none'} failed)\n"
                                         + tail(output)})


# ---- steps 2 and 3 ------------------------------------------------------------------------------

def check_debug_and_cp(runner, report, device, self_test):
    steps = SELF_TEST_DEBUG_STEPS if self_test else DEBUG_STEPS
    base = SELF_TEST_DEBUG_OVERRIDES if self_test else []
    fp32 = base + ["--training.mixed_precision_param=float32"]
    bf16 = base + ["--training.mixed_precision_param=bfloat16"]
    runs = {}
    for key, dev, overrides in [("dev_fp32", device, fp32), ("dev_fp32_again", device, fp32),
                                ("cpu_fp32", "cpu", fp32),
                                ("dev_bf16", device, bf16), ("cpu_bf16", "cpu", bf16)]:
        runs[key] = attempt(train, runner, f"debug-{key}", dev, DEBUG_CONFIG, overrides, steps,
                            LIMITS["debug"])
    runs["dev_cp2"] = attempt(
        train, runner, "debug-dev_cp2", device, DEBUG_CONFIG,
        fp32 + ["--comm.backend=gloo", "--parallelism.context_parallel_degree=2"], steps,
        LIMITS["cp"], nproc=2)
    runs["dev_ulysses_cp2"] = attempt(
        train, runner, "debug-dev_ulysses_cp2", device, DEBUG_CONFIG,
        fp32 + ["--comm.backend=gloo", "--parallelism.context_parallel_degree=2",
                "--parallelism.context_parallel_method=ulysses"], steps, LIMITS["cp"], nproc=2)
    documents = fp32 + ["--model.attn_mask_type=block_causal", "--training.eos_id=0"]
    runs["dev_docs_cp2"] = attempt(
        train, runner, "debug-dev_docs_cp2", device, DEBUG_CONFIG,
        documents + ["--comm.backend=gloo", "--parallelism.context_parallel_degree=2",
                     "--parallelism.context_parallel_load_balancer=document"], steps,
        LIMITS["cp"], nproc=2)
    runs["cpu_docs"] = attempt(train, runner, "debug-cpu_docs", "cpu", DEBUG_CONFIG, documents,
                               steps, LIMITS["debug"])

    label = f"debug config, {steps} steps"
    for check, a, b, tol in [
            (f"{label}, fp32: {device} vs cpu, max abs Δloss", "dev_fp32", "cpu_fp32", FP32_ATOL),
            # Reported, not checked: fused backward kernels may sum dQ with atomics on a GPU.
            (f"{label}, fp32: the same run on {device} twice, max abs Δloss (0 = bitwise)",
             "dev_fp32", "dev_fp32_again", None),
            (f"{label}, bf16 on {device} vs cpu fp32, max abs Δloss", "dev_bf16", "cpu_fp32", None),
            (f"{label}, bf16 on {device} vs cpu bf16, max abs Δloss", "dev_bf16", "cpu_bf16", None),
            (f"{label}, fp32: cp = 2 (2 ranks on {device}, gloo) vs cp = 1 on {device}, "
             f"max abs Δloss", "dev_cp2", "dev_fp32", CP_ATOL),
            (f"{label}, fp32: ulysses cp = 2 (2 ranks on {device}, gloo) vs cp = 1 on {device}, "
             f"max abs Δloss", "dev_ulysses_cp2", "dev_fp32", CP_ATOL),
            (f"{label}, fp32 block_causal: cp = 2 document balancer on {device} vs cp = 1 on cpu, "
             f"max abs Δloss", "dev_docs_cp2", "cpu_docs", FP32_ATOL)]:
        crashed = {f"debug-{k}": runs[k][1] for k in (a, b) if runs[k][1] is not None}
        if crashed:
            report.error(check, crashed)
        else:
            report.compare_losses(check, runs[a][0], runs[b][0], tol)


# ---- step 4 -------------------------------------------------------------------------------------

def param_counts(s):
    """(all parameters, the embedding's) of the Llama 3 model with shape s (untied output)."""
    head_dim = s["dim"] // s["n_heads"]
    hidden = int(2 * 4 * s["dim"] / 3)
    hidden = s["multiple_of"] * ((hidden + s["multiple_of"] - 1) // s["multiple_of"])
    attention = s["dim"] * head_dim * (2 * s["n_heads"] + 2 * s["n_kv_heads"])  # wq wk wv wo
    layer = attention + 3 * s["dim"] * hidden + 2 * s["dim"]  # w1 w2 w3, two RMSNorms
    embedding = s["vocab_size"] * s["dim"]
    output = s["vocab_size"] * s["dim"] + s["dim"]  # the output projection and the final RMSNorm
    return embedding + s["n_layers"] * layer + output, embedding


def flops_per_token(s):
    """torchtitan's get_dense_model_nparams_and_flops: 6 (N - N_embedding) + 12 L H Dh T."""
    n, n_embedding = param_counts(s)
    return 6 * (n - n_embedding) + 12 * s["n_layers"] * s["n_heads"] * (s["dim"] // s["n_heads"]) \
        * s["seq_len"]


def check_bench(runner, report, device, s, here):
    shape = (f"dim {s['dim']}, {s['n_layers']} layers, {s['n_heads']}/{s['n_kv_heads']} heads, "
             f"seq {s['seq_len']}, batch {s['batch']}, vocab {s['vocab_size']}, bf16")
    n, n_embedding = param_counts(s)
    fpt = flops_per_token(s)
    report.add(f"bench FLOPs per token ({shape})", fpt, "info",
               note=f"torchtitan's 6·(N − N_emb) + 12·L·H·Dh·T, N = {n:,} parameters, "
                    f"N_emb = {n_embedding:,} (tok_embeddings)")
    measured = f"median of steps {s['warmup'] + 1}–{s['steps']}"

    overrides = [f"--model.dim={s['dim']}", f"--model.n_layers={s['n_layers']}",
                 f"--model.n_heads={s['n_heads']}", f"--model.n_kv_heads={s['n_kv_heads']}",
                 f"--model.vocab_size={s['vocab_size']}", f"--model.multiple_of={s['multiple_of']}",
                 f"--model.norm_eps={s['norm_eps']}", f"--model.rope_theta={s['rope_theta']}",
                 f"--model.max_seq_len={s['seq_len']}", f"--training.seq_len={s['seq_len']}",
                 f"--training.local_batch_size={s['batch']}",
                 "--training.mixed_precision_param=bfloat16", "--lr_scheduler.warmup_steps=2",
                 "--metrics.log_freq=1"]
    trainer, trainer_error = attempt(train, runner, "bench-trainer", device, DEBUG_CONFIG,
                                     overrides, s["steps"], LIMITS["bench_trainer"])

    eager_json = runner.path("bench-eager.json")
    argv = [sys.executable, os.path.join(here, "eager_llama.py"), "--device", device,
            "--steps", str(s["steps"]), "--warmup", str(s["warmup"]),
            "--matmul-size", str(s["matmul_size"]), "--out", eager_json]
    for key in ("dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "multiple_of", "norm_eps",
                "rope_theta", "seq_len", "batch"):
        argv += ["--" + key.replace("_", "-"), str(s[key])]
    eager, eager_error = None, None
    try:
        rc, output = runner.run("bench-eager", argv, LIMITS["bench_eager"], binary=False)
        if rc != 0:
            raise StepError(f"exit status {rc}\n" + tail(output))
        with open(eager_json) as f:
            eager = json.load(f)
        if eager["n_params"] != n:
            raise StepError(f"the eager model has {eager['n_params']:,} parameters, the formula "
                            f"{n:,}: the MFU would be wrong")
    except StepError as e:
        eager, eager_error = None, str(e)

    peak = eager["matmul_tflops"] * 1e12 if eager else None
    if eager:
        report.add(f"bf16 matmul {s['matmul_size']}×{s['matmul_size']} on {eager['device_name']} "
                   "(the MFU's peak)", eager["matmul_tflops"], "info", unit=" TFLOP/s")
    else:
        report.error("bf16 matmul rate and PyTorch eager", {"bench-eager": eager_error})

    if trainer is None:
        report.error(f"ringtrain-trainer tokens/s on {device}", {"bench-trainer": trainer_error})
    else:
        tps = statistics.median(r["tokens_per_second"] for r in trainer[s["warmup"]:])
        peak_mem = max(r.get("peak_memory_bytes", 0) for r in trainer) / 2**30
        report.add(f"ringtrain-trainer tokens/s on {device} ({measured})", tps, "info",
                   note=f"peak memory {peak_mem:.1f} GiB" if peak_mem > 0 else "")
        if peak:
            report.add("ringtrain-trainer MFU (vs measured matmul)", 100 * tps * fpt / peak, "info",
                       unit=" %")
    if eager:
        report.add(f"PyTorch eager tokens/s on {device} (SDPA, {eager['precision']}; {measured})",
                   eager["tokens_per_second"], "info",
                   note=f"peak memory {eager['peak_memory_bytes'] / 2**30:.1f} GiB"
                   if eager["peak_memory_bytes"] > 0 else "")
        report.add("PyTorch eager MFU (vs measured matmul)",
                   100 * eager["tokens_per_second"] * fpt / peak, "info", unit=" %")
        if trainer is not None:
            report.add("ringtrain-trainer / eager tokens/s", tps / eager["tokens_per_second"],
                       "info")
    return eager


# ---- main ---------------------------------------------------------------------------------------

def read_manifest(bundle):
    values = {}
    with open(os.path.join(bundle, "MANIFEST")) as f:
        for line in f:
            key, sep, value = line.rstrip("\n").partition("=")
            if sep and not key.startswith("#") and key != "file":
                values[key] = value
    return values


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--device", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--self-test", action="store_true")
    ns = ap.parse_args()
    if ns.self_test and ns.device != "cpu":
        ap.error("--self-test runs on the CPU: pass --device cpu")
    here = os.path.dirname(os.path.abspath(__file__))
    bundle = os.path.abspath(ns.bundle)
    out = os.path.abspath(ns.out)
    runner = Runner(bundle, out, SELF_TEST_BUDGET if ns.self_test else BUDGET)
    manifest = read_manifest(bundle)
    report = Report()
    started = time.time()

    # A step whose output this script cannot read (a KeyError, say) becomes an ERROR row too, so
    # that the table always prints.
    def section(title, fn, *args):
        print("== " + title, flush=True)
        try:
            return fn(runner, report, *args)
        except Exception:  # noqa: BLE001 (reported, not swallowed)
            report.error(title, {title: tail(traceback.format_exc())})
            return None

    section(f"1. attention on {ns.device} vs cpu", check_attention, ns.device)
    section(f"2-3. the debug config on {ns.device} vs cpu; cp = 2 vs cp = 1", check_debug_and_cp,
            ns.device, ns.self_test)
    eager = section(f"4. bench: ringtrain-trainer vs PyTorch eager on {ns.device}", check_bench,
                    ns.device, SELF_TEST_BENCH if ns.self_test else BENCH, here)

    header = {
        "mode": "self-test (cpu, small shapes)" if ns.self_test else "gpu",
        "device": ns.device,
        "device_name": eager["device_name"] if eager else "unknown (eager step failed)",
        "torch_here": eager["torch_version"] if eager else "unknown (eager step failed)",
        "torch_built_against": manifest.get("torch_version"),
        "bundle_commit": manifest.get("commit"),
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)),
        "seconds": round(time.time() - started, 1),
    }
    passed = report.passed()
    title = (f"ringtrain GPU check: {header['mode']} on {header['device']} "
             f"({header['device_name']}), torch {header['torch_here']} "
             f"(bundle built against {header['torch_built_against']}, commit "
             f"{header['bundle_commit']}), {header['date']}, {header['seconds']} s")
    verdict = "PASSED: every checked row is within its tolerance" if passed else \
        "FAILED: " + ", ".join(f"row {r['n']} {r['status']}" for r in report.rows
                               if r["status"] in ("FAIL", "ERROR"))
    text = [title, ""]
    if ns.self_test:
        text += ["Self-test: the CPU stands where the GPU would be, with small shapes; its figures "
                 "(tokens/s, MFU) only show that the plumbing works.", ""]
    text += [report.markdown(), ""]
    for e in report.errors:
        log = runner.path(e["step"] + ".log")
        where = f" (log: {log})" if os.path.exists(log) else ""
        text += [f"ERROR: {e['step']}{where}:", "```",
                 e["message"], "```", ""]
    text.append(verdict)
    text = "\n".join(text)
    print("\n" + text)

    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(dict(header, passed=passed, rows=report.rows, errors=report.errors), f, indent=1)
        f.write("\n")
    print(f"(written to {out}/results.md and results.json; logs in {out}/logs)")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
