#!/usr/bin/env python3
"""PyTorch eager baseline for tests/gpu/check.sh: Llama 3 training steps and the bf16 matmul rate.

The model is tests/parity/llama_reference.py's (torchtitan's llama3: same parameters, RoPE, RMSNorm,
SwiGLU) with its attention computed by torch.nn.functional.scaled_dot_product_attention
(is_causal=True, enable_gqa=True: the kv heads are not repeated in memory), which on CUDA picks a
fused kernel (flash / memory-efficient / cuDNN). Precision: float32 parameters and AdamW state,
the forward and backward under torch.autocast(bfloat16) — bf16 compute from float32 master
weights, like the trainer's training.mixed_precision_param = "bfloat16". AdamW (torch's default
implementation for the device), gradient clipping at 1.0, random tokens.

Prints one JSON object (and writes it to --out): tokens_per_second (the median over the steps after
--warmup), step_seconds, n_params, matmul_tflops (the median rate of torch.matmul on two
--matmul-size² bf16 matrices), peak_memory_bytes, device_name, torch_version, precision.
Only the standard library and torch.
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parity"))
import llama_reference as ref  # noqa: E402


class SdpaAttention(ref.Attention):
    """ref.Attention (same parameters) with SDPA instead of the explicit softmax."""

    def forward(self, x, freqs_cis):
        bs, seqlen, _ = x.shape
        xq = self.wq(x).view(bs, seqlen, self.n_heads, self.head_dim)
        xk = self.wk(x).view(bs, seqlen, self.n_kv_heads, self.head_dim)
        xv = self.wv(x).view(bs, seqlen, self.n_kv_heads, self.head_dim)
        xq, xk = ref.apply_rotary_emb(xq, xk, freqs_cis)
        # (bs, n_heads, seqlen, head_dim); k and v keep n_kv_heads.
        out = F.scaled_dot_product_attention(xq.transpose(1, 2), xk.transpose(1, 2),
                                             xv.transpose(1, 2), is_causal=True, enable_gqa=True)
        return self.wo(out.transpose(1, 2).contiguous().view(bs, seqlen, -1))


class SdpaTransformer(ref.Transformer):
    """ref.Transformer with SdpaAttention in every layer; the RoPE table is computed on the CPU
    (ref.precompute_freqs_cis makes its frequencies there) and moved to the tokens' device."""

    def __init__(self, args):
        super().__init__(args)
        for layer in self.layers.values():
            layer.attention = SdpaAttention(args)

    def forward(self, tokens):
        seqlen = tokens.shape[1]
        freqs_cis = ref.precompute_freqs_cis(self.args.head_dim, self.args.rope_theta,
                                             torch.arange(seqlen)).to(tokens.device)
        h = self.tok_embeddings(tokens)
        for layer in self.layers.values():
            h = layer(h, freqs_cis)
        return self.output(self.norm(h))


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_tflops(device, n, seconds=1.0):
    """Median TFLOP/s of torch.matmul(a, b) on n×n bf16 matrices (2 n³ FLOPs each)."""
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        torch.matmul(a, b)
    synchronize(device)
    rates = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(rates) < 5:
        start = time.perf_counter()
        for _ in range(10):
            torch.matmul(a, b)
        synchronize(device)
        rates.append(10 * 2 * n ** 3 / (time.perf_counter() - start) / 1e12)
    del a, b
    return statistics.median(rates)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda:0")
    ref.add_model_flags(ap)  # the parity reference's model flags (check.sh gives every one)
    ap.add_argument("--seq-len", type=int, required=True)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3, help="first steps left out of the median")
    ap.add_argument("--matmul-size", type=int, default=8192)
    ap.add_argument("--out", help="also write the JSON here")
    ns = ap.parse_args()
    if ns.steps <= ns.warmup:
        ap.error(f"--steps {ns.steps} leaves no step after --warmup {ns.warmup}")

    device = torch.device(ns.device)
    torch.manual_seed(0)
    peak_tflops = matmul_tflops(device, ns.matmul_size)

    args = ref.model_args_from(ns)
    with torch.device(device):  # the parameters are made (and initialised) on the device
        model = SdpaTransformer(args)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    step_seconds = []
    for _ in range(ns.steps):
        # (batch, seq_len + 1) random tokens: inputs and the next-token labels.
        tokens = torch.randint(0, ns.vocab_size, (ns.batch, ns.seq_len + 1), device=device)
        synchronize(device)
        start = time.perf_counter()
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
        loss = ref.loss_fn(logits, tokens[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss.item()
        synchronize(device)
        step_seconds.append(time.perf_counter() - start)

    median_step = statistics.median(step_seconds[ns.warmup:])
    result = {
        "tokens_per_second": ns.batch * ns.seq_len / median_step,
        "step_seconds": step_seconds,
        "n_params": n_params,
        "matmul_tflops": peak_tflops,
        "matmul_size": ns.matmul_size,
        "peak_memory_bytes": (torch.cuda.max_memory_allocated(device)
                              if device.type == "cuda" else 0),
        "device_name": (torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"),
        "torch_version": torch.__version__,
        "precision": "autocast bf16, fp32 params",
        "last_loss": float(loss.item()),
    }
    text = json.dumps(result)
    print(text)
    if ns.out:
        with open(ns.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
