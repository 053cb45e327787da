#!/usr/bin/env bash
# The kernel cross-check of paco's shaper (issue: DT-FM executed on emulated links): the same
# placement run twice, once on loopback with paco's per-peer shaper giving every link its latency
# and rate, once with each device in a network namespace of its own on a bridge, the kernel's
# tc htb giving each link its rate (one class per destination, u32 filters) and paco's shaper
# only the latency (the kernel has no netem here). Times should agree within 5 %, and the bytes
# htb counted on the wire with what paco sent: its payload plus TCP/IP/Ethernet headers (66 of
# every 1514-byte segment) and the receivers' ACKs (66 bytes every second segment), which share
# the classes of the links they go back on.
# The htb rates carry the TCP/IP/Ethernet headers too: they are set 1514/1448 higher so that the
# payload rate matches (MTU 1500 with TCP timestamps).
# Needs root (CAP_NET_ADMIN); without it, exit 77 with the reason. Everything it creates is
# removed on exit, failure included; it touches nothing else (addresses 10.213.88.0/24 inside its
# namespaces only).
#   netns_crosscheck.sh PACO_EMULATE PACO_SCHEDULE [SCENARIO] [ITERATIONS] [SCALE_S]
set -u
emulate="$1"; schedule="$2"; scenario="${3:-world8}"; iterations="${4:-3}"; scale="${5:-0.1}"
n=8; tag="pe$$"; br="${tag}b"
work=$(mktemp -d)
cleanup() {
  for r in $(seq 0 $((n - 1))); do ip netns del "${tag}_$r" 2>/dev/null; done
  ip netns del "$br" 2>/dev/null
  rm -rf "$work"; true
}
trap cleanup EXIT
if ! ip netns add "$br" 2>/dev/null; then
  echo "SKIP: cannot create network namespaces (needs root / CAP_NET_ADMIN)"; exit 77
fi
ip -n "$br" link add br0 type bridge || { echo "SKIP: no bridge link type"; exit 77; }
ip -n "$br" link set br0 up; ip -n "$br" link set lo up
"$emulate" --scenario "$scenario" --scale-s "$scale" --print-links > "$work/links" || exit 1
for r in $(seq 0 $((n - 1))); do
  ns="${tag}_$r"
  ip netns add "$ns" || exit 1
  ip link add "${tag}v$r" type veth peer name "${tag}p$r" || { echo "SKIP: veth not available"; exit 77; }
  ip link set "${tag}v$r" netns "$ns"; ip link set "${tag}p$r" netns "$br"
  ip -n "$br" link set "${tag}p$r" master br0; ip -n "$br" link set "${tag}p$r" up
  ip -n "$ns" addr add "10.213.88.$((r + 1))/24" dev "${tag}v$r"
  ip -n "$ns" link set "${tag}v$r" up; ip -n "$ns" link set lo up
  dev="${tag}v$r"
  if ! ip netns exec "$ns" tc qdisc add dev "$dev" root handle 1: htb default 99; then
    echo "SKIP: tc htb not available"; exit 77
  fi
  ip netns exec "$ns" tc class add dev "$dev" parent 1: classid 1:1 htb rate 10gbit quantum 1514
  ip netns exec "$ns" tc class add dev "$dev" parent 1:1 classid 1:99 htb rate 9gbit quantum 1514
  while read -r i j lat bits; do
    [[ "$i" == "$r" ]] || continue
    rate=$(python3 -c "print(int($bits * 1514 / 1448))")
    ip netns exec "$ns" tc class add dev "$dev" parent 1:1 classid "1:$((10 + j))" \
      htb rate "${rate}bit" ceil "${rate}bit" burst 4k cburst 4k quantum 1514
    # Only the data links (port 7401, either end) are shaped; the control group (7402) is not.
    for port in dport sport; do
      ip netns exec "$ns" tc filter add dev "$dev" parent 1: protocol ip prio 1 u32 \
        match ip dst "10.213.88.$((j + 1))/32" match ip "$port" 7401 0xffff flowid "1:$((10 + j))"
    done
  done < "$work/links"
done
hosts=$(seq -s, 1 $n | sed 's/[0-9]\+/10.213.88.&/g')
"$schedule" --scenario "$scenario" --quiet --placement-out "$work/p.json" > /dev/null || exit 1
paco=$("$emulate" --scenario "$scenario" --placement "$work/p.json" --iterations "$iterations" --scale-s "$scale" | tail -1)
kernel=$("$emulate" --scenario "$scenario" --placement "$work/p.json" --iterations "$iterations" --scale-s "$scale" \
           --hosts "$hosts" --wrap "ip netns exec ${tag}_{r}" --kernel-rates | tail -1)
wire=0
for r in $(seq 0 $((n - 1))); do
  b=$(ip netns exec "${tag}_$r" tc -s class show dev "${tag}v$r" | \
      awk '/^class htb 1:[0-9]+ parent 1:1/ {c=$3} /Sent/ && c != "1:99" && c != "" {s+=$2; c=""} END {print s+0}')
  wire=$((wire + b))
done
python3 - "$paco" "$kernel" "$wire" "$iterations" <<'PY'
import json, sys
paco, kernel, wire, its = json.loads(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
r = kernel["measured_s"] / paco["measured_s"]
payload = kernel["payload_bytes"] * (its + 1)
expected = payload * (1514 / 1448 + 66 / (2 * 1448))
b = wire / expected
print("time per iteration: paco's shaper %.4f s, kernel htb rates %.4f s (ratio %.3f)" %
      (paco["measured_s"], kernel["measured_s"], r))
print("bytes: paco sent %d payload bytes in %d iterations; htb counted %d on the wire, "
      "expected %d with headers and ACKs (ratio %.3f)" % (payload, its + 1, wire, expected, b))
print(json.dumps({"crosscheck": "netns_htb", "paco_s": paco["measured_s"],
                  "kernel_s": kernel["measured_s"], "time_ratio": r, "payload_bytes": payload,
                  "htb_wire_bytes": wire, "bytes_ratio": b}))
sys.exit(0 if 0.95 <= r <= 1.05 and 0.95 <= b <= 1.05 else 1)
PY
