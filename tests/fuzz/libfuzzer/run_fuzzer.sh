#!/usr/bin/env bash
# run_fuzzer.sh SEED_CORPUS WORK_DIR SECONDS FUZZER [ARG...]: replays every seed (past crashes
# included), then fuzzes for SECONDS on a copy of the corpus (the committed one is never changed).
# FUZZER [ARG...] is the command that takes libFuzzer's flags: a libFuzzer binary, or Python with
# an Atheris script. On a crash, prints the input's path: add it to SEED_CORPUS as a regression
# case once it is fixed.
set -u
seeds=$1 work=$2 seconds=$3
shift 3
rm -rf "$work" && mkdir -p "$work/corpus" "$work/crashes" || exit 1
cp "$seeds"/* "$work/corpus/" 2>/dev/null
"$@" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
  -print_final_stats=1 -artifact_prefix="$work/crashes/" "$work/corpus" >"$work/log.txt" 2>&1
rc=$?
tail -25 "$work/log.txt"
if [ "$rc" -ne 0 ] || [ -n "$(ls -A "$work/crashes")" ]; then
  echo "FUZZER FAILED (rc=$rc); the input: $(ls "$work/crashes"/* 2>/dev/null | head -1)"
  exit 1
fi
echo "fuzzer ran clean for ${seconds}s"
