#!/usr/bin/env bash
# One GPU visit for the gpumem tool: build it, then on device memory replay both shared traces and
# run `gpumem bench` with the peers; plus info, the replay throughput benchmark on this host's CPU,
# the CLI tests, and a real PyTorch snapshot through `gpumem convert`. Logs go to $OUT.
set -uo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
out=${OUT:-$root/gpu-out}
mkdir -p "$out"
b=/tmp/gpumem-tool-build
cd "$root"
echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)" | tee "$out/summary.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$out/summary.txt"
cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DGPUMEM_BUILD_TESTS=OFF >"$out/configure.log" 2>&1 || { tail -20 "$out/configure.log"; exit 1; }
ninja -C $b gpumem_cli tool_replay_bench >"$out/build.log" 2>&1 || { grep -E 'error|FAILED' "$out/build.log" | head; exit 1; }
g=$b/tools/gpumem/gpumem
step() { local name=$1; shift; local t0=$(date +%s); "$@" >"$out/$name.txt" 2>&1; echo "$name: rc=$? ($(( $(date +%s) - t0 )) s)" | tee -a "$out/summary.txt"; }
step info $g info
step replay_gpu $g replay tools/gpumem/traces/gpt2_train.csv tools/gpumem/traces/resnet50_train.csv --report "$out/report" --no-progress
step bench_gpu $g bench --no-progress
step replay_simulated $g replay tools/gpumem/traces/gpt2_train.csv tools/gpumem/traces/resnet50_train.csv --simulate --no-progress
step replay_bench $b/bench/tool_replay_bench
$g synth /tmp/big.csv --events 5000000 >/dev/null
step replay_big_pool /usr/bin/time -v $g replay /tmp/big.csv -r pool --simulate --no-progress
step cli_tests bash tools/gpumem/tests/cli_test.sh $g "$root/tools/gpumem/tests" /tmp/gpumem-cli
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  step torch_snapshot python3 tools/gpumem/tests/torch_snapshot.py /tmp/snap.pickle
  step torch_convert $g convert /tmp/snap.pickle -o /tmp/snap.csv
  head -5 /tmp/snap.csv >>"$out/torch_convert.txt"
  step torch_replay $g replay /tmp/snap.csv --no-progress
fi
