#!/usr/bin/env bash
# On a lent GPU machine where ../shared/gpu-vllm has staged vLLM 0.26 ($HOME/site): record real vLLM
# under the calibration design for one mode and precision, then pack what comes back into $OUT.
#
#   bash scripts/gpu_engine.sh MODE PRECISION [DEADLINE_S] [SETUPS] [LOADS]     e.g. bash scripts/gpu_engine.sh diffusion fp8 470
#   (LOADS: a comma list of the setups' loads to run, e.g. those a deadline cut; the warm-up and the setup's anchor load,
#    EngineSetup.anchor, always run)
#
# $OUT/<gpu>-<precision>-<mode>.tgz holds the run (measure/vllm/gpu_run.py's layout) and the engine's log;
# $OUT/<...>.log is the log alone. Unpack the tarball under data/runs/engine/ and commit it.
set -u
MODE=$1; PREC=$2; DEADLINE=${3:-470}; SETUPS=${4:-}; LOADS=${5:-}
export PYTHONPATH=$HOME/site:$PWD VLLM_CACHE_ROOT=$HOME/vcache PYTHONUNBUFFERED=1 VLLM_LOGGING_LEVEL=INFO
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr 'A-Z' 'a-z' | grep -o 'h100\|h200\|b200\|rtx 5090' | tr ' ' '-')
NAME=${GPU:-gpu}-$PREC-$MODE
RUN=/tmp/engine-runs/$NAME
rm -rf "$RUN"; mkdir -p /tmp/engine-runs
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version,clocks.max.sm --format=csv > /tmp/engine-runs/$NAME.gpu.csv
timeout $((DEADLINE + 110)) python3 -m measure.vllm.gpu_run --mode "$MODE" --precision "$PREC" -o "$RUN" --deadline-s "$DEADLINE" --log /tmp/engine-runs/$NAME.log \
  ${SETUPS:+--setups "$SETUPS"} ${LOADS:+--loads "$LOADS"} > /tmp/engine-runs/$NAME.log 2>&1
echo "driver exit $?" >> /tmp/engine-runs/$NAME.log
mkdir -p "$RUN"; cp /tmp/engine-runs/$NAME.log /tmp/engine-runs/$NAME.gpu.csv "$RUN/" 2>/dev/null
rm -rf "$RUN/models"
tar czf "$OUT/$NAME.tgz" -C /tmp/engine-runs "$NAME"
grep -v "^\s*$" /tmp/engine-runs/$NAME.log | grep -iv "warn.*deprecat" | tail -60
ls -la "$OUT"
