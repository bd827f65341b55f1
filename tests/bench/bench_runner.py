"""The processes ringtrain-bench measures: trainer runs through ringtrain-run, the PyTorch peers
(eager, and under torch.compile), attention_bench, and a job through a local coordinator. Standard
library only.

Every run is named, printed as it starts and ends (with its wall time), and its output kept under
the run folder; a run that fails raises CaseError with its log's tail. Trainer runs are cached by
their settings, so items that need the same run (cp = 2 alltoall for items 4 and 5) share it.
"""
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PARITY = os.path.join(ROOT, "tests", "parity", "llama_reference.py")
PEER = os.path.join(ROOT, "tests", "bench", "torch_peer.py")
CORPUS = os.path.join(ROOT, "tests", "bench", "document_corpus.py")

# The benchmark model (issue 16): dim 256, 4 layers, 8 heads, 4 kv heads, vocab 256, batch 1.
MODEL = {"dim": 256, "n_layers": 4, "n_heads": 8, "n_kv_heads": 4, "vocab_size": 256,
         "multiple_of": 64, "norm_eps": 1e-5, "rope_theta": 500000.0}


class CaseError(Exception):
    """A run that did not produce its figures."""


def median(values):
    return statistics.median(values) if values else float("nan")


def tail(path, lines=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TrainerRun:
    """Figures of one ringtrain-run: JSONL records, steps 1..N; `warmup` first steps left out."""

    def __init__(self, records, warmup):
        self.records = records
        self.measured = records[warmup:] if len(records) > warmup else records[-1:]
        self.ranks = len(records[0]["ranks"])

    def step_seconds(self):
        return median([r["step_seconds"] for r in self.measured])

    def step_spread(self):  # max/min step time over the measured steps
        times = [r["step_seconds"] for r in self.measured]
        return max(times) / min(times)

    def per_rank(self, key):  # median over the measured steps, per rank
        return [median([r["ranks"][k][key] for r in self.measured]) for k in range(self.ranks)]

    def peak_tensor_bytes(self):  # the counting allocator's peak, max over ranks and steps
        return max(r["ranks"][k]["device_memory_peak_bytes"] for r in self.measured
                   for k in range(self.ranks))

    def peak_rss_bytes(self):
        return max(r["ranks"][k]["peak_memory_bytes"] for r in self.records
                   for k in range(self.ranks))


class Runner:
    def __init__(self, bin_dir, out_dir, python, log=print):
        self.bin = bin_dir
        self.dir = out_dir
        self.python = python
        self.log = log
        self.cache = {}
        self.fixtures = {}
        self.count = 0
        self._compile_missing = None

    def _run(self, name, cmd, env=None, timeout=None):
        """Runs cmd with its output in <dir>/<name>.log; returns the log path."""
        self.count += 1
        log_path = os.path.join(self.dir, f"{self.count:02d}-{name}.log")
        self.log(f"  [{name}] ...", end="", flush=True)
        start = time.time()
        full_env = dict(os.environ, **(env or {}))
        with open(log_path, "w") as out:
            try:
                code = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT, env=full_env,
                                       timeout=timeout)
            except subprocess.TimeoutExpired:
                code = "timeout"
        self.log(f" {time.time() - start:.1f} s" + ("" if code == 0 else f"  FAILED ({code})"))
        if code != 0:
            raise CaseError(f"{name}: {' '.join(cmd)} exited {code}; {log_path}:\n"
                            f"{tail(log_path)}")
        return log_path

    def fixture(self, tokens):
        """init.pt and tokens.bin of the benchmark model (llama_reference make-fixture, seed 7)."""
        if tokens in self.fixtures:
            return self.fixtures[tokens]
        out = os.path.join(self.dir, f"fixture-{tokens}")
        self._run(f"fixture {tokens} tokens",
                  [self.python, PARITY, "make-fixture", "--out-dir", out, "--seed", "7",
                   "--num-tokens", str(tokens)] + model_flags(),
                  env={"OMP_NUM_THREADS": "1"})
        self.fixtures[tokens] = out
        return out

    def document_corpus(self, train_bytes, corpus_bytes, vocab):
        """torch's Python sources as documents (document_corpus.py), tokenized by
        ringtrain-tokenize with an EOS after each file: {bin, eos_id, vocab_size, tokens,
        documents}."""
        out = os.path.join(self.dir, "documents")
        log = self._run("document corpus", [self.python, CORPUS, "--out-dir", out,
                                            "--train-bytes", str(train_bytes), "--corpus-bytes",
                                            str(corpus_bytes), "--vocab", str(vocab)])
        corpus = last_json(log, "document corpus")
        with open(corpus["files"]) as f:
            files = [line.rstrip("\n") for line in f if line.strip()]
        data = os.path.join(out, "data.bin")
        self._run("tokenize corpus", [os.path.join(self.bin, "ringtrain-tokenize"), "--tokenizer",
                                      corpus["tokenizer"], "--out", data, "--eos-id",
                                      str(corpus["eos_id"])] + files)
        corpus.update(bin=data, tokens=os.path.getsize(data) // 2, documents=len(files))
        return corpus

    def trainer(self, name, seq, steps, warmup, nproc=1, threads=1, kernel=None, cp=1,
                balancer="headtail", rotate="alltoall", fixture=None, extra=(), env=None):
        """ringtrain-run of the benchmark model; fixture: same weights and tokens as the peer;
        env: variables set for the run beside this process's."""
        key = (seq, steps, nproc, threads, kernel, cp, balancer, rotate, fixture, tuple(extra),
               tuple(sorted((env or {}).items())))
        if key in self.cache:
            self.log(f"  [{name}] same run as [{self.cache[key][0]}]")
            return self.cache[key][1]
        jsonl = os.path.join(self.dir, f"{self.count + 1:02d}-{name}.jsonl")
        cmd = [os.path.join(self.bin, "ringtrain-run"), "--nproc", str(nproc),
               "--threads-per-rank", str(threads), os.path.join(ROOT, "configs", "debug_model.toml")]
        cmd += [f"--model.{k}={v}" for k, v in MODEL.items()]
        cmd += [f"--model.max_seq_len={seq}", f"--training.seq_len={seq}",
                "--training.local_batch_size=1", f"--training.steps={steps}",
                "--lr_scheduler.warmup_steps=0", "--lr_scheduler.decay_ratio=0",
                "--metrics.log_freq=1000", f"--metrics.jsonl={jsonl}",
                f"--parallelism.context_parallel_degree={cp}",
                f"--parallelism.context_parallel_load_balancer={balancer}",
                f"--parallelism.context_parallel_rotate_method={rotate}"]
        if kernel:
            cmd.append(f"--training.attention_kernel={kernel}")
        if fixture:
            cmd += ["--training.dataset=bin", "--training.sampler=sequential",
                    f"--training.dataset_path={fixture}/tokens.bin",
                    f"--checkpoint.initial_load_path={fixture}/init.pt"]
        cmd += list(extra)
        self._run(name, cmd, env=env)
        run = TrainerRun(read_jsonl(jsonl, steps, name), warmup)
        self.cache[key] = (name, run)
        return run

    def peer(self, name, fixture, seq, steps, warmup, threads, attention, compiled=False):
        """torch_peer.py; compiled: under torch.compile, its kernels cached in inductor_cache()."""
        cmd = [self.python, PEER, "--init", f"{fixture}/init.pt", "--tokens",
               f"{fixture}/tokens.bin", "--seq-len", str(seq), "--steps", str(steps), "--warmup",
               str(warmup), "--threads", str(threads), "--attention", attention] + model_flags()
        env = None
        if compiled:
            cmd.append("--compile")
            env = {"TORCHINDUCTOR_CACHE_DIR": inductor_cache()}
        return last_json(self._run(name, cmd, env=env), name)

    def compile_missing(self):
        """What torch.compile (inductor, CPU) lacks on this machine, in words, or None. Inductor
        builds the C++ it generates with $CXX, else g++, against the Python headers of the
        interpreter it runs in (the peer's: --python)."""
        if self._compile_missing is None:
            missing = []
            cxx = os.environ.get("CXX", "g++")
            if not shutil.which(cxx):
                missing.append(f"no C++ compiler: {cxx} ($CXX, else g++) is not on PATH")
            include = subprocess.run(
                [self.python, "-c", "import sysconfig; print(sysconfig.get_path('include'))"],
                capture_output=True, text=True).stdout.strip()
            if not include or not os.path.isfile(os.path.join(include, "Python.h")):
                missing.append(f"no Python.h in {include or 'the include folder'} of "
                               f"{self.python}")
            self._compile_missing = "; ".join(missing)
        return self._compile_missing or None

    def attention_bench(self, name, kernels, head_dims, seqs, threads, reps, gemm_size):
        log_path = self._run(name, [os.path.join(self.bin, "attention_bench"),
                                    "--kernels", ",".join(kernels),
                                    "--head-dims", ",".join(map(str, head_dims)),
                                    "--seqs", ",".join(map(str, seqs)),
                                    "--threads", ",".join(map(str, threads)),
                                    "--heads", str(MODEL["n_heads"]),
                                    "--kv-heads", str(MODEL["n_kv_heads"]),
                                    "--reps", str(reps), "--gemm-size", str(gemm_size)])
        with open(log_path) as f:
            text = f.read()
        start = text.find('{"gemm"')
        if start < 0:
            raise CaseError(f"{name}: no JSON in {log_path}:\n{tail(log_path)}")
        return json.loads(text[start:])

    def known_kernels(self):
        """The attention_kernel values this build knows, but "auto"."""
        out = subprocess.run([os.path.join(self.bin, "attention_bench"), "--list-kernels"],
                             capture_output=True, text=True, check=True).stdout
        return [k for k in out.split() if k != "auto"]

    def service_job(self, name, seq, steps, threads, extra=()):
        """The job through a fresh local coordinator and one worker agent (ringctl submit
        --follow); returns the step records as the coordinator streamed them."""
        cluster = os.path.join(self.dir, f"cluster-{self.count + 1:02d}")
        os.makedirs(os.path.join(cluster, "worker-0"))
        address = f"127.0.0.1:{free_port()}"
        first = 20000 + (os.getpid() * 7) % 20000
        procs = []
        try:
            procs.append(spawn([os.path.join(self.bin, "ringtrain-coordinator"), "--listen",
                                address, "--db", os.path.join(cluster, "ringtrain.db"),
                                "--metrics-address", f"127.0.0.1:{free_port()}",
                                f"--rendezvous-ports={first}-{first + 99}"],
                               os.path.join(cluster, "coordinator.log")))
            procs.append(spawn([os.path.join(self.bin, "ringtrain-worker"), "--coordinator",
                                address, "--host-label", "local", "--advertise-address",
                                "127.0.0.1", "--work-dir", os.path.join(cluster, "worker-0"),
                                "--checkpoint-root", os.path.join(cluster, "checkpoints"),
                                "--threads", str(threads),
                                "--trainer", os.path.join(self.bin, "ringtrain-trainer"),
                                "--metrics-address", f"127.0.0.1:{free_port()}"],
                               os.path.join(cluster, "worker-0.log")))
            ringctl = os.path.join(self.bin, "ringctl")
            self._run(f"{name} (agent up)", [ringctl, "workers", "--coordinator", address,
                                             "--wait", "1", "--timeout", "60"])
            config = [os.path.join(ROOT, "configs", "debug_model.toml")]
            config += [f"--model.{k}={v}" for k, v in MODEL.items()]
            config += [f"--model.max_seq_len={seq}", f"--training.seq_len={seq}",
                       "--training.local_batch_size=1", f"--training.steps={steps}",
                       "--lr_scheduler.warmup_steps=0", "--lr_scheduler.decay_ratio=0",
                       "--metrics.log_freq=1000"] + list(extra)
            log_path = self._run(name, [ringctl, "submit", "--coordinator", address, "--follow",
                                        "--output", "json"] + config)
        except CaseError as e:
            logs = "".join(f"{path}:\n{tail(path, 5)}" for path in (
                os.path.join(cluster, "coordinator.log"), os.path.join(cluster, "worker-0.log")))
            raise CaseError(f"{e}\n{logs}")
        finally:
            for p in reversed(procs):
                stop(p)
        records = []
        with open(log_path) as f:
            for line in f:
                event = json.loads(line) if line.startswith("{") else {}
                if event.get("event") == "step":
                    record = event["record"]
                    records.append(json.loads(record) if isinstance(record, str) else record)
        if len(records) != steps:
            raise CaseError(f"{name}: {len(records)} step records of {steps} in {log_path}")
        return records


def inductor_cache():
    """Inductor's compiled kernels, kept across runs so a rerun loads them instead of compiling:
    $TORCHINDUCTOR_CACHE_DIR when set, else ~/.cache/ringtrain/inductor."""
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(home, "ringtrain", "inductor")


def model_flags():
    return ["--dim", str(MODEL["dim"]), "--n-layers", str(MODEL["n_layers"]),
            "--n-heads", str(MODEL["n_heads"]), "--n-kv-heads", str(MODEL["n_kv_heads"]),
            "--vocab-size", str(MODEL["vocab_size"]), "--multiple-of", str(MODEL["multiple_of"]),
            "--norm-eps", str(MODEL["norm_eps"]), "--rope-theta", str(MODEL["rope_theta"])]


def read_jsonl(path, steps, name):
    try:
        with open(path) as f:
            records = [json.loads(line) for line in f if line.strip()]
    except OSError as e:
        raise CaseError(f"{name}: no metrics file: {e}")
    if len(records) != steps:
        raise CaseError(f"{name}: {len(records)} step records of {steps} in {path}")
    return records


def last_json(log_path, name):
    with open(log_path) as f:
        lines = [line for line in f if line.startswith("{")]
    if not lines:
        raise CaseError(f"{name}: no JSON result in {log_path}:\n{tail(log_path)}")
    return json.loads(lines[-1])


def spawn(cmd, log_path):
    out = open(log_path, "w")
    return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc, grace=10):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
