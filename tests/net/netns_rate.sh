#!/usr/bin/env bash
# A link shaped with tc tbf between two network namespaces delivers within 10% of its
# configured rate, measured with asio_tcp (paco_net_worker rate). Needs CAP_NET_ADMIN; without
# it the test prints why and is skipped (exit 77). Addresses live only inside the namespaces
# this script creates; everything is removed on exit, failure included.
set -u
worker="$1"
rate_mbit="${2:-100}"
bytes="${3:-25165824}"
a="paco_a_$$"; b="paco_b_$$"; va="pveth_a$$"; vb="pveth_b$$"
cleanup() { ip netns del "$a" 2>/dev/null; ip netns del "$b" 2>/dev/null; true; }
trap cleanup EXIT
if ! ip netns add "$a" 2>/dev/null; then
  echo "SKIP: cannot create network namespaces (needs root / CAP_NET_ADMIN)"; exit 77
fi
ip netns add "$b" || { echo "SKIP: second namespace refused"; exit 77; }
ip link add "$va" type veth peer name "$vb" || { echo "SKIP: veth not available"; exit 77; }
ip link set "$va" netns "$a" && ip link set "$vb" netns "$b" || exit 1
ip -n "$a" addr add 10.213.77.1/30 dev "$va" && ip -n "$b" addr add 10.213.77.2/30 dev "$vb" || exit 1
ip -n "$a" link set "$va" up && ip -n "$b" link set "$vb" up || exit 1
ip -n "$a" link set lo up; ip -n "$b" link set lo up
if ! ip netns exec "$a" tc qdisc add dev "$va" root tbf rate "${rate_mbit}mbit" burst 32kb latency 100ms; then
  echo "SKIP: tc tbf not available"; exit 77
fi
peers=(10.213.77.1:7301 10.213.77.2:7301)
ip netns exec "$b" "$worker" rate 1 "${peers[@]}" "$bytes" 0 > "/tmp/paco_netns_$$.out" &
rx=$!
ip netns exec "$a" "$worker" rate 0 "${peers[@]}" "$bytes" 0 || { echo "sender failed"; exit 1; }
wait "$rx" || { echo "receiver failed: $(cat /tmp/paco_netns_$$.out)"; exit 1; }
got=$(awk '/^rate/ {print $2}' "/tmp/paco_netns_$$.out"); rm -f "/tmp/paco_netns_$$.out"
want=$((rate_mbit * 1000000 / 8))
echo "tbf ${rate_mbit} Mbit/s: configured $want B/s, delivered $got B/s"
python3 -c "import sys; g=float('$got'); w=$want; r=g/w; print('ratio %.3f' % r); sys.exit(0 if 0.9 <= r <= 1.1 else 1)"
