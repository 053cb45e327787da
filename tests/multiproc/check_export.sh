#!/usr/bin/env bash
# ctest dipaco_export: what a finished run exports is enough to route and score new text in a
# fresh Python with nothing but the export's files. A small DiPaCo run (grid 2x2) is exported
# with --export-hf; paco routes and scores three new texts (--score); then
# export_route_score.py — its own numpy GPT-2 written from config.json, run with python3 -I on a
# copy of the export alone — must pick the same path for each text and agree on its bits/byte
# within 1e-4 (relative). The export must also carry the model card (the run's figures), the
# router and each model's byte tokenizer with bos/eos inside the vocabulary; and the run
# directory alone (no -c, no --set) must give the same export, scores and results table.
#   check_export.sh PACO_TRAIN SOURCE_DIR
set -uo pipefail
paco_train=$1 src=$2
work=$(mktemp -d /tmp/paco_export.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
export PACO_TOKEN=export-test
job=(-c "$src/examples/configs/dipaco_brown.toml" --set model.d=32 --set model.layers=2
     --set model.heads=2 --set model.ctx=64 --set train.batch=4 --set train.threads=1
     --set dipaco.rounds=3 --set dipaco.inner_steps=20 --set dipaco.pretrain_steps=30
     --set train.warmup=2 --set dipaco.reroute_every=0 --set output.dir="$work/run")
"$paco_train" "${job[@]}" >"$work/run.out" 2>&1 || { rc=$?; cat "$work/run.out"; fail "the run exited $rc"; }
# The processes' logs carry the time of each line (UTC, ISO 8601, to the millisecond).
stamp='^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z '
grep -Eq "${stamp}store: serving" "$work/run/store.log" || { head -3 "$work/run/store.log"; fail "store.log lines carry no time"; }
[ "$(grep -Evc "$stamp" "$work/run/store.log")" = 0 ] || fail "a line of store.log carries no time"
# ... and each worker's log a line a round: its loss, throughput, bytes and ETA.
grep -Eq "${stamp}worker 1: round 3 of 3 pushed: loss [0-9.]+ \([0-9.]+ bits/byte\), [0-9]+ tokens/s, sync [0-9.]+ s, [0-9.]+ MB sent; eta 0:00" "$work/run/worker-1.log" ||
  { cat "$work/run/worker-1.log"; fail "worker-1.log has no line for its last round"; }
"$paco_train" "${job[@]}" --export "$work/export" --export-hf >"$work/export.out" 2>&1 ||
  { rc=$?; cat "$work/export.out"; fail "--export exited $rc"; }
# Three texts the run never saw: prose, a list of figures, and code (one longer than a window).
printf 'The committee met again on Thursday evening and agreed, after a long and sometimes heated discussion, that the new library would open in the spring.' >"$work/a.txt"
printf 'Rainfall (mm), 1961: Jan 54, Feb 41, Mar 38, Apr 45, May 51, Jun 62, Jul 70, Aug 66.\n' >"$work/b.txt"
printf 'for (int i = 0; i < n; ++i) {\n  total += weights[i] * values[i];\n}\nreturn total / n;\n' >"$work/c.txt"
files=("$work/a.txt" "$work/b.txt" "$work/c.txt")
"$paco_train" "${job[@]}" --score "${files[@]}" >"$work/paco.out" 2>&1 ||
  { rc=$?; cat "$work/paco.out"; fail "--score exited $rc"; }
cat "$work/paco.out"
# The run directory alone (it keeps the configuration it was started with): the same export and
# the same scores, without the run's -c and --set.
"$paco_train" --run-dir "$work/run" --export "$work/export_again" >"$work/again.out" 2>&1 ||
  { rc=$?; cat "$work/again.out"; fail "--export with only --run-dir exited $rc"; }
cmp -s "$work/export/path-1-1.safetensors" "$work/export_again/path-1-1.safetensors" ||
  fail "--export with only --run-dir wrote another path-1-1"
"$paco_train" --run-dir "$work/run" --score "${files[@]}" >"$work/again_score.out" 2>&1 ||
  { rc=$?; cat "$work/again_score.out"; fail "--score with only --run-dir exited $rc"; }
[ "$(tail -n 1 "$work/paco.out")" = "$(tail -n 1 "$work/again_score.out")" ] ||
  fail "--score with only --run-dir scored differently"
# The results table of the finished run from its directory alone (how a manual-mode or mpirun
# run gets its table later): the table the launcher printed, row for row.
"$paco_train" --run-dir "$work/run" --results >"$work/results.out" 2>&1 ||
  { rc=$?; cat "$work/results.out"; fail "--results with only --run-dir exited $rc"; }
grep -q '^| all (routed) |' "$work/results.out" || { cat "$work/results.out"; fail "--results printed no table"; }
diff <(grep '^|' "$work/run.out") <(grep '^|' "$work/results.out") ||
  fail "--results printed another table than the launcher's"
# The export alone, elsewhere.
mkdir "$work/elsewhere"
cp -r "$work/export" "$work/elsewhere/"
(cd "$work/elsewhere" && /usr/bin/python3 -I "$src/tests/multiproc/export_route_score.py" export \
   "${files[@]}") >"$work/python.out" 2>&1 || { cat "$work/python.out"; fail "the Python side failed"; }
cat "$work/python.out"
/usr/bin/python3 - "$work/paco.out" "$work/python.out" <<'PY' || fail "the two sides disagree"
import json, sys
paco = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])["texts"]
py = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])["texts"]
assert len(paco) == len(py) == 3
for a, b in zip(paco, py):
    assert a["path"] == b["path"], f"{a['file']}: paco routes to {a['path']}, Python to {b['path']}"
    rel = abs(a["bits_per_byte"] - b["bits_per_byte"]) / a["bits_per_byte"]
    assert rel < 1e-4, f"{a['file']}: {a['bits_per_byte']} vs {b['bits_per_byte']} ({rel:.2e})"
    print(f"{a['file']}: path {a['path']}, {a['bits_per_byte']:.6f} vs {b['bits_per_byte']:.6f} bits/byte ({rel:.1e})")
PY
e="$work/export"
for f in router.json README.md base.safetensors hf/base/tokenizer.json hf/base/tokenizer_config.json; do
  [ -s "$e/$f" ] || fail "the export has no $f"
done
grep -q '^| all (routed) |' "$e/README.md" || fail "the model card quotes no results"
[ "$(head -n 1 "$e/README.md")" = "---" ] && grep -q '^library_name: paco$' "$e/README.md" ||
  fail "the model card has no metadata header"
grep -q 'GPT2LMHeadModel.from_pretrained("path-1-1")' "$e/hf/path-1-1/README.md" ||
  fail "hf/path-1-1 has no README with a loading snippet"
grep -q 'dipaco.grid=2x2' "$e/README.md" || fail "the model card has not the run's configuration"
/usr/bin/python3 -c "
import json, sys
c = json.load(open('$e/hf/path-1-1/config.json'))
assert c['bos_token_id'] == 0 and c['eos_token_id'] == 0 and c['vocab_size'] == 256, c
" || fail "bos/eos are not inside the vocabulary"
echo "PASS: the export routes and scores new text in Python as paco does"
