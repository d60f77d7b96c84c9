#!/usr/bin/env bash
# The shipped "ops" what-if profiles from the committed op tables, data/runs/ops/ (their README: how they were
# timed, by a kernel lab since removed from the product) - a thin wrapper of the CLI: `costmodel fit` of an
# op table composes its passes, fits them and makes every pass model a table (measure/fit/ops_runs.py). No GPU:
#   OUT/h100-sxm-bf16.json  OUT/h100-sxm-fp8.json  OUT/h200-bf16.json  OUT/h200-fp8.json   (measured ops)
#   OUT/rtx-5090-int4.json  per-op projection of the H100 bf16 table to the RTX 5090 in int4 (weight-only; the
#                           precision the project ships for 32 GB), composed and fitted the same way (provenance "projected")
# each with the engine step term calibrated to the published vLLM AR figure (below)
# usage: bash scripts/build_ops_profiles.sh OUT_DIR   (SHIP=1 installs them as labelled what-ifs,
#        all in costmodel/data/profiles/ops/: the defaults are the measured engine, scripts/build_engine_profiles.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/build_ops_profiles.sh OUT_DIR}
CM=${COSTMODEL:-.venv/bin/costmodel}
OPS=${OPS_DIR:-data/runs/ops}
mkdir -p "$OUT"
for run in "$OPS/h100:h100-sxm" "$OPS/h200:h200"; do
  for p in bf16 fp8; do
    "$CM" fit "${run%%:*}" --precision "$p" --id "${run##*:}-$p" -o "$OUT/${run##*:}-$p.json" | tee "$OUT/fit-${run##*:}-$p.log"
  done
done
# --hardware names another GPU than the table's: `costmodel fit` projects the table per op first (measure/ops/project.py)
"$CM" fit "$OPS/h100" --hardware rtx-5090 --precision int4 --id rtx-5090-int4 -o "$OUT/rtx-5090-int4.json" \
  --note "PROJECTED, not measured: every op of the H100 bf16 table carried to the RTX 5090's int4 (weight-only) roofline (floor + roofline-scaled rest, measure/ops/project.py), then composed and fitted; int4 kernels were not timed anywhere" \
  | tee "$OUT/fit-rtx-5090-int4.log"
# The engine users run: one constant step term (vLLM's per-step work beyond these kernels: host work, its own
# launches) fitted to the published vLLM AR batch-1 figure on the H100 in fp8 (data/published), applied to every
# mode there - MTP's and DiffusionGemma's published figures stay a held-out check (benchmarks/bench_published.py) -
# and carried, labelled, to the other GPUs and precisions.
PUB=${PUBLISHED:-data/published/vllm-blog-2026-06-10}
rm -rf "$OUT/published-ar"
"$CM" import-bench "$PUB/ar.json" -o "$OUT/published-ar"
"$CM" fit --calibrate "$OUT/published-ar" --profile "$OUT/h100-sxm-fp8.json" --hardware h100-sxm --apply-to all --id h100-sxm-fp8 \
  -o "$OUT/h100-sxm-fp8.json" | tee "$OUT/calibrate-h100-sxm-fp8.log"
for p in h100-sxm-bf16 h200-bf16 h200-fp8 rtx-5090-int4; do
  "$CM" profile carry-term "$OUT/$p.json" --from "$OUT/h100-sxm-fp8.json" -o "$OUT/$p.json"
done
if [ "${SHIP:-0}" = 1 ]; then
  D=costmodel/data/profiles
  cp "$OUT/h100-sxm-bf16.json" "$OUT/h200-bf16.json" "$OUT/rtx-5090-int4.json" "$D/ops/"
  cp "$OUT/h100-sxm-fp8.json" "$OUT/h200-fp8.json" "$D/ops/"
  echo "shipped: $D/ops/{h100-sxm-bf16,h200-bf16,rtx-5090-int4,h100-sxm-fp8,h200-fp8}.json"
fi
