"""Loads a model paco exported (paco_train --export, or nn::save_gpt: a safetensors file with
GPT-2-style tensor names and its configuration in the metadata) into PyTorch and scores text
files with paco's one scorer: sliding windows of ctx bytes with stride ctx/2, every byte after
the first one a target, each scored once.

usage: /usr/bin/python3 score_exported.py MODEL FILE [FILE ...] [--stride S]
MODEL: a paco-gpt-1 file, or a directory nn::save_gpt_hf wrote (Hugging Face's GPT-2 layout:
config.json + model.safetensors with Conv1D weights stored (in, out)), read back here into the
same PyTorch twin.
prints bits/byte per file and in all; the last line is JSON {"bits_per_byte":..,"bytes":..}.
The model class is bench/peers/torch_gpt.py, the PyTorch twin of paco's GPT (tests/parity).
Runs with Debian's python3-torch."""
import argparse
import json
import math
import os
import struct
import sys

try:
    import numpy as np
    import torch
except ImportError as e:  # pragma: no cover
    raise SystemExit(f"score_exported.py needs numpy and PyTorch ({e}); on Debian: "
                     "apt install python3-torch, and run /usr/bin/python3")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "peers"))
from torch_gpt import GPT  # noqa: E402


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, v in header.items():
        b, e = v["data_offsets"]
        tensors[name] = torch.from_numpy(np.frombuffer(data[b:e], dtype=np.float32).copy()).reshape(v["shape"])
    return tensors, meta


def from_hf(directory):
    """Hugging Face GPT-2 layout back to paco's names and PyTorch Linear shapes."""
    hf = json.load(open(os.path.join(directory, "config.json")))
    tensors, meta = read_safetensors(os.path.join(directory, "model.safetensors"))
    cfg = {"vocab": hf["vocab_size"], "ctx": hf["n_positions"], "d": hf["n_embd"],
           "layers": hf["n_layer"], "heads": hf["n_head"], "mlp_mult": hf["n_inner"] // hf["n_embd"],
           "tie_weights": hf["tie_word_embeddings"]}
    out = {}
    for name, t in tensors.items():
        name = name.removeprefix("transformer.")
        if name.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")):
            t = t.t().contiguous()  # Conv1D (in, out) -> Linear (out, in)
        out[name] = t
    return out, cfg, meta


def load(path):
    if os.path.isdir(path):
        tensors, cfg, meta = from_hf(path)
    else:
        tensors, meta = read_safetensors(path)
        if meta.get("format") != "paco-gpt-1":
            raise SystemExit(f"{path}: not a paco-gpt-1 file (format {meta.get('format')!r})")
        cfg = json.loads(meta["config"])
    model = GPT(vocab=cfg["vocab"], ctx=cfg["ctx"], d=cfg["d"], layers=cfg["layers"],
                heads=cfg["heads"], mlp_mult=cfg["mlp_mult"], tie=cfg["tie_weights"])
    if cfg["tie_weights"]:
        tensors["lm_head.weight"] = tensors["wte.weight"]
    model.load_state_dict(tensors)
    return model.eval(), cfg, meta


def score(model, ctx, stride, seq):
    """Nats of targets 1 … len(seq)−1 under paco's sliding-window rule."""
    n = len(seq)
    nats = 0.0
    if n < 2:
        return 0.0, 0
    last = 0 if n - 1 <= ctx else (n - 1 - ctx + stride - 1) // stride
    with torch.no_grad():
        for k in range(last + 1):
            start = k * stride
            first = 1 if k == 0 else start + ctx - stride + 1
            x = list(seq[start:start + ctx]) + [0] * max(0, start + ctx - n)
            logits, _ = model(torch.tensor([x], dtype=torch.long))
            logp = torch.log_softmax(logits[0].double(), dim=-1)
            for i in range(first, min(n, start + ctx + 1)):
                nats -= logp[i - 1 - start, seq[i]].item()
    return nats, n - 1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("files", nargs="+")
    p.add_argument("--stride", type=int, default=0)
    a = p.parse_args()
    torch.set_num_threads(1)
    model, cfg, meta = load(a.model)
    ctx = cfg["ctx"]
    stride = a.stride or max(1, ctx // 2)
    total, count = 0.0, 0
    for f in a.files:
        seq = open(f, "rb").read()
        nats, t = score(model, ctx, stride, seq)
        total += nats
        count += t
        print(f"{f}: {nats / max(t, 1) / math.log(2):.6f} bits/byte over {t} bytes")
    bpb = total / max(count, 1) / math.log(2)
    print(f"all: {bpb:.6f} bits/byte ({meta.get('path', 'model')}, sliding_window(T={ctx},S={stride}))")
    print(json.dumps({"bits_per_byte": bpb, "bytes": count, "scorer": f"sliding_window(T={ctx},S={stride})"}))


if __name__ == "__main__":
    main()
