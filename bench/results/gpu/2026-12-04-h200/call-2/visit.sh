#!/usr/bin/env bash
# This session's second device call: the new Hopper defaults (warpgroups,
# rcp.approx in GELU) on the tensor-core, GELU and demo cases, torch, then
# the demo, the runtime's GPU tests and the whole suite on both devices.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export OUT
start=$(date +%s)
BENCH_CASES=matmul_bias_gelu_bf16,bf16_gemm_4096,llm_4096x11008x4096,bmm_32x128x128x4096,decode_m128,bias_gelu_4096x11008,demo \
    SAMPLE=0 SEARCH=0 BENCH_SECONDS=${BENCH_SECONDS:-110} TORCH_SECONDS=${TORCH_SECONDS:-50} \
    PARTS=bench bash "$here/run.sh"
echo "visit: bench done at $(( $(date +%s) - start )) s" | tee -a "$OUT/tests.txt"
CHECK_SECONDS=60 AGREE_SECONDS=${AGREE_SECONDS:-120} AGREE_RANDOM_SECONDS=${AGREE_RANDOM_SECONDS:-30} \
    PARTS=checks bash "$here/run.sh"
echo "visit: all done at $(( $(date +%s) - start )) s" | tee -a "$OUT/tests.txt"
