#!/usr/bin/env bash
# Runs every libFuzzer target of a REWIND_FUZZ=ON build for a bounded time, from its seed corpus
# (made at build time from ../shared) and the regression corpus in tests/fuzz_regressions.
# Fails on any crash, leak, timeout (per input), out-of-memory or sanitizer report, and prints
# each target's executions and coverage (libFuzzer's cov/ft).
# Usage: fuzz/run.sh BUILD_DIR SECONDS_PER_TARGET [extra libFuzzer flags...]
#   e.g. fuzz/run.sh build-clang 40                    (CI: 9 targets, about 7 minutes together)
#        fuzz/run.sh build-clang 0 -runs=2000000        (a campaign: a fixed number of executions)
set -uo pipefail
build=${1:?usage: fuzz/run.sh BUILD_DIR SECONDS [libFuzzer flags]}
seconds=${2:?seconds per target (0: no time limit)}
shift 2
src=$(cd "$(dirname "$0")/.." && pwd)
bin=$build/fuzz/bin
seeds=$build/fuzz/seeds
work=$build/fuzz/work
# Inputs larger than a target needs only slow it down: the tiny seed models are about 70 KB.
declare -A max_len=([gguf]=131072 [tokenizer]=4096 [kv_state]=16384 [workload]=16384 [reference]=8192 [serve_request]=4096 [gbnf]=4096 [json_schema]=4096 [regex]=512)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
printf '%-10s %12s %8s %8s %9s %s\n' target executions cov ft seconds result
for t in gguf tokenizer kv_state workload reference serve_request gbnf json_schema regex; do
  mkdir -p "$work/corpus/$t" "$work/artifacts"
  log=$work/$t.log
  start=$(date +%s)
  dict=() # a target's dictionary (fuzz/TARGET.dict): its input's keywords, for mutations to insert
  [ -f "$src/fuzz/$t.dict" ] && dict=(-dict="$src/fuzz/$t.dict")
  nice -n "${FUZZ_NICE:-0}" "$bin/fuzz_$t" "$work/corpus/$t" "$seeds/$t" "$src/tests/fuzz_regressions/$t" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len="${max_len[$t]}" \
    -print_final_stats=1 -artifact_prefix="$work/artifacts/$t-" "${dict[@]}" "$@" >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' <<<"$last" | grep -o '[0-9]*')
  ft=$(grep -o 'ft: [0-9]*' <<<"$last" | grep -o '[0-9]*')
  result=ok
  if [ $rc -ne 0 ]; then
    result="FAILED (exit $rc, log $log)"
    failed+=("$t")
    grep -E 'ERROR: |runtime error|Test unit written|PropertyFailure|terminate called' "$log" | head -5 | sed 's/^/    /'
  fi
  printf '%-10s %12s %8s %8s %9s %s\n' "$t" "${execs:-?}" "${cov:-?}" "${ft:-?}" "$secs" "$result"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in: ${failed[*]} (inputs in $work/artifacts; minimize with -minimize_crash=1, then add to tests/fuzz_regressions/<target>/)"
  exit 1
fi
