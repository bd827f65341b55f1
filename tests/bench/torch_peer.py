#!/usr/bin/env python3
"""The PyTorch peers of ringtrain-bench (item 1): the same Llama model as the trainer
(tests/parity/llama_reference.py, loaded from the same init.pt), the same token windows, batch and
intra-op threads, trained with torch.optim.AdamW, in eager mode or (--compile) with the forward
and loss under torch.compile; prints one JSON object.

  torch_peer.py --init D/init.pt --tokens D/tokens.bin --seq-len L --steps N --warmup W
                --threads T --attention sdpa|math [--compile]
                MODEL FLAGS (as llama_reference.py) OPTIM FLAGS

Attention: `sdpa` is F.scaled_dot_product_attention(is_causal=True) on repeat_kv'd K/V (what
torchtitan's eager model runs; on the CPU PyTorch picks its flash kernel), `math` the explicit
softmax(QKᵀ·scale + causal mask)·V that older PyTorch models used (llama_reference's own).

--compile: torch.compile (default backend, inductor, which generates C++ for the CPU and builds
it with $CXX or g++ against the Python headers) of the forward and the loss, one graph at the
run's fixed L (dynamic=False); AOTAutograd derives the backward graph, inductor compiles both.
clip_grad_norm_ and AdamW stay eager, as in the eager peer. Compiling happens in step 0 (the
forward at its call, the backward at its first run), inside the warm-up steps: `compile_seconds`
is step 0's time less the median of the measured steps. Compiled code is cached in
$TORCHINDUCTOR_CACHE_DIR (ringtrain-bench sets it), so a rerun compiles faster.

A step is what the trainer times: zero_grad(set_to_none) → forward → loss → backward →
clip_grad_norm_ → AdamW step → loss.item(). Step k (0-based) reads window k of the tokens
(tokens[k·L : k·L + L + 1], batch 1), as the trainer's sequential sampler does.

Memory, measured as the trainer's counting allocator measures it: after the timed steps one more
step runs under torch.profiler with profile_memory, whose CPU allocator reports each allocation and
free with the running total of the bytes allocated since profiling began; the step's peak tensor
memory is the live storage bytes when it starts (parameters and AdamW state; gradients were just
set to None) plus the highest running total. `peak_rss_bytes` is the process's ru_maxrss.
"""
import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parity"))
import llama_reference as ref  # noqa: E402  (tests/parity: the independent model)


def sdpa_causal(q, k, v):
    """q, k, v: (bs, n_heads, seqlen, hd); PyTorch's fused causal attention."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def live_storage_bytes(tensors):
    seen, total = set(), 0
    for t in tensors:
        storage = t.untyped_storage()
        if storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            total += storage.nbytes()
    return total


def optimizer_tensors(opt):
    return [v for state in opt.state.values() for v in state.values() if torch.is_tensor(v)]


def profiled_peak_bytes(run_step):
    """The most bytes allocated at once during run_step(), counted from its start."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run_step()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    totals = [e["args"]["Total Allocated"] for e in events
              if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0]
    if not totals:
        raise RuntimeError("the profiler reported no CPU allocation for the memory step")
    return max(totals)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--init", required=True)
    p.add_argument("--tokens", required=True)
    p.add_argument("--seq-len", type=int, required=True)
    p.add_argument("--steps", type=int, required=True, help="timed steps, warm-up included")
    p.add_argument("--warmup", type=int, default=2, help="first steps left out of the median")
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--attention", choices=("sdpa", "math"), required=True)
    p.add_argument("--compile", action="store_true",
                   help="forward and loss under torch.compile (inductor); compiles in step 0")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--max-norm", type=float, default=1.0)
    ref.add_model_flags(p)
    ns = p.parse_args()

    torch.set_num_threads(ns.threads)
    if ns.attention == "sdpa":
        ref.causal_attention = sdpa_causal  # the module-level function Attention.forward calls
    args = ref.model_args_from(ns)
    model = ref.Transformer(args)
    state = torch.load(ns.init, map_location="cpu", weights_only=True)
    model.load_state_dict({k: v.float() for k, v in state.items()}, strict=True)
    model.float().train()
    tokens = ref.read_tokens(ns.tokens)
    L = ns.seq_len
    windows = (tokens.numel() - 1) // L
    if windows < 1:
        sys.exit(f"torch_peer: {tokens.numel()} tokens give no window of seq_len {L}")
    params = [q for q in model.parameters() if q.requires_grad]
    opt = torch.optim.AdamW(params, lr=ns.lr, betas=(ns.beta1, ns.beta2), eps=ns.eps,
                            weight_decay=ns.weight_decay)

    def forward_loss(inputs, labels):  # (1, L) each
        return ref.loss_fn(model(inputs), labels)

    if ns.compile:
        from torch._inductor import config as inductor_config  # here: 2 s to import
        # Inductor's kernels are written for a thread count, which its cache keys leave out
        # unless it is set: a kernel cached by a 1-thread run would run on 1 thread at 2.
        inductor_config.cpp.threads = ns.threads
        forward_loss = torch.compile(forward_loss, dynamic=False)

    def step(k):
        window = tokens[(k % windows) * L: (k % windows) * L + L + 1].unsqueeze(0)  # (1, L+1)
        opt.zero_grad(set_to_none=True)
        loss = forward_loss(window[:, :-1], window[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, ns.max_norm)
        opt.step()
        return loss.item()

    step_seconds, losses = [], []
    for k in range(ns.steps):
        start = time.perf_counter()
        losses.append(step(k))
        step_seconds.append(time.perf_counter() - start)

    opt.zero_grad(set_to_none=True)
    baseline = live_storage_bytes(params + optimizer_tensors(opt))
    peak = baseline + profiled_peak_bytes(lambda: step(ns.steps))
    measured = step_seconds[ns.warmup:] or step_seconds
    median_step = statistics.median(measured)
    compiled = {}
    if ns.compile:
        compiled = {"compile_seconds": step_seconds[0] - median_step,
                    "graph_breaks": sum(torch._dynamo.utils.counters["graph_break"].values()),
                    "inductor_cache_dir": os.environ.get("TORCHINDUCTOR_CACHE_DIR")}
    print(json.dumps({
        "attention": ns.attention, "compile": ns.compile, **compiled, "seq_len": L,
        "threads": ns.threads, "torch_version": torch.__version__, "step_seconds": step_seconds,
        "median_step_seconds": median_step, "losses": losses,
        "peak_tensor_bytes": peak, "baseline_tensor_bytes": baseline,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }))


if __name__ == "__main__":
    main()
