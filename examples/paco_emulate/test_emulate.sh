#!/usr/bin/env bash
# ctest paco_emulate: a placement written by paco_schedule runs on emulated links in both modes
# (time scaled down 100x to keep it short), and a placement for another scenario is refused.
set -euo pipefail
schedule="$1"; emulate="$2"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
"$schedule" --scenario world8 --quiet --trials 200 --placement-out "$dir/p.json" >/dev/null
for mode in as_modelled native; do
  out=$("$emulate" --scenario world8 --placement "$dir/p.json" --mode "$mode" --iterations 1 \
        --warmup 0 --scale-s 0.01)
  echo "$out"
  echo "$out" | tail -1 | grep -q "\"mode\":\"$mode\""
done
if "$emulate" --scenario regional8 --placement "$dir/p.json" --iterations 1 2>"$dir/err"; then
  echo "a placement for world8 ran as regional8" >&2; exit 1
fi
grep -q "placement.scenario" "$dir/err"
echo "paco_emulate: ok"
