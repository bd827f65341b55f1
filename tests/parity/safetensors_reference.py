"""Python's safetensors, huggingface_hub and transformers as the reference for ringtrain's own
safetensors code (common/safetensors/), for tests/integration/safetensors_interop_test.cc.

    read FILE               the file through safetensors.safe_open: JSON {"metadata": {...},
                            "tensors": {name: {"dtype", "shape", "bits"}}}, bits as unsigned ints
    resave IN OUT           IN's tensors and metadata written again with safetensors' save_file
    index-json IN           IN (an index) as transformers writes one: json.dumps(indent=2,
                            sort_keys=True) + "\\n"
    plan CASE...            each CASE "MAX:SIZE,SIZE,…": huggingface_hub's split of uint8 tensors
                            "t0", "t1", … of those sizes into shards of at most MAX bytes; JSON,
                            per case {tensor: file name}
    sizes TEXT...           transformers' convert_file_size_to_int of each: JSON list, null where
                            it refuses
"""
import json
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file

NAMES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}


def read(path):
    out = {"tensors": {}}
    with safe_open(path, framework="pt") as f:
        out["metadata"] = f.metadata() or {}
        for name in f.keys():
            t = f.get_tensor(name)
            width = torch.int32 if t.dtype == torch.float32 else torch.int16
            mask = 0xFFFFFFFF if t.dtype == torch.float32 else 0xFFFF
            bits = [b & mask for b in t.reshape(-1).view(width).tolist()]
            out["tensors"][name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "bits": bits}
    print(json.dumps(out))


def resave(src, dst):
    with safe_open(src, framework="pt") as f:
        tensors = {name: f.get_tensor(name) for name in f.keys()}
        metadata = f.metadata()
    save_file(tensors, dst, metadata=metadata)


def index_json(path):
    with open(path, encoding="utf-8") as f:
        index = json.load(f)
    sys.stdout.write(json.dumps(index, indent=2, sort_keys=True) + "\n")


def plan(cases):
    from huggingface_hub import split_torch_state_dict_into_shards

    out = []
    for case in cases:
        max_bytes, sizes = case.split(":")
        state = {f"t{i}": torch.zeros(int(n), dtype=torch.uint8)
                 for i, n in enumerate(sizes.split(","))}
        split = split_torch_state_dict_into_shards(state, max_shard_size=int(max_bytes),
                                                   filename_pattern="model{suffix}.safetensors")
        out.append(split.tensor_to_filename)
    print(json.dumps(out))


def sizes(texts):
    from transformers.utils.hub import convert_file_size_to_int

    out = []
    for text in texts:
        try:
            out.append(convert_file_size_to_int(text))
        except ValueError:
            out.append(None)
    print(json.dumps(out))


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    if command == "read":
        read(*args)
    elif command == "resave":
        resave(*args)
    elif command == "index-json":
        index_json(*args)
    elif command == "plan":
        plan(args)
    elif command == "sizes":
        sizes(args)
    else:
        sys.exit(f"unknown command {command}")
