#!/usr/bin/env python3
"""Hugging Face transformers reference for ringtrain's Llama 3 (import, export, train, generate).

Every number it writes comes from transformers' own LlamaForCausalLM (eager attention, float32
compute, one thread, deterministic algorithms), never from a re-implementation: it is the model
that released Llama 3.x checkpoints are defined by. It needs the standard library, torch,
transformers and safetensors (the pinned versions of the project's virtual environment; invoke it
as .venv/bin/python). The same arguments give byte-identical output files.

Subcommands:
  make-model    a seeded random LlamaForCausalLM saved with save_pretrained in D:
                config.json (transformers 5.x spelling `rope_parameters`, or with --config-spelling
                v4 the 4.x / Hub spelling `rope_theta` + `rope_scaling` + `torch_dtype`),
                generation_config.json, model.safetensors or shards + model.safetensors.index.json
                (--max-shard-size), D/reference_info.json (how many RoPE frequencies the scaling
                changes, parameter count, files) and, with --num-tokens, D/tokens.bin
                (little-endian uint16 tokens, nanoGPT layout).
  eval          {"validation_loss": x, "tokens": n, "per_batch": [mean loss of each batch, ...]}
  train         {"steps": [{"step": 1, "loss": ..., "grad_norm": ...}, ...]} (clip_grad_norm_ +
                torch.optim.AdamW(foreach=False)); optionally the trained model (--save-dir)
  generate      {"prompt_ids": [...], "new_ids": [...], "min_logit_margin": m}: greedy
                model.generate with EOS stopping disabled, so exactly --max-new-tokens new ids
  same-weights  exit 0 when two folders' safetensors hold the same names, shapes, dtypes and
                bytes; otherwise prints each difference and exits 1

Data layout (as llama_reference.py): batch k (0-based) uses the windows k*B ... k*B+B-1, taken
modulo (num_tokens-1)//L; window j is tokens[j*L : j*L+L+1], the first L tokens are the inputs
and the last L the labels; positions are 0 ... L-1 in every window. The loss is the sum of the
float32 cross-entropy over the tokens divided by the token count. JSON floats are written with
repr(), so they round-trip exactly.
"""

import argparse
import json
import math
import os
import sys
import time
from array import array

import torch
import torch.nn.functional as F

import transformers
from safetensors.torch import load_file
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class UsageError(Exception):
    """A bad argument or missing input file: reported on stderr, exit status 2."""


# ----------------------------------------------------------------------------------------------
# Helpers


def setup_determinism(seed=0):
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def write_json(path, obj, text=None):
    """Writes obj as JSON (repr() floats: an exact round trip) to a temporary file, then renames.
    text, when given, is obj already formatted."""
    if text is None:
        text = json.dumps(obj, indent=2, allow_nan=False) + "\n"
    if json.loads(text) != obj:
        raise RuntimeError(f"{path}: the JSON text does not round-trip")
    out_dir = os.path.dirname(os.path.abspath(path))
    os.makedirs(out_dir, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def write_tokens(path, tokens):
    arr = array("H", tokens)
    if sys.byteorder != "little":
        arr.byteswap()
    with open(path, "wb") as f:
        arr.tofile(f)


def read_tokens(path):
    if not os.path.isfile(path):
        raise UsageError(f"{path}: no such tokens file")
    size = os.path.getsize(path)
    if size % 2 != 0:
        raise UsageError(f"{path}: size {size} is not a multiple of 2 (uint16 tokens)")
    arr = array("H")
    with open(path, "rb") as f:
        arr.fromfile(f, size // 2)
    if sys.byteorder != "little":
        arr.byteswap()
    return torch.tensor(arr.tolist(), dtype=torch.int64)


def batch_windows(tokens, seq_len, batch, k):
    """(inputs, labels), each (batch, seq_len): batch k's windows k*B ... k*B+B-1 (modulo)."""
    num_windows = (tokens.numel() - 1) // seq_len
    if num_windows < 1:
        raise UsageError(f"{tokens.numel()} tokens give no window of seq_len {seq_len}")
    rows = []
    for b in range(batch):
        j = (k * batch + b) % num_windows
        rows.append(tokens[j * seq_len: j * seq_len + seq_len + 1])
    stacked = torch.stack(rows)
    return stacked[:, :-1], stacked[:, 1:]


def loss_sum(model, inputs, labels):
    """Float32 cross-entropy summed over all tokens, from transformers' forward pass."""
    seq_len = inputs.shape[1]
    position_ids = torch.arange(seq_len, dtype=torch.int64).unsqueeze(0).expand_as(inputs)
    logits = model(input_ids=inputs, position_ids=position_ids, use_cache=False).logits
    return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), reduction="sum")


def load_model(model_dir):
    """LlamaForCausalLM from model_dir in float32 (bf16/f16 files upcast), eager attention.

    Refuses a folder whose tensors do not match the model exactly: transformers would otherwise
    initialise a missing tensor at random and carry on."""
    if not os.path.isfile(os.path.join(model_dir, "config.json")):
        raise UsageError(f"{model_dir}: no config.json (want a save_pretrained folder)")
    model, info = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                   attn_implementation="eager",
                                                   output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        raise UsageError(f"{model_dir}: the weights do not match the model: {problems}")
    if model.config.tie_word_embeddings and (model.lm_head.weight is not
                                             model.model.embed_tokens.weight):
        raise UsageError(f"{model_dir}: tie_word_embeddings is true but lm_head is not tied")
    for name, p in model.named_parameters():
        if p.dtype != torch.float32:
            raise UsageError(f"{model_dir}: {name} loaded as {p.dtype}, want float32")
    return model


def check_positive(ns, *names, minimum=1):
    for name in names:
        if getattr(ns, name) < minimum:
            raise UsageError(f"--{name.replace('_', '-')} {getattr(ns, name)}: want >= {minimum}")


def check_vocab(tokens, model, path):
    if tokens.numel() and int(tokens.max()) >= model.config.vocab_size:
        raise UsageError(f"{path}: token {int(tokens.max())} >= vocab_size "
                         f"{model.config.vocab_size}")


# ----------------------------------------------------------------------------------------------
# make-model


def rope_parameters_from(ns):
    if ns.rope_scaling == "none":
        return {"rope_type": "default", "rope_theta": ns.rope_theta}
    if ns.rope_original_max_position_embeddings is None:
        raise UsageError("--rope-scaling llama3 needs --rope-original-max-position-embeddings")
    return {"rope_type": "llama3", "rope_theta": ns.rope_theta, "factor": ns.rope_factor,
            "low_freq_factor": ns.rope_low_freq_factor,
            "high_freq_factor": ns.rope_high_freq_factor,
            "original_max_position_embeddings": ns.rope_original_max_position_embeddings}


def config_from(ns):
    head_dim = ns.head_dim if ns.head_dim is not None else ns.hidden_size // ns.num_heads
    return LlamaConfig(
        vocab_size=ns.vocab_size, hidden_size=ns.hidden_size,
        intermediate_size=ns.intermediate_size, num_hidden_layers=ns.num_layers,
        num_attention_heads=ns.num_heads,
        num_key_value_heads=ns.num_kv_heads if ns.num_kv_heads is not None else ns.num_heads,
        head_dim=head_dim, max_position_embeddings=ns.max_position_embeddings,
        rms_norm_eps=ns.rms_norm_eps, rope_parameters=rope_parameters_from(ns),
        tie_word_embeddings=ns.tie_word_embeddings, initializer_range=ns.initializer_range,
        hidden_act="silu", attention_bias=False, mlp_bias=False)


def rope_frequencies(config):
    """(inv_freq the model uses, unscaled inv_freq), both from transformers' own code."""
    scaled = LlamaRotaryEmbedding(config).inv_freq
    unscaled, _ = LlamaRotaryEmbedding.compute_default_rope_parameters(config)
    return scaled, unscaled


def to_v4_spelling(cfg):
    """config.json as transformers 4.x (and the Hub's Llama 3.1/3.2 files) spell it: top-level
    rope_theta, rope_scaling (the llama3 parameters, or null), torch_dtype, no rope_parameters."""
    cfg = dict(cfg)
    rope = dict(cfg.pop("rope_parameters"))
    cfg["rope_theta"] = rope.pop("rope_theta")
    if rope.get("rope_type", "default") == "default":
        cfg["rope_scaling"] = None
    else:
        cfg["rope_scaling"] = {k: rope[k] for k in ("factor", "high_freq_factor",
                                                     "low_freq_factor",
                                                     "original_max_position_embeddings",
                                                     "rope_type")}
    cfg["torch_dtype"] = cfg.pop("dtype")
    return dict(sorted(cfg.items()))


def check_v4_reload(out_dir, want_config):
    """transformers must read the rewritten config.json back into the config it was made from,
    with bitwise the same RoPE frequencies; otherwise the v4 fixture would not be honest."""
    got = LlamaConfig.from_pretrained(out_dir)
    a, b = want_config.to_dict(), got.to_dict()
    diffs = sorted(k for k in set(a) | set(b) if a.get(k, "<absent>") != b.get(k, "<absent>"))
    if diffs:
        raise RuntimeError(f"v4 config.json reloads differently: " +
                           ", ".join(f"{k}: {a.get(k)!r} vs {b.get(k)!r}" for k in diffs))
    want_freq, _ = rope_frequencies(want_config)
    got_freq, _ = rope_frequencies(got)
    if not torch.equal(want_freq, got_freq):
        raise RuntimeError(f"v4 config.json gives other RoPE frequencies: {got_freq.tolist()} "
                           f"vs {want_freq.tolist()}")


def safetensors_files(model_dir):
    """The safetensors files of a save_pretrained folder: the index's shards, or the single file."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        return index, weight_map, sorted(set(weight_map.values()))
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.isfile(single):
        return None, None, ["model.safetensors"]
    raise UsageError(f"{model_dir}: neither model.safetensors nor model.safetensors.index.json")


def cmd_make_model(ns):
    setup_determinism(ns.seed)
    t0 = time.time()
    if ns.num_tokens is not None and ns.vocab_size > 65536:
        raise UsageError("--vocab-size > 65536 does not fit uint16 tokens")
    config = config_from(ns)
    torch.manual_seed(ns.seed)
    model = LlamaForCausalLM(config)  # transformers' init: normal(0, initializer_range), norms 1
    model.to(DTYPES[ns.dtype])
    os.makedirs(ns.out_dir, exist_ok=True)
    model.save_pretrained(ns.out_dir, safe_serialization=True, max_shard_size=ns.max_shard_size)

    cfg_path = os.path.join(ns.out_dir, "config.json")
    if ns.config_spelling == "v4":
        with open(cfg_path) as f:
            cfg = json.load(f)
        write_json(cfg_path, to_v4_spelling(cfg))
        check_v4_reload(ns.out_dir, LlamaConfig.from_dict(cfg))

    scaled, unscaled = rope_frequencies(config)
    changed = int((scaled != unscaled).sum())
    _, _, files = safetensors_files(ns.out_dir)
    info = {
        "seed": ns.seed, "dtype": ns.dtype, "config_spelling": ns.config_spelling,
        "rope_scaling": ns.rope_scaling,
        "rope_frequencies": scaled.numel(), "rope_frequencies_changed_by_scaling": changed,
        "inv_freq": [float(x) for x in scaled.tolist()],
        "inv_freq_unscaled": [float(x) for x in unscaled.tolist()],
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "tied": model.lm_head.weight is model.model.embed_tokens.weight,
        "safetensors_files": files, "num_tokens": ns.num_tokens,
    }
    if ns.num_tokens is not None:
        gen = torch.Generator().manual_seed(ns.seed + 1)
        toks = torch.randint(0, ns.vocab_size, (ns.num_tokens,), generator=gen,
                             dtype=torch.int64)
        write_tokens(os.path.join(ns.out_dir, "tokens.bin"), toks.tolist())
    write_json(os.path.join(ns.out_dir, "reference_info.json"), info)
    tokens_note = f", tokens.bin ({ns.num_tokens} tokens)" if ns.num_tokens is not None else ""
    print(f"wrote {ns.out_dir}: {info['num_parameters']} parameters ({ns.dtype}, "
          f"{len(files)} safetensors file(s), config.json {ns.config_spelling}){tokens_note}; "
          f"RoPE scaling changes {changed} of {scaled.numel()} frequencies "
          f"({time.time() - t0:.1f}s)")
    return 0


# ----------------------------------------------------------------------------------------------
# eval / train / generate


def cmd_eval(ns):
    setup_determinism()
    check_positive(ns, "seq_len", "batch", "steps")
    t0 = time.time()
    model = load_model(ns.model).eval()
    tokens = read_tokens(ns.tokens)
    check_vocab(tokens, model, ns.tokens)
    total, per_batch = 0.0, []
    count = ns.batch * ns.seq_len
    with torch.no_grad():
        for k in range(ns.steps):
            inputs, labels = batch_windows(tokens, ns.seq_len, ns.batch, k)
            s = float(loss_sum(model, inputs, labels).item())
            total += s  # float32 sums accumulated in double, as the C++ evaluation does
            per_batch.append(s / count)
    result = {"validation_loss": total / (count * ns.steps), "tokens": count * ns.steps,
              "per_batch": per_batch}
    write_json(ns.out, result)
    print(f"wrote {ns.out}: validation_loss {result['validation_loss']!r} over "
          f"{result['tokens']} tokens ({time.time() - t0:.1f}s)")
    return 0


def cmd_train(ns):
    setup_determinism()
    check_positive(ns, "seq_len", "batch")
    check_positive(ns, "steps", minimum=0)
    t0 = time.time()
    model = load_model(ns.model).train()
    tokens = read_tokens(ns.tokens)
    check_vocab(tokens, model, ns.tokens)
    params = list(model.parameters())  # a tied embedding is one parameter, listed once
    opt = torch.optim.AdamW(params, lr=ns.lr, betas=(ns.beta1, ns.beta2), eps=ns.eps,
                            weight_decay=ns.weight_decay, foreach=False)
    steps = []
    for k in range(ns.steps):
        inputs, labels = batch_windows(tokens, ns.seq_len, ns.batch, k)
        loss = loss_sum(model, inputs, labels) / labels.numel()
        loss.backward()
        total_norm = torch.nn.utils.clip_grad_norm_(params, ns.max_norm)
        opt.step()
        opt.zero_grad(set_to_none=True)
        steps.append({"step": k + 1, "loss": float(loss.item()),
                      "grad_norm": float(total_norm.item())})
    # One step per line, as llama_reference.py writes it.
    text = "{\"steps\": [\n" + ",\n".join("  " + json.dumps(r, allow_nan=False) for r in steps)
    write_json(ns.out, {"steps": steps}, text + "\n]}\n")
    if ns.save_dir:
        model.save_pretrained(ns.save_dir, safe_serialization=True)
    last = f", last loss {steps[-1]['loss']!r}" if steps else ""
    print(f"wrote {ns.out}: {len(steps)} steps{last}"
          f"{', model in ' + ns.save_dir if ns.save_dir else ''} ({time.time() - t0:.1f}s)")
    return 0


def prompt_ids_from(ns, vocab_size):
    if (ns.prompt_ids is None) == (ns.prompt_text is None):
        raise UsageError("give exactly one of --prompt-ids and --prompt-text")
    if ns.prompt_text is not None:
        if vocab_size < 256:
            raise UsageError(f"--prompt-text maps UTF-8 bytes to ids: needs vocab_size >= 256, "
                             f"the model has {vocab_size}")
        ids = list(ns.prompt_text.encode("utf-8"))
    else:
        try:
            ids = [int(x) for x in ns.prompt_ids.split(",")]
        except ValueError:
            raise UsageError(f"--prompt-ids {ns.prompt_ids!r}: want comma-separated integers")
    if not ids:
        raise UsageError("the prompt is empty")
    bad = [i for i in ids if not 0 <= i < vocab_size]
    if bad:
        raise UsageError(f"prompt ids {bad} are outside [0, {vocab_size})")
    return ids


def cmd_generate(ns):
    setup_determinism()
    check_positive(ns, "max_new_tokens")
    t0 = time.time()
    model = load_model(ns.model).eval()
    ids = prompt_ids_from(ns, model.config.vocab_size)
    # No EOS (so nothing stops early) and no min_new_tokens (it would mask the EOS logit and
    # change the greedy choice): exactly max_new_tokens argmax tokens.
    gen_config = GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=ns.max_new_tokens,
                                  eos_token_id=None, pad_token_id=None, bos_token_id=None,
                                  use_cache=True)
    model.generation_config = gen_config
    input_ids = torch.tensor([ids], dtype=torch.int64)
    with torch.no_grad():
        out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids),
                             generation_config=gen_config, output_logits=True,
                             return_dict_in_generate=True)
    new_ids = out.sequences[0, len(ids):].tolist()
    if len(new_ids) != ns.max_new_tokens:
        raise RuntimeError(f"generate gave {len(new_ids)} new tokens, want {ns.max_new_tokens}")
    margin = math.inf
    for step_logits, tok in zip(out.logits, new_ids):
        top2 = torch.topk(step_logits[0].float(), 2)
        if int(top2.indices[0]) != tok:  # nothing but the argmax may choose
            raise RuntimeError(f"generated {tok} is not the argmax {int(top2.indices[0])}")
        margin = min(margin, float(top2.values[0] - top2.values[1]))
    result = {"prompt_ids": ids, "new_ids": new_ids, "min_logit_margin": margin}
    write_json(ns.out, result)
    print(f"wrote {ns.out}: {len(new_ids)} new tokens, smallest top-1/top-2 logit margin "
          f"{margin:.3g} ({time.time() - t0:.1f}s)")
    return 0


# ----------------------------------------------------------------------------------------------
# same-weights


def load_weights(model_dir):
    """name -> tensor from every safetensors file of the folder; checks the index against them."""
    index, weight_map, files = safetensors_files(model_dir)
    tensors = {}
    for name in files:
        path = os.path.join(model_dir, name)
        if not os.path.isfile(path):
            raise UsageError(f"{index}: lists {name}, which is missing")
        for key, t in load_file(path).items():
            if key in tensors:
                raise UsageError(f"{model_dir}: tensor {key} is in more than one file")
            if weight_map is not None and weight_map.get(key) != name:
                raise UsageError(f"{path}: holds {key}, which {index} places in "
                                 f"{weight_map.get(key)}")
            tensors[key] = t
    if weight_map is not None:
        missing = sorted(set(weight_map) - set(tensors))
        if missing:
            raise UsageError(f"{index}: lists {missing}, which no shard holds")
    return tensors


def same_bytes(a, b):
    return torch.equal(a.contiguous().reshape(-1).view(torch.uint8),
                       b.contiguous().reshape(-1).view(torch.uint8))


def cmd_same_weights(ns):
    a, b = load_weights(ns.a), load_weights(ns.b)
    if ns.a_as is not None:
        a = {k: v.to(DTYPES[ns.a_as]) for k, v in a.items()}
    diffs = [f"only in {ns.a}: {k}" for k in sorted(set(a) - set(b))]
    diffs += [f"only in {ns.b}: {k}" for k in sorted(set(b) - set(a))]
    for k in sorted(set(a) & set(b)):
        ta, tb = a[k], b[k]
        if ta.dtype != tb.dtype or ta.shape != tb.shape:
            diffs.append(f"{k}: {ta.dtype} {list(ta.shape)} vs {tb.dtype} {list(tb.shape)}")
        elif not same_bytes(ta, tb):
            n = int((ta.reshape(-1).view(torch.uint8) != tb.reshape(-1).view(torch.uint8)).sum())
            diffs.append(f"{k}: {n} of {ta.numel() * ta.element_size()} bytes differ")
    for d in diffs:
        print(d)
    if diffs:
        print(f"{len(diffs)} difference(s)")
        return 1
    print(f"same weights: {len(a)} tensors")
    return 0


# ----------------------------------------------------------------------------------------------


def add_data_flags(p):
    p.add_argument("--model", required=True, help="a save_pretrained folder")
    p.add_argument("--tokens", required=True, help="little-endian uint16 tokens")
    p.add_argument("--seq-len", type=int, required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--out", required=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("make-model", help="seeded random LlamaForCausalLM via save_pretrained")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--vocab-size", type=int, required=True)
    p.add_argument("--hidden-size", type=int, required=True)
    p.add_argument("--intermediate-size", type=int, required=True)
    p.add_argument("--num-layers", type=int, required=True)
    p.add_argument("--num-heads", type=int, required=True)
    p.add_argument("--num-kv-heads", type=int, default=None, help="default: --num-heads")
    p.add_argument("--head-dim", type=int, default=None, help="default: hidden / heads")
    p.add_argument("--max-position-embeddings", type=int, required=True)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--rms-norm-eps", type=float, default=1e-5)
    p.add_argument("--rope-scaling", choices=["none", "llama3"], default="none")
    p.add_argument("--rope-factor", type=float, default=8.0)
    p.add_argument("--rope-low-freq-factor", type=float, default=1.0)
    p.add_argument("--rope-high-freq-factor", type=float, default=4.0)
    p.add_argument("--rope-original-max-position-embeddings", type=int, default=None)
    p.add_argument("--tie-word-embeddings", action="store_true")
    p.add_argument("--initializer-range", type=float, default=0.02)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float32", help="saved dtype")
    p.add_argument("--max-shard-size", default="50GB", help='e.g. "40KB": several shards')
    p.add_argument("--config-spelling", choices=["v5", "v4"], default="v5")
    p.add_argument("--num-tokens", type=int, default=None, help="also write D/tokens.bin")
    p.set_defaults(fn=cmd_make_model)

    p = sub.add_parser("eval", help="mean loss over --steps batches")
    add_data_flags(p)
    p.set_defaults(fn=cmd_eval)

    p = sub.add_parser("train", help="AdamW steps; per-step loss and grad norm")
    add_data_flags(p)
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--max-norm", type=float, default=1.0)
    p.add_argument("--save-dir", default=None, help="save the trained model here (float32)")
    p.set_defaults(fn=cmd_train)

    p = sub.add_parser("generate", help="greedy generation, exactly --max-new-tokens ids")
    p.add_argument("--model", required=True)
    p.add_argument("--prompt-ids", default=None, help="comma-separated ids, e.g. 1,2,3")
    p.add_argument("--prompt-text", default=None, help="UTF-8 bytes as ids (vocab >= 256)")
    p.add_argument("--max-new-tokens", type=int, required=True)
    p.add_argument("--out", required=True)
    p.set_defaults(fn=cmd_generate)

    p = sub.add_parser("same-weights", help="exit 0 when two folders hold the same tensors")
    p.add_argument("--a", required=True)
    p.add_argument("--b", required=True)
    p.add_argument("--a-as", choices=sorted(DTYPES), default=None,
                   help="convert A's tensors to this dtype first (bf16 -> f32 is exact)")
    p.set_defaults(fn=cmd_same_weights)

    ns = ap.parse_args(argv)
    try:
        return ns.fn(ns)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
