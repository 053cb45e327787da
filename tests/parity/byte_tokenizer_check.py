"""Checks the byte tokenizer paco writes beside a Hugging Face export (nn::write_byte_tokenizer)
against GPT-2's own byte <-> character map, re-derived here as OpenAI's encoder.py defines it
(bytes_to_unicode), with nothing of paco: tokenizer.json's byte-level BPE, with no merges, must
encode any text to its UTF-8 bytes as ids and decode them back.

usage: python3 byte_tokenizer_check.py HF_DIR     (prints "ok" and exits 0, or says what differs)"""
import json
import os
import sys


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def main():
    d = sys.argv[1]
    tok = json.load(open(os.path.join(d, "tokenizer.json"), encoding="utf-8"))
    cfg = json.load(open(os.path.join(d, "config.json")))
    tc = json.load(open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8"))
    m = tok["model"]
    assert m["type"] == "BPE" and m["merges"] == [], "not a byte-level BPE without merges"
    assert tok["pre_tokenizer"]["type"] == "ByteLevel" and tok["decoder"]["type"] == "ByteLevel"
    vocab = m["vocab"]
    assert len(vocab) == 256 == cfg["vocab_size"], f"{len(vocab)} tokens, vocab_size {cfg['vocab_size']}"
    enc = bytes_to_unicode()
    dec = {v: k for k, v in vocab.items()}
    for b in range(256):
        assert vocab[enc[b]] == b, f"byte {b} is token {vocab.get(enc[b])}"
    text = "Naïve café, 1961 — “quoted” text\twith tabs\nand 日本語."
    ids = [vocab[enc[b]] for b in text.encode("utf-8")]
    assert ids == list(text.encode("utf-8")), "ids are not the UTF-8 bytes"
    back = bytes(dict((c, b) for b, c in enc.items())[dec[i]] for i in ids).decode("utf-8")
    assert back == text, "decoding does not give the text back"
    for k in ("bos_token_id", "eos_token_id"):
        assert 0 <= cfg[k] < cfg["vocab_size"], f"{k} {cfg[k]} outside the vocabulary"
    assert "bos_token" not in tc and "eos_token" not in tc, "special tokens would not be bytes"
    assert tok["added_tokens"] == [] and tc["model_max_length"] == cfg["n_positions"]
    print("ok")


if __name__ == "__main__":
    main()
