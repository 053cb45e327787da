#!/usr/bin/env python3
"""Every public header compiles on its own, checked by clang++ on shared precompiled headers.

The check of a header H is the compile of a unit holding `#include "H"` alone, with its group's
flags (see CMakeLists.txt). Most of that compile is the headers H includes, parsed again for
every header that includes them. Here H's unit is compiled on top of a precompiled header (PCH)
of a "hub" P that H includes unconditionally (directly or through its includes), built with
H's group's flags; the hubs are a few headers chosen greedily by an estimate of their cost
(choose_hubs). A PCH build with -fpch-instantiate-templates is the hub's own check.

Why it checks the same thing: the PCH of P holds exactly what `#include "P"` brings in, and H
brings P in anyway, so the declarations, macros and templates that H's text sees are the same
set as when H is compiled alone (only the order in which its includes are read differs); a
standard or paco header H uses but neither includes itself nor reaches through its includes is
missing either way. P is never reached through an include inside an #if block (its content
might not be H's under H's flags). tests/headers/fixture holds headers that must fail (a
missing standard header, a paco header reached only through a sibling, a conditional include,
an error in a template instantiated by an inline function of a header used as a PCH); the
ctest `headers_checker` runs this script on it with every header a hub. Each PCH is built
alone: clang 14's chained PCHs (a PCH built on another) lost libstdc++'s __N macro and crashed
on paco's headers.

A header whose check passed is not checked again until the contents of a paco header it
includes (at any depth, its own too), its flags or the compiler change (stamps.json in --work;
a change of a system library's headers is not seen: delete the stamps). A PCH is deleted as
soon as the checks that use it are done.

Usage: check_headers.py --manifest FILE --work DIR [--jobs N] [--fresh] [--expect-fail H ...]
The manifest (written by CMake) has lines `cxx PATH`, `root DIR`, `flags GROUP F1;F2;...` and
`header GROUP paco/x/y.hpp`.
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

INCLUDE = re.compile(r'^\s*#\s*include\s+"(paco/[^"]+)"')
OPEN_IF = re.compile(r"^\s*#\s*if")
END_IF = re.compile(r"^\s*#\s*endif")
EXTERNAL = re.compile(r"#\s*include\s+<((?:boost|Eigen|nlohmann|CLI|toml\+\+|prometheus)/[^>]+)>")


def choose_hubs(headers, reach, cost, load=35.0, pch=1.3):
    """The headers whose PCHs the others are compiled on, chosen greedily: a hub costs `pch`
    times its compile (a PCH is written), a header on a hub its own cost less the hub's plus
    `load` (reading the PCH); a hub is added while it lowers the estimated total."""
    hubs = set()

    def total(hs):
        t = 0.0
        for h in headers:
            if h in hs:
                t += pch * cost[h]
                continue
            on = [cost[x] for x in reach[h] if x in hs]
            t += max(cost[h] - max(on), 1.0) + load if on else cost[h]
        return t

    best = total(hubs)
    while True:
        trial = min(((total(hubs | {h}), h) for h in headers if h not in hubs), default=None)
        if trial is None or trial[0] >= best - load:
            return hubs
        best = trial[0]
        hubs.add(trial[1])


def read_manifest(path):
    cxx, root, flags, headers = None, None, {}, []
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            kind, _, rest = line.partition(" ")
            if kind == "cxx":
                cxx = rest
            elif kind == "root":
                root = rest
            elif kind == "flags":
                group, _, fl = rest.partition(" ")
                flags[group] = [x for x in fl.split(";") if x]
            elif kind == "header":
                group, _, h = rest.partition(" ")
                headers.append((group, h))
            else:
                sys.exit(f"check_headers: {path}: unknown line '{line}'")
    if not cxx or not root:
        sys.exit(f"check_headers: {path}: no 'cxx' or 'root' line")
    for g, _ in headers:
        if g not in flags:
            sys.exit(f"check_headers: {path}: group '{g}' has no 'flags' line")
    return cxx, root, flags, headers


class Includes:
    """The paco headers each header includes: all of them, and those outside any #if block."""

    def __init__(self, root):
        self.root = root
        self.all, self.top, self.text = {}, {}, {}

    def scan(self, h):
        if h in self.all:
            return
        path = os.path.join(self.root, h)
        if not os.path.isfile(path):  # not under this root (e.g. a kernels/ header)
            self.all[h], self.top[h], self.text[h] = [], [], b""
            return
        with open(path, "rb") as f:
            data = f.read()
        self.text[h] = data
        depth, found, top = 0, [], []
        for line in data.decode("utf-8", "replace").splitlines():
            if OPEN_IF.match(line):
                depth += 1
            elif END_IF.match(line):
                depth -= 1
            m = INCLUDE.match(line)
            if m:
                found.append(m.group(1))
                if depth == 0:
                    top.append(m.group(1))
        self.all[h], self.top[h] = found, top
        for x in found:
            self.scan(x)

    def reach(self, h, seen=None):
        """The headers h includes outside any #if block, at any depth."""
        seen = set() if seen is None else seen
        for x in self.top[h]:
            if x not in seen and self.text.get(x):
                seen.add(x)
                self.reach(x, seen)
        return seen

    def cost(self, h, closure):
        """An estimate of h's compile, in kB of source: paco's headers behind it and 30 per
        external library header (Boost, Eigen, ...) they name; a relative measure only."""
        named = set()
        for x in closure | {h}:
            named |= set(EXTERNAL.findall(self.text[x].decode("utf-8", "replace")))
        return sum(len(self.text[x]) for x in closure | {h}) / 1000 + 30 * len(named)

    def closure(self, h, seen=None):
        seen = set() if seen is None else seen
        for x in self.all[h]:
            if x not in seen:
                seen.add(x)
                self.closure(x, seen)
        return seen


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--all-hubs", action="store_true",
                    help="every header is a hub (the fixture: each mechanism used)")
    ap.add_argument("--fresh", action="store_true", help="check every header (no stamps)")
    ap.add_argument("--expect-fail", nargs="*", default=None,
                    help="the check passes iff exactly these headers fail (the checker's own test)")
    args = ap.parse_args()
    cxx, root, flags, headers = read_manifest(args.manifest)
    inc = Includes(root)
    for _, h in headers:
        inc.scan(h)
    closure = {h: inc.closure(h) for h in inc.all}
    reach = {h: inc.reach(h) for h in inc.all}
    cost = {h: inc.cost(h, closure[h]) for h in inc.all}
    hubs = set(inc.all) if args.all_hubs else choose_hubs([h for _, h in headers], reach, cost)

    def prefix(h):  # the hub behind h's unconditional includes with the highest cost
        cands = [x for x in reach[h] if x in hubs]
        return max(cands, key=lambda x: (cost[x], x)) if cands else None

    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout

    def key(group, h):
        d = hashlib.sha256()
        d.update(version.encode() + b"\0" + "\0".join(flags[group]).encode() + b"\0")
        for x in sorted(closure[h] | {h}):
            d.update(x.encode() + b"\0" + hashlib.sha256(inc.text[x]).digest())
        return d.hexdigest()

    os.makedirs(args.work, exist_ok=True)
    stamps_path = os.path.join(args.work, "stamps.json")
    try:
        with open(stamps_path) as f:
            stamps = json.load(f)
    except (OSError, ValueError):
        stamps = {}
    if args.fresh:
        stamps = {}
    pch_dir = os.path.join(args.work, "pch")
    shutil.rmtree(pch_dir, ignore_errors=True)
    os.makedirs(pch_dir)

    # The work: a check per (group, header) not up to date; a PCH per (group, prefix) it needs,
    # recursively. A header that is both checked and a prefix in its group is checked by its PCH.
    todo = [(g, h) for g, h in headers if stamps.get(f"{g} {h}") != key(g, h)]
    pchs = {(g, prefix(h)) for g, h in todo if prefix(h) is not None}
    checks = [(g, h) for g, h in todo if (g, h) not in pchs]
    manifest_set = set(headers)
    print(f"check_headers: {len(headers)} headers, {len(headers) - len(todo)} up to date; "
          f"{len(checks)} syntax checks on {len(pchs)} PCHs, {args.jobs} jobs", flush=True)

    lock = threading.Condition()
    done, failed, errors = {}, [], {}
    pch_file = {n: os.path.join(pch_dir, n[0], n[1] + ".pch") for n in pchs}
    deps = {n: None for n in pchs}  # a PCH is built alone (clang 14's chained PCHs lose
    for g, h in checks:              # libstdc++'s macros and crash on paco's headers)
        p = prefix(h)
        deps[(g, h)] = (g, p) if p is not None else None

    def chain(n):  # the PCHs a node's compile reads: its prefix's, and those that one is built on
        while deps[n] is not None:
            n = deps[n]
            yield n

    pending = {}  # a PCH is deleted when no compile left reads it
    for n in deps:
        for p in chain(n):
            pending[p] = pending.get(p, 0) + 1

    def compile_one(node, use):
        g, h = node
        cmd = [cxx, "-std=gnu++20"] + flags[g]
        if use:
            cmd += ["-include-pch", pch_file[deps[node]]]
        if node in pchs:
            out = pch_file[node]
            os.makedirs(os.path.dirname(out), exist_ok=True)
            cmd += ["-fpch-instantiate-templates", "-Wno-pragma-once-outside-header",
                    "-x", "c++-header", os.path.join(root, h), "-o", out]
            return subprocess.run(cmd, capture_output=True, text=True)
        cmd += ["-fsyntax-only", "-x", "c++", "-"]
        return subprocess.run(cmd, input=f'#include "{h}"\n', capture_output=True, text=True)

    # A node is ready when its prefix's PCH is done (built, or failed: then it is compiled
    # without one). Ready PCHs go first, the one with the most checks behind it first.
    def weight(n):
        return (n in pchs, len(closure[n[1]]))

    dependents = {}
    for n, d in deps.items():
        if d is not None:
            dependents.setdefault(d, []).append(n)
    ready = [n for n, d in deps.items() if d is None]
    waiting = len(deps)

    def worker():
        nonlocal waiting
        while True:
            with lock:
                while not ready and waiting:
                    lock.wait()
                if not waiting:
                    return
                ready.sort(key=weight)
                node = ready.pop()
                waiting -= 1
                dep = deps[node]
                use = dep is not None and done[dep]
            r = compile_one(node, use)
            ok = r.returncode == 0
            g, h = node
            with lock:
                for p in chain(node):
                    pending[p] -= 1
                    if pending[p] == 0 and os.path.exists(pch_file[p]):
                        os.remove(pch_file[p])
                done[node] = ok
                ready.extend(dependents.get(node, []))
                if node in manifest_set:
                    if ok:
                        stamps[f"{g} {h}"] = key(g, h)
                    else:
                        stamps.pop(f"{g} {h}", None)
                        failed.append(h)
                        errors[h] = r.stderr
                lock.notify_all()

    threads = [threading.Thread(target=worker) for _ in range(max(1, args.jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    shutil.rmtree(pch_dir, ignore_errors=True)
    tmp = stamps_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(stamps, f, indent=0, sort_keys=True)
    os.replace(tmp, stamps_path)

    for h in sorted(set(failed)):
        print(f"check_headers: FAILED {h} does not compile on its own:\n{errors[h]}", flush=True)
    if args.expect_fail is not None:
        want, got = set(args.expect_fail), set(failed)
        if want != got:
            print(f"check_headers: expected failures {sorted(want)}, got {sorted(got)}")
            return 1
        print(f"check_headers: exactly the {len(want)} expected headers failed")
        return 0
    print(f"check_headers: {len(headers) - len(set(failed))} of {len(headers)} headers compile "
          "on their own")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
