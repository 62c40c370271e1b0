#!/usr/bin/env bash
# This session's first device call: the benchmark on every case (the
# wgmma alternatives beside each tensor-core default), torch, then the
# demo, the runtime's GPU tests and the suite's tensor-core kernels on
# both devices.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export OUT
start=$(date +%s)
BENCH_CASES=all SAMPLE=4 SEARCH=0 BENCH_SECONDS=${BENCH_SECONDS:-200} TORCH_SECONDS=${TORCH_SECONDS:-35} \
    PARTS=bench bash "$here/run.sh"
echo "visit: bench done at $(( $(date +%s) - start )) s" | tee -a "$OUT/tests.txt"
CHECK_SECONDS=60 AGREE_KERNELS=mma_ AGREE_SECONDS=${AGREE_SECONDS:-70} AGREE_RANDOM_SECONDS=0 \
    PARTS=checks bash "$here/run.sh"
echo "visit: all done at $(( $(date +%s) - start )) s" | tee -a "$OUT/tests.txt"
