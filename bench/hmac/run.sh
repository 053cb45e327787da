#!/usr/bin/env bash
# about: paco's HMAC-SHA-256 (the TCP handshake's token proof) vs OpenSSL's, handshake-sized and 1 MiB
# Both compute the same digests (checked on random keys and messages first), then each is timed
# on the handshake's message (the label and two greetings, 182 bytes) and on 1 MiB, one thread,
# median of REPS rounds. LAST line: {"bench":"hmac","rows":[{"message_bytes","paco_us",
# "openssl_us","paco_over_openssl"}],...}.
# Usage: bench/run hmac [REPS]   (default 15)
set -euo pipefail
: "${PACO_ROOT:?run through bench/run}" "${PACO_BUILD_DIR:?run through bench/run}"
reps="${1:-15}"
cmake --build "$PACO_BUILD_DIR" --target bench_hmac >&2
echo "machine: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1), $(nproc) cpus;" \
     "one thread; $(openssl version 2>/dev/null || echo 'OpenSSL (version unknown)'); $reps reps" >&2
taskset -c 0 "$PACO_BUILD_DIR/bench/hmac/bench_hmac" "$reps"
