#!/usr/bin/env python3
"""Plain-PyTorch reference for Llama 3 (torchtitan's llama3 model), used by the C++ parity test.

Independent of the C++ trainer: it is written from the torchtitan model's definition and uses
only the standard library and torch (the pinned torch of the project's virtual environment; invoke
it as .venv/bin/python).

Subcommands:
  make-fixture  seeded initial state dict (D/init.pt) + random uint16 tokens (D/tokens.bin);
                with --eos-id and --doc-lengths, the tokens are documents of those lengths (cycled),
                each ending with the EOS token
  train         S steps of AdamW on sequential windows; writes per-step loss and grad norm (JSON);
                with --eos-id, attention is block-causal: a token sees the earlier tokens of its
                own document only (a document ends with, and includes, its EOS token)
  self-test     checks RoPE and GQA against independent formulations; exits 1 on mismatch

Parameter names match torchtitan's llama3 model (tok_embeddings, layers.{i}.attention.wq, ...).
"""

import argparse
import collections
import json
import math
import os
import sys
from array import array

import torch
import torch.nn as nn
import torch.nn.functional as F


# ----------------------------------------------------------------------------------------------
# Model


class ModelArgs:
    def __init__(self, dim, n_layers, n_heads, n_kv_heads, vocab_size, multiple_of,
                 ffn_dim_multiplier, norm_eps, rope_theta):
        self.dim = dim
        self.n_layers = n_layers
        self.n_heads = n_heads
        self.n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        self.vocab_size = vocab_size
        self.multiple_of = multiple_of
        self.ffn_dim_multiplier = ffn_dim_multiplier
        self.norm_eps = norm_eps
        self.rope_theta = rope_theta
        if dim % n_heads != 0:
            raise ValueError(f"dim {dim} is not divisible by n_heads {n_heads}")
        if self.n_heads % self.n_kv_heads != 0:
            raise ValueError(f"n_heads {n_heads} is not divisible by n_kv_heads {self.n_kv_heads}")
        self.head_dim = dim // n_heads
        if self.head_dim % 2 != 0:
            raise ValueError(f"head_dim {self.head_dim} must be even for RoPE")

    def hidden_dim(self):
        hidden = int(2 * 4 * self.dim / 3)
        if self.ffn_dim_multiplier is not None:
            hidden = int(self.ffn_dim_multiplier * hidden)
        return self.multiple_of * ((hidden + self.multiple_of - 1) // self.multiple_of)

    def to_dict(self):
        return {
            "dim": self.dim, "n_layers": self.n_layers, "n_heads": self.n_heads,
            "n_kv_heads": self.n_kv_heads, "vocab_size": self.vocab_size,
            "multiple_of": self.multiple_of, "ffn_dim_multiplier": self.ffn_dim_multiplier,
            "norm_eps": self.norm_eps, "rope_theta": self.rope_theta,
            "hidden_dim": self.hidden_dim(), "head_dim": self.head_dim,
        }


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def precompute_freqs_cis(head_dim, theta, positions):
    """Complex (len(positions), head_dim//2) tensor of e^{i * pos * freq}."""
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim))
    angles = torch.outer(positions.float(), freqs)
    return torch.polar(torch.ones_like(angles), angles)


def apply_rotary_emb(xq, xk, freqs_cis):
    """xq: (bs, seqlen, n_heads, hd), xk: (bs, seqlen, n_kv_heads, hd); freqs_cis: (seqlen, hd/2).

    Interleaved-pair convention: (x[2i], x[2i+1]) is the complex number x[2i] + i*x[2i+1].
    """
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    fc = freqs_cis.view(1, xq_.shape[1], 1, xq_.shape[-1])
    xq_out = torch.view_as_real(xq_ * fc).flatten(3)
    xk_out = torch.view_as_real(xk_ * fc).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def repeat_kv(x, n_rep):
    """(bs, seqlen, n_kv_heads, hd) -> (bs, seqlen, n_kv_heads * n_rep, hd); kv head j serves
    q heads j*n_rep ... j*n_rep + n_rep - 1 (torchtitan's repeat_kv)."""
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return (x[:, :, :, None, :]
            .expand(bs, slen, n_kv_heads, n_rep, head_dim)
            .reshape(bs, slen, n_kv_heads * n_rep, head_dim))


def document_ids(tokens, eos_id):
    """(bs, seqlen) tokens -> (bs, seqlen) document index within each row: a token after an EOS
    token belongs to the next document (the EOS itself ends its own)."""
    ends = (tokens == eos_id).long()
    return torch.cumsum(ends, dim=1) - ends


def causal_attention(q, k, v, doc_ids=None):
    """q, k, v: (bs, n_heads, seqlen, hd). Explicit softmax(QK^T * scale + mask) @ V, the mask
    causal, and with `doc_ids` (bs, seqlen) also within one document (block-causal)."""
    seqlen = q.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    mask = torch.ones(seqlen, seqlen, dtype=torch.bool, device=q.device).tril()
    if doc_ids is not None:
        same = doc_ids[:, :, None] == doc_ids[:, None, :]  # (bs, q, k)
        mask = (mask[None] & same)[:, None]  # (bs, 1, q, k)
    scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores.float(), dim=-1).type_as(q)
    return torch.matmul(probs, v)


class Attention(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.n_heads = args.n_heads
        self.n_kv_heads = args.n_kv_heads
        self.n_rep = args.n_heads // args.n_kv_heads
        self.head_dim = args.head_dim
        self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, args.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, args.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)

    def forward(self, x, freqs_cis, doc_ids=None):
        bs, seqlen, _ = x.shape
        xq = self.wq(x).view(bs, seqlen, self.n_heads, self.head_dim)
        xk = self.wk(x).view(bs, seqlen, self.n_kv_heads, self.head_dim)
        xv = self.wv(x).view(bs, seqlen, self.n_kv_heads, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis)
        keys = repeat_kv(xk, self.n_rep)
        values = repeat_kv(xv, self.n_rep)
        # doc_ids only when given: tests/bench/torch_peer.py swaps causal_attention for SDPA's.
        extra = () if doc_ids is None else (doc_ids,)
        out = causal_attention(xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2),
                               *extra)
        out = out.transpose(1, 2).contiguous().view(bs, seqlen, -1)
        return self.wo(out)


class FeedForward(nn.Module):
    def __init__(self, dim, hidden_dim):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.attention = Attention(args)
        self.feed_forward = FeedForward(args.dim, args.hidden_dim())
        self.attention_norm = RMSNorm(args.dim, args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, args.norm_eps)

    def forward(self, x, freqs_cis, doc_ids=None):
        # doc_ids only when given: tests/gpu/eager_llama.py and tests/bench/torch_peer.py swap in
        # attention modules that take (x, freqs_cis).
        extra = () if doc_ids is None else (doc_ids,)
        h = x + self.attention(self.attention_norm(x), freqs_cis, *extra)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        # ModuleDict keyed "0", "1", ... gives torchtitan's names layers.{i}.*
        self.layers = nn.ModuleDict({str(i): TransformerBlock(args) for i in range(args.n_layers)})
        self.norm = RMSNorm(args.dim, args.norm_eps)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)

    def forward(self, tokens, positions=None, eos_id=None):
        seqlen = tokens.shape[1]
        doc_ids = None if eos_id is None else document_ids(tokens, eos_id)
        if positions is None:
            positions = torch.arange(seqlen, device=tokens.device)
        freqs_cis = precompute_freqs_cis(self.args.head_dim, self.args.rope_theta, positions)
        h = self.tok_embeddings(tokens)
        for layer in self.layers.values():
            h = layer(h, freqs_cis, doc_ids)
        return self.output(self.norm(h))


def loss_fn(logits, labels):
    return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(),
                           reduction="sum") / labels.numel()


# ----------------------------------------------------------------------------------------------
# Helpers


def add_model_flags(p):
    p.add_argument("--dim", type=int, required=True)
    p.add_argument("--n-layers", type=int, required=True)
    p.add_argument("--n-heads", type=int, required=True)
    p.add_argument("--n-kv-heads", type=int, default=None)
    p.add_argument("--vocab-size", type=int, required=True)
    p.add_argument("--multiple-of", type=int, default=256)
    p.add_argument("--ffn-dim-multiplier", type=float, default=None)
    p.add_argument("--norm-eps", type=float, default=1e-5)
    p.add_argument("--rope-theta", type=float, default=10000.0)


def model_args_from(ns):
    return ModelArgs(ns.dim, ns.n_layers, ns.n_heads, ns.n_kv_heads, ns.vocab_size,
                     ns.multiple_of, ns.ffn_dim_multiplier, ns.norm_eps, ns.rope_theta)


def setup_determinism(seed=0):
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)


def write_tokens(path, tokens):
    arr = array("H", tokens)
    if sys.byteorder != "little":
        arr.byteswap()
    with open(path, "wb") as f:
        arr.tofile(f)


def read_tokens(path):
    arr = array("H")
    size = os.path.getsize(path)
    if size % 2 != 0:
        raise ValueError(f"{path}: size {size} is not a multiple of 2 (uint16 tokens)")
    with open(path, "rb") as f:
        arr.fromfile(f, size // 2)
    if sys.byteorder != "little":
        arr.byteswap()
    return torch.tensor(arr.tolist(), dtype=torch.int64)


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


# ----------------------------------------------------------------------------------------------
# Subcommands


def cmd_make_fixture(ns):
    setup_determinism(ns.seed)
    args = model_args_from(ns)
    model = Transformer(args)
    gen = torch.Generator().manual_seed(ns.seed)
    with torch.no_grad():
        for name, p in model.named_parameters():  # fixed registration order
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif name == "tok_embeddings.weight":
                p.normal_(0.0, 1.0, generator=gen)
            else:
                p.normal_(0.0, 0.02, generator=gen)
    dtype = DTYPES[ns.dtype]
    # A fresh OrderedDict (no _metadata attribute, so no BUILD opcode in the pickle) of
    # contiguous tensors that each own their storage.
    sd = collections.OrderedDict(
        (k, v.detach().to(dtype).clone().contiguous()) for k, v in model.state_dict().items())
    os.makedirs(ns.out_dir, exist_ok=True)
    torch.save(sd, os.path.join(ns.out_dir, "init.pt"))

    if ns.vocab_size > 65536:
        raise ValueError("vocab_size > 65536 does not fit uint16 tokens")
    toks = torch.randint(0, ns.vocab_size, (ns.num_tokens,), generator=gen, dtype=torch.int64)
    if ns.eos_id is not None:
        if not 0 <= ns.eos_id < ns.vocab_size:
            raise ValueError(f"--eos-id {ns.eos_id} is not a token of vocab_size {ns.vocab_size}")
        lengths = [int(n) for n in ns.doc_lengths.split(",")]
        if not lengths or min(lengths) < 1:
            raise ValueError(f"--doc-lengths {ns.doc_lengths!r}: lengths must be >= 1")
        # Random tokens other than EOS, then an EOS at the end of each document, lengths cycled.
        toks = torch.where(toks == ns.eos_id, (toks + 1) % ns.vocab_size, toks)
        end, i = -1, 0
        while end + lengths[i % len(lengths)] < ns.num_tokens:
            end += lengths[i % len(lengths)]
            toks[end] = ns.eos_id
            i += 1
    write_tokens(os.path.join(ns.out_dir, "tokens.bin"), toks.tolist())

    with open(os.path.join(ns.out_dir, "model_args.json"), "w") as f:
        json.dump(dict(args.to_dict(), seed=ns.seed, num_tokens=ns.num_tokens, dtype=ns.dtype),
                  f, indent=2)
        f.write("\n")
    n_params = sum(v.numel() for v in sd.values())
    print(f"wrote {ns.out_dir}/init.pt ({len(sd)} tensors, {n_params} params, {ns.dtype}), "
          f"tokens.bin ({ns.num_tokens} tokens), model_args.json; hidden_dim={args.hidden_dim()}")
    return 0


def cmd_train(ns):
    setup_determinism(ns.seed)
    args = model_args_from(ns)
    model = Transformer(args)
    sd = torch.load(ns.init, map_location="cpu")
    sd = collections.OrderedDict((k, v.float()) for k, v in sd.items())
    model.load_state_dict(sd, strict=True)
    model.float().train()

    tokens = read_tokens(ns.tokens)
    if int(tokens.max()) >= args.vocab_size:
        raise ValueError(f"token {int(tokens.max())} >= vocab_size {args.vocab_size}")
    L, B = ns.seq_len, ns.batch
    num_windows = (tokens.numel() - 1) // L
    if num_windows < 1:
        raise ValueError(f"{tokens.numel()} tokens give no window of seq_len {L}")

    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=ns.lr, betas=(ns.beta1, ns.beta2), eps=ns.eps,
                            weight_decay=ns.weight_decay, foreach=False)
    steps = []
    for k in range(ns.steps):
        rows = []
        for b in range(B):
            j = (k * B + b) % num_windows
            rows.append(tokens[j * L: j * L + L + 1])
        batch = torch.stack(rows)
        inputs, labels = batch[:, :-1], batch[:, 1:]
        opt.zero_grad(set_to_none=True)
        logits = model(inputs, eos_id=ns.eos_id)
        loss = loss_fn(logits, labels)
        loss.backward()
        total_norm = torch.nn.utils.clip_grad_norm_(params, ns.max_norm)
        opt.step()
        rec = {"step": k + 1, "loss": float(loss.item()), "grad_norm": float(total_norm.item())}
        steps.append(rec)
        if ns.verbose:
            print(f"step {rec['step']}: loss {rec['loss']!r} grad_norm {rec['grad_norm']!r}")

    # Floats written with repr() (json does so for finite floats) so they round-trip exactly.
    text = "{\"steps\": [\n" + ",\n".join(
        "  {\"step\": %d, \"loss\": %s, \"grad_norm\": %s}" % (s["step"], repr(s["loss"]),
                                                             repr(s["grad_norm"]))
        for s in steps) + "\n]}\n"
    json.loads(text)  # must parse (fails on nan/inf, which json does not allow)
    out_dir = os.path.dirname(os.path.abspath(ns.out))
    os.makedirs(out_dir, exist_ok=True)
    tmp = ns.out + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, ns.out)
    print(f"wrote {ns.out}: {len(steps)} steps, first loss {steps[0]['loss']!r}, "
          f"last loss {steps[-1]['loss']!r}" if steps else f"wrote {ns.out}: 0 steps")
    return 0


# ---- self-test: independent formulations ------------------------------------------------------


def rope_reference_cos_sin(x, positions, theta):
    """Explicit real rotation of interleaved pairs, float64, loop over pair index."""
    bs, seqlen, nh, hd = x.shape
    out = torch.empty(x.shape, dtype=torch.float64)
    xd = x.double()
    for i in range(hd // 2):
        freq = 1.0 / (theta ** (2.0 * i / hd))
        ang = positions.double() * freq  # (seqlen,)
        c = torch.cos(ang).view(1, seqlen, 1)
        s = torch.sin(ang).view(1, seqlen, 1)
        a, b = xd[..., 2 * i], xd[..., 2 * i + 1]
        out[..., 2 * i] = a * c - b * s
        out[..., 2 * i + 1] = a * s + b * c
    return out


def repeat_kv_loop(x, n_rep):
    bs, slen, n_kv, hd = x.shape
    out = torch.empty(bs, slen, n_kv * n_rep, hd, dtype=x.dtype)
    for h in range(n_kv * n_rep):
        out[:, :, h] = x[:, :, h // n_rep]
    return out


def attention_loop(q, k, v):
    """q, k, v: (bs, n_heads, seqlen, hd); per-query loop over the causal prefix, float64."""
    bs, nh, seqlen, hd = q.shape
    qd, kd, vd = q.double(), k.double(), v.double()
    out = torch.empty(bs, nh, seqlen, hd, dtype=torch.float64)
    for t in range(seqlen):
        s = (kd[:, :, : t + 1] * qd[:, :, t: t + 1]).sum(-1) / math.sqrt(hd)  # (bs, nh, t+1)
        w = torch.exp(s - s.max(-1, keepdim=True).values)
        w = w / w.sum(-1, keepdim=True)
        out[:, :, t] = (w.unsqueeze(-1) * vd[:, :, : t + 1]).sum(-2)
    return out


def cmd_self_test(ns):
    setup_determinism(ns.seed)
    failures = []

    def check(name, got, want, atol):
        err = (got.double() - want.double()).abs().max().item()
        ok = err <= atol
        print(f"{'ok  ' if ok else 'FAIL'} {name}: max abs err {err:.3e} (atol {atol:.1e})")
        if not ok:
            failures.append(name)

    g = torch.Generator().manual_seed(ns.seed)
    bs, seqlen, nh, nkv, hd, theta = 2, 11, 6, 2, 16, 500000.0
    xq = torch.randn(bs, seqlen, nh, hd, generator=g)
    xk = torch.randn(bs, seqlen, nkv, hd, generator=g)

    # RoPE with default positions and with explicit (offset, non-contiguous) positions.
    for label, pos in [("arange", torch.arange(seqlen)),
                       ("explicit", torch.tensor([7, 3, 100, 0, 5, 5, 9, 1000, 2, 8, 40]))]:
        fc = precompute_freqs_cis(hd, theta, pos)
        oq, ok_ = apply_rotary_emb(xq, xk, fc)
        check(f"rope q ({label} positions)", oq, rope_reference_cos_sin(xq, pos, theta), 1e-3)
        check(f"rope k ({label} positions)", ok_, rope_reference_cos_sin(xk, pos, theta), 1e-3)
    # Position 0 must be the identity; rotation must preserve pair norms.
    fc0 = precompute_freqs_cis(hd, theta, torch.zeros(seqlen, dtype=torch.long))
    check("rope identity at position 0", apply_rotary_emb(xq, xk, fc0)[0], xq, 1e-6)
    # Relative property: <rope(q, m), rope(k, n)> depends only on m - n.
    q1 = torch.randn(1, 1, 1, hd, generator=g, dtype=torch.float64)
    k1 = torch.randn(1, 1, 1, hd, generator=g, dtype=torch.float64)
    d = []
    for m, n in [(5, 2), (13, 10), (103, 100)]:
        rq = rope_reference_cos_sin(q1, torch.tensor([m]), theta)
        rk = rope_reference_cos_sin(k1, torch.tensor([n]), theta)
        d.append((rq * rk).sum())
    check("rope relative-position invariance", torch.stack(d) - d[0], torch.zeros(3), 1e-9)

    # GQA repeat.
    for n_rep in (1, 3):
        x = torch.randn(bs, seqlen, nkv, hd, generator=g)
        check(f"repeat_kv n_rep={n_rep}", repeat_kv(x, n_rep), repeat_kv_loop(x, n_rep), 0.0)

    # Causal attention.
    q = torch.randn(bs, nh, seqlen, hd, generator=g)
    k = torch.randn(bs, nh, seqlen, hd, generator=g)
    v = torch.randn(bs, nh, seqlen, hd, generator=g)
    check("causal attention", causal_attention(q, k, v), attention_loop(q, k, v), 1e-5)

    # Block-causal attention vs. causal attention run on each document's slice alone (row 0:
    # documents of 1, 4 and 6 tokens; row 1: a 1-token document, then one running off the end).
    eos = 7
    toks = torch.zeros(bs, seqlen, dtype=torch.int64)
    for row, ends in ((0, (0, 4, 10)), (1, (0,))):
        for e in ends:
            toks[row, e] = eos
    got = causal_attention(q, k, v, document_ids(toks, eos))
    want = torch.empty_like(got)
    for row, bounds in ((0, ((0, 1), (1, 5), (5, 11))), (1, ((0, 1), (1, 11)))):
        for a, b in bounds:
            want[row:row + 1, :, a:b] = attention_loop(q[row:row + 1, :, a:b],
                                                       k[row:row + 1, :, a:b],
                                                       v[row:row + 1, :, a:b])
    check("block-causal attention", got, want, 1e-5)

    # Whole Attention module vs. a per-head loop built from the independent pieces.
    args = ModelArgs(dim=nh * hd, n_layers=1, n_heads=nh, n_kv_heads=nkv, vocab_size=50,
                     multiple_of=32, ffn_dim_multiplier=None, norm_eps=1e-5, rope_theta=theta)
    attn = Attention(args)
    x = torch.randn(bs, seqlen, args.dim, generator=g)
    pos = torch.arange(seqlen)
    with torch.no_grad():
        got = attn(x, precompute_freqs_cis(hd, theta, pos))
        xd = x.double()
        Wq, Wk, Wv, Wo = (m.weight.double() for m in (attn.wq, attn.wk, attn.wv, attn.wo))
        qq = rope_reference_cos_sin((xd @ Wq.t()).view(bs, seqlen, nh, hd), pos, theta)
        kk = rope_reference_cos_sin((xd @ Wk.t()).view(bs, seqlen, nkv, hd), pos, theta)
        vv = (xd @ Wv.t()).view(bs, seqlen, nkv, hd)
        n_rep = nh // nkv
        heads = []
        for h in range(nh):
            j = h // n_rep  # kv head serving q head h
            heads.append(attention_loop(qq[:, :, h:h + 1].transpose(1, 2),
                                        kk[:, :, j:j + 1].transpose(1, 2),
                                        vv[:, :, j:j + 1].transpose(1, 2))[:, 0])
        want = torch.stack(heads, dim=2).reshape(bs, seqlen, nh * hd) @ Wo.t()
    check("Attention module (GQA, RoPE)", got, want, 1e-5)

    # RMSNorm vs. explicit formula in float64, and bf16 input path.
    norm = RMSNorm(args.dim, 1e-5)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(args.dim, generator=g))
    y = torch.randn(bs, seqlen, args.dim, generator=g)
    yd = y.double()
    want = yd / torch.sqrt((yd * yd).mean(-1, keepdim=True) + 1e-5) * norm.weight.double()
    check("RMSNorm", norm(y), want, 1e-5)

    # Hidden dim formula (torchtitan values): Llama 3 8B is 14336, 70B is 28672.
    for (dim, mult, fm, want_h) in [(4096, 1024, 1.3, 14336), (8192, 4096, 1.3, 28672),
                                    (64, 32, None, 192), (256, 256, None, 768)]:
        h = ModelArgs(dim, 1, 8, 8, 10, mult, fm, 1e-5, 1e4).hidden_dim()
        ok = h == want_h
        print(f"{'ok  ' if ok else 'FAIL'} hidden_dim(dim={dim}, multiple_of={mult}, "
              f"ffn_dim_multiplier={fm}) = {h} (want {want_h})")
        if not ok:
            failures.append("hidden_dim")

    # Parameter names and shapes.
    args = ModelArgs(64, 2, 4, 2, 97, 32, None, 1e-5, 1e4)
    names = {k: tuple(v.shape) for k, v in Transformer(args).state_dict().items()}
    want_names = {"tok_embeddings.weight": (97, 64), "norm.weight": (64,),
                  "output.weight": (97, 64)}
    for i in range(2):
        p = f"layers.{i}."
        want_names.update({
            p + "attention_norm.weight": (64,), p + "ffn_norm.weight": (64,),
            p + "attention.wq.weight": (64, 64), p + "attention.wk.weight": (32, 64),
            p + "attention.wv.weight": (32, 64), p + "attention.wo.weight": (64, 64),
            p + "feed_forward.w1.weight": (192, 64), p + "feed_forward.w2.weight": (64, 192),
            p + "feed_forward.w3.weight": (192, 64)})
    ok = names == want_names
    print(f"{'ok  ' if ok else 'FAIL'} state dict names and shapes ({len(names)} tensors)")
    if not ok:
        failures.append("state dict names")

    if failures:
        print(f"self-test FAILED: {', '.join(failures)}")
        return 1
    print("self-test passed")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("make-fixture", help="seeded init.pt + tokens.bin")
    p.add_argument("--out-dir", required=True)
    add_model_flags(p)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-tokens", type=int, required=True)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    p.add_argument("--eos-id", type=int, default=None,
                   help="make the tokens documents ending with this token (needs --doc-lengths)")
    p.add_argument("--doc-lengths", default="",
                   help="comma-separated document lengths (EOS included), cycled")
    p.set_defaults(fn=cmd_make_fixture)

    p = sub.add_parser("train", help="AdamW steps; per-step loss and grad norm to JSON")
    p.add_argument("--init", required=True)
    p.add_argument("--tokens", required=True)
    p.add_argument("--seq-len", type=int, required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--max-norm", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    p.add_argument("--eos-id", type=int, default=None,
                   help="block-causal attention: documents end with this token")
    p.add_argument("--verbose", action="store_true")
    add_model_flags(p)
    p.set_defaults(fn=cmd_train)

    p = sub.add_parser("self-test", help="RoPE / GQA / attention vs. independent formulations")
    p.add_argument("--seed", type=int, default=1234)
    p.set_defaults(fn=cmd_self_test)

    ns = ap.parse_args(argv)
    return ns.fn(ns)


if __name__ == "__main__":
    sys.exit(main())
