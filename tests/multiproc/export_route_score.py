"""Routes and scores text with nothing but an export of a paco DiPaCo run (paco_train --export DIR
--export-hf): router.json and the Hugging Face GPT-2 directories under DIR/hf/. A GPT-2 forward
pass is written here in numpy from config.json alone (GPT-2's architecture: learned positions,
pre-norm blocks, gelu_new, Conv1D weights stored (in, out)); nothing of paco is imported.

A text's route: the mean of the base model's last block output (before ln_f) over its first
`prefix` bytes, the nearest of router.json's centroids. Its score: the routed path's bits per byte
over every byte after the first, in sliding windows of n_positions bytes with stride half that
(each byte scored once, with the most context a window gives it).

usage: python3 -I export_route_score.py DIR FILE [FILE ...]
prints {"texts": [{"file", "path", "bits_per_byte", "bytes"}, ...]} (path: the router's index)."""
import json
import math
import os
import struct
import sys

import numpy as np


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    out = {}
    for name, v in header.items():
        assert v["dtype"] == "F32", f"{name}: dtype {v['dtype']}"
        b, e = v["data_offsets"]
        out[name] = np.frombuffer(data[b:e], dtype="<f4").reshape(v["shape"])
    return out


class GPT2:
    def __init__(self, directory):
        self.cfg = json.load(open(os.path.join(directory, "config.json")))
        assert self.cfg["activation_function"] == "gelu_new"
        t = read_safetensors(os.path.join(directory, "model.safetensors"))
        self.t = {k.removeprefix("transformer."): v.astype(np.float64) for k, v in t.items()}
        self.head = self.t.get("lm_head.weight", self.t["wte.weight"])

    def ln(self, x, name):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        eps = self.cfg["layer_norm_epsilon"]
        return (x - mu) / np.sqrt(var + eps) * self.t[name + ".weight"] + self.t[name + ".bias"]

    def hidden(self, ids):
        """The last block's output (T, C) for ids (T ≤ n_positions)."""
        T, C, H = len(ids), self.cfg["n_embd"], self.cfg["n_head"]
        x = self.t["wte.weight"][ids] + self.t["wpe.weight"][:T]
        mask = np.triu(np.full((T, T), -np.inf), 1)
        for i in range(self.cfg["n_layer"]):
            p = f"h.{i}."
            a = self.ln(x, p + "ln_1") @ self.t[p + "attn.c_attn.weight"] + self.t[p + "attn.c_attn.bias"]
            q, k, v = (a[:, j * C:(j + 1) * C].reshape(T, H, C // H).transpose(1, 0, 2) for j in range(3))
            s = q @ k.transpose(0, 2, 1) / math.sqrt(C // H) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            y = ((s / s.sum(-1, keepdims=True)) @ v).transpose(1, 0, 2).reshape(T, C)
            x = x + y @ self.t[p + "attn.c_proj.weight"] + self.t[p + "attn.c_proj.bias"]
            m = self.ln(x, p + "ln_2") @ self.t[p + "mlp.c_fc.weight"] + self.t[p + "mlp.c_fc.bias"]
            m = 0.5 * m * (1 + np.tanh(math.sqrt(2 / math.pi) * (m + 0.044715 * m ** 3)))
            x = x + m @ self.t[p + "mlp.c_proj.weight"] + self.t[p + "mlp.c_proj.bias"]
        return x

    def log_probs(self, ids):
        z = self.ln(self.hidden(ids), "ln_f") @ self.head.T
        z = z - z.max(-1, keepdims=True)
        return z - np.log(np.exp(z).sum(-1, keepdims=True))


def bits_per_byte(model, seq):
    ctx = model.cfg["n_positions"]
    stride = max(1, ctx // 2)
    n = len(seq)
    last = 0 if n - 1 <= ctx else (n - 1 - ctx + stride - 1) // stride
    nats = 0.0
    for w in range(last + 1):
        start = w * stride
        first = 1 if w == 0 else start + ctx - stride + 1
        window = list(seq[start:start + ctx])
        lp = model.log_probs(window)
        for i in range(first, min(n, start + ctx + 1)):
            nats -= lp[i - 1 - start, seq[i]]
    return nats / (n - 1) / math.log(2)


def main():
    d, files = sys.argv[1], sys.argv[2:]
    router = json.load(open(os.path.join(d, "router.json")))
    base = GPT2(os.path.join(d, "hf", "base"))
    paths = {}
    out = []
    for f in files:
        seq = list(open(f, "rb").read())
        if router["kind"] == "kmeans":
            k, dim = router["k"], router["dim"]
            c = np.array(router["centroids"], dtype=np.float64).reshape(k, dim)
            z = base.hidden(seq[:max(1, min(len(seq), router["prefix"]))]).mean(0)
            route = int(np.argmin(((c - z) ** 2).sum(1)))
        else:
            route = 0
        stem = router["paths"][route]
        if stem not in paths:
            paths[stem] = GPT2(os.path.join(d, "hf", stem))
        out.append({"file": f, "path": route, "bits_per_byte": bits_per_byte(paths[stem], seq),
                    "bytes": len(seq)})
    print(json.dumps({"texts": out}))


if __name__ == "__main__":
    main()
