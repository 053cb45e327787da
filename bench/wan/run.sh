#!/usr/bin/env bash
# about: WAN TCP: goodput of 1 vs S striped streams on a long fat link (htb rate, TUN delay line)
# Invoked by `bench/run wan` (PACO_ROOT, PACO_BUILD_DIR set, cmake configured). Needs root.
# Two network namespaces joined by TUN devices; paco_wan_delay forwards every packet between
# them after half the round trip each way (the kernel here has no netem; paco's own shaper
# delays frames at the sender only, which leaves TCP's ACK clock and window untouched, so it
# cannot show what a long round trip does to one stream); tc htb on the sender's TUN device
# limits the rate. bench_wan_worker sends 8 MiB messages from one namespace to the other over
# asio_tcp and reports the goodput after a warm-up, for each row: streams per link, and the
# socket buffers left to autotuning or sized for the bandwidth-delay product (bdp).
# Options: --rate-mbit 200 (payload rate) --rtt-ms 200 --seconds 8 --warm 3
#          --rows "1 2 4 8 1:bdp 4:bdp"
# Last line: {"bench":"wan","rows":[{"streams":S,"bdp":bool,"goodput_frac":..},..],...}
set -euo pipefail
rate_mbit=200; rtt_ms=200; seconds=8; warm=3; rows="1 2 4 8 1:bdp 4:bdp"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rate-mbit) rate_mbit="$2"; shift 2 ;;
    --rtt-ms) rtt_ms="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --warm) warm="$2"; shift 2 ;;
    --rows) rows="$2"; shift 2 ;;
    *) echo "bench/run wan: unknown option '$1' (--rate-mbit --rtt-ms --seconds --warm --rows)" >&2
       exit 2 ;;
  esac
done
cmake --build "$PACO_BUILD_DIR" --target bench_wan_worker paco_wan_delay >&2
worker="$PACO_BUILD_DIR/bench/wan/bench_wan_worker"
delay="$PACO_BUILD_DIR/bench/wan/paco_wan_delay"
skip() {
  echo "bench/run wan: skipped: $1" >&2
  printf '{"bench":"wan","skipped":"%s"}\n' "$1"; exit 0
}
[[ $(id -u) -eq 0 ]] || skip "needs root (network namespaces, tc, /dev/net/tun)"
a="pwan_a$$"; b="pwan_b$$"; work=$(mktemp -d); dpid=""
cleanup() {
  [[ -n "$dpid" ]] && kill "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null
  ip netns del "$a" 2>/dev/null; ip netns del "$b" 2>/dev/null; rm -rf "$work"; true
}
trap cleanup EXIT
ip netns add "$a" 2>/dev/null || skip "cannot create network namespaces"
ip netns add "$b"
ip -n "$a" link set lo up; ip -n "$b" link set lo up
ip -n "$a" tuntap add dev wan0 mode tun 2>/dev/null || skip "no TUN devices"
ip -n "$b" tuntap add dev wan0 mode tun
ip -n "$a" addr add 10.213.99.1 peer 10.213.99.2 dev wan0
ip -n "$b" addr add 10.213.99.2 peer 10.213.99.1 dev wan0
ip -n "$a" link set wan0 up; ip -n "$b" link set wan0 up
# The payload rate: htb counts IP packets (MTU 1500: 1448 payload bytes with TCP timestamps).
wire_kbit=$(python3 -c "print(int($rate_mbit * 1000 * 1500 / 1448))")
ip netns exec "$a" tc qdisc add dev wan0 root handle 1: htb default 1
ip netns exec "$a" tc class add dev wan0 parent 1: classid 1:1 htb rate "${wire_kbit}kbit" \
  ceil "${wire_kbit}kbit"
ip link set dev lo up 2>/dev/null || true
"$delay" "$a" wan0 "$b" wan0 "$(python3 -c "print($rtt_ms / 2)")" > "$work/delay.out" 2>&1 &
dpid=$!
sleep 0.5
rate_Bps=$(python3 -c "print(int($rate_mbit * 1e6 / 8))")
bdp=$(python3 -c "print(int($rate_Bps * $rtt_ms / 1000))")
msg=$((8 << 20))
n=$(python3 -c "import math; print(max(4, math.ceil($rate_Bps * ($seconds + $warm) / $msg)))")
cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
echo "wan: htb ${rate_mbit} Mbit/s payload (${wire_kbit} kbit/s on the wire), delay line" \
     "${rtt_ms} ms round trip, BDP ${bdp} bytes; $n x 8 MiB per row;" \
     "tcp_wmem max $(awk '{print $3}' /proc/sys/net/ipv4/tcp_wmem)," \
     "tcp_rmem max $(awk '{print $3}' /proc/sys/net/ipv4/tcp_rmem)," \
     "congestion control $(cat /proc/sys/net/ipv4/tcp_congestion_control); $cpu" >&2
printf '%-8s %-6s %8s %12s %10s %12s %12s\n' streams bdp rtt_ms goodput_MBps frac so_sndbuf \
  so_rcvbuf >&2
json=""; port=7400
for row in $rows; do
  s="${row%%:*}"; use_bdp=0; [[ "$row" == *:bdp ]] && use_bdp=$bdp
  port=$((port + 1))
  peers=("10.213.99.1:$port" "10.213.99.2:$port")
  ip netns exec "$b" "$worker" 1 "${peers[@]}" "$s" "$use_bdp" "$msg" "$n" "$warm" \
    > "$work/rx.json" 2> "$work/rx.err" &
  rx=$!
  if ! ip netns exec "$a" "$worker" 0 "${peers[@]}" "$s" "$use_bdp" "$msg" "$n" "$warm" \
      2> "$work/tx.err"; then
    cat "$work/tx.err" >&2; kill "$rx" 2>/dev/null; exit 1
  fi
  wait "$rx" || { cat "$work/rx.err" >&2; exit 1; }
  line=$(tail -1 "$work/rx.json")
  out=$(python3 - "$line" "$rate_Bps" "$use_bdp" <<'PY'
import json, sys
r = json.loads(sys.argv[1]); rate = float(sys.argv[2]); bdp = int(sys.argv[3]) > 0
frac = r["goodput_Bps"] / rate
print("%-8d %-6s %8.1f %12.2f %10.3f %12d %12d" % (r["streams"], "yes" if bdp else "no",
      r["rtt_ms"], r["goodput_Bps"] / 1e6, frac, r["so_sndbuf"], r["so_rcvbuf"]))
print(json.dumps({"streams": r["streams"], "bdp": bdp, "goodput_frac": round(frac, 4),
                  "rtt_ms": r["rtt_ms"],
                  "goodput_Bps": round(r["goodput_Bps"]), "seconds": r["seconds"],
                  "so_sndbuf": r["so_sndbuf"], "so_rcvbuf": r["so_rcvbuf"]}))
PY
)
  echo "$out" | head -1 >&2
  json="${json:+$json,}$(echo "$out" | tail -1)"
done
kill "$dpid" 2>/dev/null; wait "$dpid" 2>/dev/null || true; dpid=""
echo "$(tail -1 "$work/delay.out")" >&2
printf '{"bench":"wan","emulation":"tc htb rate + TUN delay line (paco_wan_delay)","rate_mbit":%s,"rtt_ms":%s,"bdp_bytes":%s,"cpu":"%s","rows":[%s]}\n' \
  "$rate_mbit" "$rtt_ms" "$bdp" "$cpu" "$json"
