#!/usr/bin/env bash
# The CUDA backend's checks on a machine with a GPU, in one go (target: under 8 minutes on one
# H200): build with CUDA, run the GPU tests, then short `rewind bench --device cuda` runs on
# 1B- and 8B-class `rewind make-dummy` files (BF16 and Q8_0): decode tokens/s and the fraction of
# peak memory bandwidth, the cost curve for 1..17 new tokens with 100 and 4,096 cached, and
# speculative speedups on the shared workloads. Everything goes under OUTDIR (logs, JSON, a
# summary.txt); the exit status is non-zero when a build or a test failed.
#   usage: scripts/gpu-check.sh OUTDIR        (env: REWIND_SHARED_DIR, JOBS, SKIP_8B=1)
set -uo pipefail
if [[ $# -ne 1 ]]; then echo "usage: $0 OUTDIR" >&2; exit 2; fi
out=$(mkdir -p "$1" && cd "$1" && pwd)
cd "$(dirname "$0")/.."
jobs=${JOBS:-$(nproc)}
t0=$SECONDS
status=0
summary="$out/summary.txt"
: > "$summary"
say() { echo "[$(( SECONDS - t0 )) s] $*" | tee -a "$summary"; }
# Runs a command with a time limit, its output to OUTDIR/NAME.log; records failures.
step() {
  local name=$1 limit=$2; shift 2
  local s=$SECONDS
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  say "$name: exit $rc in $(( SECONDS - s )) s"
  if [[ $rc -ne 0 ]]; then status=1; tail -n 30 "$out/$name.log" | sed 's/^/    /' | tee -a "$summary"; fi
  return $rc
}

shared=${REWIND_SHARED_DIR:-}
if [[ -z "$shared" ]]; then
  for d in ../shared shared; do [[ -d "$d/models" ]] && shared=$(cd "$d" && pwd) && break; done
fi
say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
say "shared fixtures: ${shared:-none found (tests that read them will fail)}"
nvcc_path=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
say "nvcc: $("$nvcc_path" --version 2>&1 | tail -1)"

# 1. Build (CUDA on; only what the checks run).
cfg=(-S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DREWIND_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc_path")
[[ -n "$shared" ]] && cfg+=(-DREWIND_SHARED_DIR="$shared")
command -v ccache > /dev/null && cfg+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
step configure 120 cmake "${cfg[@]}" || { say "configure failed"; exit 1; }
tests=(test_cuda_ops test_cuda_matmul test_cuda_attention test_cuda_backend test_kv_cache)
step build 300 cmake --build build-gpu -j"$jobs" --target rewind "${tests[@]}" || { say "build failed"; exit 1; }
nvidia-smi > "$out/nvidia-smi.txt" 2>&1

# 2. GPU tests (each must RUN here, not skip: a skip on a GPU machine is a failure).
for t in "${tests[@]}"; do
  step "$t" 240 build-gpu/tests/"$t" --gtest_brief=1 --gtest_output=json:"$out/$t.json"
  if grep -q "SKIPPED" "$out/$t.log" && [[ "$t" != test_kv_cache ]]; then
    say "$t: some tests SKIPPED on a GPU machine:"; grep -A1 "Skipped\|SKIPPED" "$out/$t.log" | head -8 | tee -a "$summary"
  fi
done

# 3. Benchmarks on dummy models of real shapes (written to fast local disk, deleted after).
rw=build-gpu/apps/rewind/rewind
[[ -x $rw ]] || rw=$(find build-gpu -name rewind -type f -perm -u+x | head -1)
tmp=${TMPDIR:-/tmp}/rewind-gpu-check
mkdir -p "$tmp"
shapes=(llama-1b)
[[ "${SKIP_8B:-0}" == 1 ]] || shapes+=(llama-8b)
for shape in "${shapes[@]}"; do
  for type in bf16 q8_0; do
    f="$tmp/$shape-$type.gguf"
    step "make-$shape-$type" 240 "$rw" make-dummy --shape "$shape" --type "$type" -o "$f" || continue
    # Decode speed, bandwidth fraction and the cost curve over 1..17 tokens, 100 then 4,096 cached.
    step "bench-$shape-$type" 240 "$rw" bench --cost-curve -m "$f" --device cuda --n 1,2,4,8,9,16,17 \
      --prefix 100 --long-prefix 4096 --repeat 5 --prompt-tokens 128 --decode-tokens 32 --bandwidth-mib 0 \
      --json "$out/bench-$shape-$type.json"
    grep -E "^device:|decode|^\| *(1|9|17) " "$out/bench-$shape-$type.log" | head -12 | sed 's/^/    /' >> "$summary"
    rm -f "$f"
  done
done

# 4. Speculative speedups on the shared workloads (small models: launch-bound, but lossless).
if [[ -n "$shared" ]]; then
  step bench-speculative 180 "$rw" bench -m "$shared/models/pycode-4m.gguf" --draft "$shared/models/pycode-600k.gguf" \
    --workload "$shared/workloads/edit.jsonl" --workload "$shared/workloads/ref.jsonl" --items 2 \
    --spec ngram,ref,draft --k 4,8 --repeat 1 --warmup 1 --device cuda --no-progress --no-cost-curve \
    --json "$out/bench-speculative.json"
  tail -n 25 "$out/bench-speculative.log" | sed 's/^/    /' >> "$summary"
fi
say "done (status $status)"
exit $status
