#!/usr/bin/env python3
"""Prints a base port b such that b ... b + count - 1 could all be bound on 127.0.0.1 a moment
ago (fixed-port tests that run beside others each draw their own block; the C++ tests'
free_port_block in support/processes.hpp), or nothing when none is found. Candidates start from
the caller's process id, so concurrent tests try different blocks first.

    base=$(python3 tests/support/free_port_block.py 16)
"""
import os
import random
import socket
import sys

count = int(sys.argv[1]) if len(sys.argv) > 1 else 8
r = random.Random(os.getppid())
for _ in range(200):
    base = 12000 + count * r.randrange(20000 // count)
    try:
        for port in range(base, base + count):
            s = socket.socket()
            s.bind(("127.0.0.1", port))
            s.close()
        print(base)
        break
    except OSError:
        pass
