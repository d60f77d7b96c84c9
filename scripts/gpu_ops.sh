#!/usr/bin/env bash
# Operator-profiler campaign on the device machine (issue 17): every op of the three models' passes
# at their real shapes, bf16 and fp8, fastest kernel per shape, CUDA-graph timing, into
# $OUT/<gpu>/ops.csv + meta.json (provenance, copy bandwidth, overhead term, missing units).
#   bash scripts/gpu_ops.sh smoke [BUDGET_S]   # a few shapes per op: checks every kernel path (~1-2 min)
#   bash scripts/gpu_ops.sh full  [BUDGET_S]   # the whole grid (default budget 430 s of timing)
#   bash scripts/gpu_ops.sh fused-rerun [BUDGET_S]  # re-time the families of the fused kernels, merged into data/runs/ops/<gpu>
#   bash scripts/gpu_ops.sh chain [BUDGET_S]   # composition check: whole passes chained op by op in one CUDA graph
#                                              # (kernels from the committed data/runs/ops/<gpu>/ops.csv) vs the composed sum
# Then on any machine: python -m measure.ops.compose ... and python -m measure.ops.targets ...
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
MODE=${1:-full}
BUDGET=${2:-430}
DEST=${OUT:-/tmp/ops-out}
tag=$(python3 -c "import torch; n=torch.cuda.get_device_name(); print('h200' if 'H200' in n else 'h100' if 'H100' in n else 'gpu')")
mkdir -p "$DEST/$tag"
if [ "$MODE" = attn-rerun ]; then  # re-time attention into the committed table (merged on the device), then the chain check
  mkdir -p "$DEST/$tag-attn"
  python3 -m measure.ops.campaign -o "$DEST/$tag-attn" --grid full --budget-s "$BUDGET" --precisions bf16,fp8 --only attn > "$DEST/$tag-attn/campaign.log" 2>&1
  tail -2 "$DEST/$tag-attn/campaign.log"
  python3 -m measure.ops.merge "data/runs/ops/$tag" "$DEST/$tag-attn" --families attn --why "attention re-timed with q = 3, 5 added to the causal grid (MTP verify)"
  mkdir -p "$DEST/$tag"; cp "data/runs/ops/$tag/ops.csv" "data/runs/ops/$tag/meta.json" "$DEST/$tag/"
  MODE=chain
fi
if [ "$MODE" = fused-rerun ]; then  # re-time the families the fused kernels changed into the committed table (merged unit by unit)
  # env FAMS (families), LIMITS (campaign --limit / --skip-ops flags), CHECKS (self-checks to run), FAMS2/LIMITS2/BUDGET2: a second stage timed after the first is
  # merged (moe_dense), CHAIN=1: then the chain check (CHAIN_BUDGET s)
  FAMS=${FAMS:-moe,norm_fused,qk_norm_rope,gemm,router,attn}
  LIMITS=${LIMITS---limit gemm:m=8 --limit router:m=8 --limit attn:q=9}
  R=/tmp/$tag-rerun; mkdir -p "$R"
  python3 -m measure.ops.campaign -o "$R" --grid full --budget-s "$BUDGET" --precisions bf16,fp8 --only $FAMS $LIMITS \
    ${CHECKS:+--checks $CHECKS} > "$R/campaign.log" 2>&1 || true
  tail -2 "$R/campaign.log" | cut -c1-300
  python3 -m measure.ops.compare "data/runs/ops/$tag" "$R" > "$DEST/$tag/compare.txt"
  python3 -m measure.ops.merge "data/runs/ops/$tag" "$R" --families $FAMS \
    --why "${WHY:-fused kernels (measure/ops/triton_fused.py): fused-launch MoE, 2-launch MoE GEMV, dense GEMV m<=8, fused norms, q/k norm+RoPE in one launch, GEMV router m<=8, split-KV decode attention with a Triton combine (q<=9)}"
  cp "data/runs/ops/$tag/ops.csv" "data/runs/ops/$tag/meta.json" "$DEST/$tag/"; cp "$R/campaign.log" "$DEST/$tag/campaign-rerun.log"
  if [ -n "${FAMS2:-}" ]; then  # a second stage timed over the table just merged (moe_dense builds its parts with its kernels)
    R2=/tmp/$tag-rerun2; mkdir -p "$R2"
    python3 -m measure.ops.campaign -o "$R2" --grid full --budget-s "${BUDGET2:-$BUDGET}" --precisions bf16,fp8 --only $FAMS2 ${LIMITS2:-} \
      --components "data/runs/ops/$tag" --checks none > "$R2/campaign.log" 2>&1 || true
    tail -2 "$R2/campaign.log" | cut -c1-300
    python3 -m measure.ops.compare "data/runs/ops/$tag" "$R2" > "$DEST/$tag/compare2.txt" || true
    python3 -m measure.ops.merge "data/runs/ops/$tag" "$R2" --families $FAMS2 --why "${WHY2:-second stage over the merged table}"
    cp "data/runs/ops/$tag/ops.csv" "data/runs/ops/$tag/meta.json" "$DEST/$tag/"; tail -c 20000 "$R2/campaign.log" > "$DEST/$tag/campaign-rerun2.log"
  fi
  [ "${CHAIN:-0}" = 1 ] || exit 0
  MODE=chain; BUDGET=${CHAIN_BUDGET:-240}
fi
if [ "$MODE" = chain ]; then
  python3 -m measure.ops.chain --ops "data/runs/ops/$tag" --budget-s "$BUDGET" -o "$DEST/$tag/chain.json" 2>&1 | grep -v Warning | tee "$DEST/$tag/chain.log"
  exit 0
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv > "$DEST/$tag/nvidia-smi.csv" || true
python3 -m measure.ops.campaign -o "$DEST/$tag" --grid "$MODE" --budget-s "$BUDGET" --precisions bf16,fp8 2>&1 | tee "$DEST/$tag/campaign.log"
