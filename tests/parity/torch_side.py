"""PyTorch side of tests/parity: loads paco's weights and batches from safetensors files,
computes the same quantities with bench/peers/torch_gpt.py and writes them back.

usage: torch_side.py DIR     (DIR holds config.json, weights.safetensors, batch.safetensors)
writes DIR/torch.safetensors: logits, loss, grad.<name> for every parameter, curve (200 losses)
"""
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "peers"))
from torch_gpt import GPT  # noqa: E402


def read_st(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] == "F32", v
        b, e = v["data_offsets"]
        out[k] = torch.from_numpy(np.frombuffer(data[b:e], dtype=np.float32).copy()).reshape(v["shape"])
    return out


def write_st(path, tensors):
    header, off, blobs = {}, 0, []
    for k, t in tensors.items():
        a = t.detach().cpu().contiguous().numpy().astype(np.float32)
        header[k] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
        blobs.append(a.tobytes())
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main(d):
    torch.set_num_threads(1)
    cfg = json.load(open(os.path.join(d, "config.json")))
    w = read_st(os.path.join(d, "weights.safetensors"))
    batch = read_st(os.path.join(d, "batch.safetensors"))
    m = GPT(vocab=cfg["vocab"], ctx=cfg["ctx"], d=cfg["d"], layers=cfg["layers"],
            heads=cfg["heads"], mlp_mult=cfg["mlp_mult"], tie=cfg["tie"])
    sd = m.state_dict()
    if cfg["tie"]:
        w["lm_head.weight"] = w["wte.weight"]
    missing = set(sd) - set(w)
    assert not missing, f"paco's file lacks {missing}"
    m.load_state_dict({k: w[k] for k in sd})
    x = batch["x"].long()
    y = batch["y"].long()
    logits, loss = m(x, y)
    loss.backward()
    out = {"logits": logits, "loss": loss.reshape(1)}
    for n, p in m.named_parameters():
        out["grad." + n] = p.grad
    # 200 AdamW steps from the same weights on the same batches.
    m.load_state_dict({k: w[k] for k in sd})
    opt = torch.optim.AdamW(m.parameters(), lr=cfg["lr"], betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1)
    xs, ys = batch["xs"].long(), batch["ys"].long()
    curve = []
    for s in range(xs.shape[0]):
        opt.zero_grad(set_to_none=True)
        _, l = m(xs[s], ys[s])
        l.backward()
        opt.step()
        curve.append(l.item())
    out["curve"] = torch.tensor(curve)
    write_st(os.path.join(d, "torch.safetensors"), out)


if __name__ == "__main__":
    main(sys.argv[1])
