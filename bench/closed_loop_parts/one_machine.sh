#!/usr/bin/env bash
# The closed loop on one GPU machine: every stage back to back in one detached session (docs/closed_loop.md).
#
# Why one session: a device call lasts at most 10 minutes and the machine goes back 30 s after a call
# ends, so stages split across calls lose minutes at each boundary and cannot be sized to what they
# find. Here the first call starts `run` with setsid (it outlives the call) and every call after it
# only waits on it and packs what is done into the call's $OUT. Nothing of the session lives in the
# checkout the device tool re-sends at each call: the code is a copy, the run folder is RUN.
#
#   bash one_machine.sh run RUN            # the stages (log: RUN/pipeline.log, exit status: RUN/DONE)
#   bash one_machine.sh wait SECONDS RUN   # until RUN/DONE or SECONDS; prints the progress and the log's end
#   bash one_machine.sh collect RUN DIR    # DIR/results.tgz (the report, every stage's record and evaluation),
#                                          # DIR/data.tgz.* (what the stages after `data` read), DIR/pipeline.log
#
# Sizing. The build is bound by torch.compile of each new problem's reference, at a rate nobody has
# measured on this code, so a probe build (PROBE_SIZE problems a level, its own folder) measures it,
# and the real build gets as many problems a level as that rate verifies in BUILD_S seconds (a
# build stopped by its budget resumes once). SFT takes as many epochs as SFT_TOKENS_PER_S fills
# SFT_S with (the budget stops it in any case). Every other stage has its budget below; GRPO_S=0
# leaves GRPO out. DATA_FROM=DIR skips the probe and the build: the data is DIR/data.tgz.*, packed by
# `collect` from a `data` stage run elsewhere (`closed_loop.py --build-device cpu data` on a CPU box).
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
cl() { python3 "$here/bench/closed_loop.py" --profile gpu "$@"; }

PROBE_SIZE=${PROBE_SIZE:-48}
BUILD_S=${BUILD_S:-480}
SFT_S=${SFT_S:-240}
SFT_TOKENS_PER_S=${SFT_TOKENS_PER_S:-70000}   # 68.7k measured on an H100 (2026-11-26)
EVAL_LIMIT=${EVAL_LIMIT:-50}
EVAL_S=${EVAL_S:-120}
GRPO_S=${GRPO_S:-180}

stage() {   # stage NAME ARGS...: one closed_loop.py call, logged with its time and exit status
  local name=$1 t0=$SECONDS rc
  shift
  echo "=== $(date +%T) $name: python3 bench/closed_loop.py --profile gpu $*"
  cl "$@"
  rc=$?
  echo "=== $(date +%T) $name: exit $rc after $((SECONDS - t0)) s"
  return $rc
}

build_size() {   # problems a level the probe's rate verifies in BUILD_S (less the start it measured)
  python3 - "$1" "$BUILD_S" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
n, t = sum(d["verdicts"].values()), d["build_timings"]["total_s"]
start = min(40.0, 0.5 * t)                       # dask, pools and the timers' first compile
rate = n / (t - start)
size = int(rate * (float(sys.argv[2]) - start) / 2 / 64) * 64
print(max(64, min(2700, size)), f"# probe: {n} problems in {t:.0f} s, {rate:.2f}/s after the start", file=sys.stderr)
print(max(64, min(2700, size)))
EOF
}

sft_epochs() {   # epochs that SFT_TOKENS_PER_S fills SFT_S with, from the SFT text's size (~3.5 characters a token)
  python3 - "$1" "$SFT_S" "$SFT_TOKENS_PER_S" <<'EOF'
import sys
from curriculum.schemas import SFT_SCHEMA
from curriculum.shards import read_folder
rows = read_folder(sys.argv[1], SFT_SCHEMA).column("messages").to_pylist()
tokens = sum(len(m["content"]) for r in rows for m in r) / 3.5
epochs = max(1.0, min(12.0, float(sys.argv[2]) * float(sys.argv[3]) / max(tokens, 1.0)))
print(f"# sft: {len(rows)} rows, ~{tokens / 1e6:.1f}M tokens an epoch", file=sys.stderr)
print(f"{epochs:.1f}")
EOF
}

run() {
  local out=$1 size epochs rc
  mkdir -p "$out"
  exec >>"$out/pipeline.log" 2>&1
  echo "=== $(date '+%F %T') start, commit ${CLOSED_LOOP_COMMIT:-?}"
  nvidia-smi --query-gpu=name,memory.used,memory.total,driver_version --format=csv,noheader
  if [ -n "${DATA_FROM:-}" ]; then   # data built elsewhere (`--build-device cpu`), packed by `collect`
    echo "=== $(date +%T) data: unpacked from $DATA_FROM"
    cat "$DATA_FROM"/data.tgz.* | tar -xz -C "$out" && touch "$out/.data-unpacked" || { echo 2 >"$out/DONE"; return; }
  else
    stage probe --stage-size "$PROBE_SIZE" data --out "$out-probe" --budget-s 300
    if [ -f "$out-probe/data.json" ]; then size=$(build_size "$out-probe/data.json"); else size=128; fi
    stage data --stage-size "$size" data --out "$out" --budget-s "$BUILD_S"
    rc=$?
    if [ "$rc" = 3 ]; then
      stage data-resumed --stage-size "$size" data --out "$out" --budget-s 150
      rc=$?
    fi
    [ "$rc" = 0 ] || { echo "$rc" >"$out/DONE"; return; }
  fi
  epochs=$(sft_epochs "$out/sft")
  stage student --epochs "$epochs" student --out "$out" --budget-s "$SFT_S" || { echo 2 >"$out/DONE"; return; }
  stage eval-base eval --eval-stage base --limit 32 --budget-s 30 --out "$out"
  stage eval-sft eval --eval-stage sft --limit "$EVAL_LIMIT" --budget-s "$EVAL_S" --out "$out"
  if [ "$GRPO_S" != 0 ]; then
    stage grpo grpo --budget-s "$GRPO_S" --out "$out"
    stage eval-grpo eval --eval-stage grpo --limit "$EVAL_LIMIT" --budget-s "$EVAL_S" --out "$out"
  fi
  stage report report --out "$out"
  echo 0 >"$out/DONE"
}

wait_for() {
  local limit=$1 out=$2 t0=$SECONDS
  while [ ! -f "$out/DONE" ] && [ $((SECONDS - t0)) -lt "$limit" ]; do sleep 5; done
  echo "--- $(date +%T) after $((SECONDS - t0)) s: DONE=$(cat "$out/DONE" 2>/dev/null || echo running);" \
       "build shards taught: probe $(ls "$out-probe/build/samples" 2>/dev/null | wc -l)," \
       "run $(ls "$out/build/samples" 2>/dev/null | wc -l)"
  nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
  grep -E '^===|^# |closed_loop:|Error|Traceback' "$out/pipeline.log" | tail -n 60
  tail -c 3000 "$out/pipeline.log"
}

collect() {
  local out=$1 dest=$2 files=()
  cp "$out/pipeline.log" "$dest/" 2>/dev/null
  (cd "$out" && for f in report.md pass_at_1.png results.json data.json student.json grpo.json grpo.toml build.toml \
       stages eval grpo/metrics.jsonl grpo/reward.png build/manifest.json; do [ -e "$f" ] && echo "$f"; done) >/tmp/cl-files
  [ -f "$out-probe/data.json" ] && cp "$out-probe/data.json" "$out/probe-data.json" && echo probe-data.json >>/tmp/cl-files
  tar -czf "$dest/results.tgz" -C "$out" -T /tmp/cl-files
  if [ -f "$out/data.json" ] && [ ! -f "$out/.data-unpacked" ]; then   # what student, eval and grpo read, to run them on another machine
    (cd "$out" && ls -d build.toml data.json stages/data.json sft grpo-data eval-sets build/manifest.json \
        build/problems/heldout-*.parquet) >/tmp/cl-files
    tar -czf /tmp/cl-data.tgz -C "$out" -T /tmp/cl-files && split -b 15M -d /tmp/cl-data.tgz "$dest/data.tgz."
  fi
  ls -la "$dest"
}

case "${1:-}" in
  run) run "$2" ;;
  wait) wait_for "$2" "$3" ;;
  collect) collect "$2" "$3" ;;
  *) echo "usage: $0 run RUN | wait SECONDS RUN | collect RUN DIR" >&2; exit 2 ;;
esac
