#!/usr/bin/env bash
# Regenerate the shipped profiles (costmodel/data/profiles/*.json), the simulator's defaults, from
# the committed H200 campaign runs:
#   h200.json      measured: `costmodel fit` of every H200 GPU run under $RUNS_DIR (kind gpu, a
#                  passes table, not synthetic), modes diffusion, ar and mtp; pass kinds no run
#                  timed are filled from the stated sources `costmodel fit` prints (or it refuses);
#                  commit statistics from runs with the model's own weights, else the published prior;
#   h100-sxm.json  projected from h200.json at bf16;
#   rtx-5090.json  projected from h200.json at int4 (the 5090's 32 GB cannot hold bf16 weights).
# Environment: RUNS_DIR (default data/runs); PROFILES_DIR (default costmodel/data/profiles);
#   COSTMODEL (default .venv/bin/costmodel);
#   MTP_METRICS="before.prom after.prom" (vLLM /metrics scrapes) for measured MTP acceptance;
#   FIT_ARGS (extra `costmodel fit` options, e.g. "--engine compiled").
set -euo pipefail
cd "$(dirname "$0")/.."
COSTMODEL=${COSTMODEL:-.venv/bin/costmodel}
RUNS_DIR=${RUNS_DIR:-data/runs}
OUT=${PROFILES_DIR:-costmodel/data/profiles}
mkdir -p "$OUT"

args=(--campaign "$RUNS_DIR" --hardware h200 --modes diffusion,ar,mtp)
for f in ${MTP_METRICS:-}; do args+=(--mtp-metrics "$f"); done
# shellcheck disable=SC2206
args+=(${FIT_ARGS:-})

"$COSTMODEL" fit "${args[@]}" -o "$OUT/h200.json"
"$COSTMODEL" profile project "$OUT/h200.json" --hardware h100-sxm --precision bf16 -o "$OUT/h100-sxm.json"
"$COSTMODEL" profile project "$OUT/h200.json" --hardware rtx-5090 --precision int4 -o "$OUT/rtx-5090.json"
for p in "$OUT/h200.json" "$OUT/h100-sxm.json" "$OUT/rtx-5090.json"; do
  "$COSTMODEL" profile validate "$p"
done
