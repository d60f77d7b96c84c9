#!/usr/bin/env bash
# On a lent machine with one or more GPUs where ../shared/gpu-vllm has staged vLLM 0.26 ($HOME/site): record
# the calibration design's engine setups with one engine per GPU, GPUs in parallel, each GPU's jobs one after
# the other, then pack each job's run into $OUT.
#
#   bash scripts/gpu_matrix.sh PRECISION DEADLINE_S JOB [JOB ...]
#   JOB = GPU:MODE:SETUPS    e.g.  bash scripts/gpu_matrix.sh fp8 560 0:diffusion:steps24-s4,steps24-s12 1:ar:b2048-s64,b16384-s256
#
# DEADLINE_S is the call's wall clock (start-ups included): no load starts after it. Each GPU has its own compile
# cache ($HOME/vcache/gpu<i>; two engines compiling into one cache race), kept across calls on a warm machine.
# $OUT/<gpu>-<precision>-<mode>-<tag>.tgz holds a job's run (measure/vllm/gpu_run.py's layout) and its log, where
# <tag> is the job's first setup; unpack it under data/runs/engine/ and commit it.
set -u
PREC=$1; DEADLINE=$2; shift 2
export PYTHONPATH=$HOME/site:$PWD PYTHONUNBUFFERED=1 VLLM_LOGGING_LEVEL=INFO
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T0=$(date +%s)
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr 'A-Z' 'a-z' | grep -o 'h100\|h200\|b200\|rtx 5090' | tr ' ' '-')
mkdir -p /tmp/engine-runs
nvidia-smi --query-gpu=index,name,memory.total,power.limit,driver_version,clocks.max.sm --format=csv > /tmp/engine-runs/gpus.csv
lane() {  # one GPU's jobs, one after the other, each with what is left of the deadline
  local g=$1; shift
  for job in "$@"; do
    IFS=: read -r jg mode setups <<< "$job"
    [ "$jg" = "$g" ] || continue
    local name=${GPU:-gpu}-$PREC-$mode-${setups%%,*}
    local run=/tmp/engine-runs/$name left=$(( DEADLINE - ($(date +%s) - T0) ))
    [ "$left" -gt 90 ] || { echo "GPU $g: $mode $setups not started (deadline)"; continue; }
    rm -rf "$run"
    CUDA_VISIBLE_DEVICES=$g VLLM_CACHE_ROOT=$HOME/vcache/gpu$g timeout $((left + 110)) python3 -m measure.vllm.gpu_run --mode "$mode" \
      --precision "$PREC" -o "$run" --setups "$setups" --deadline-s "$left" --log /tmp/engine-runs/$name.log > /tmp/engine-runs/$name.log 2>&1
    echo "driver exit $?" >> /tmp/engine-runs/$name.log
    mkdir -p "$run"; cp /tmp/engine-runs/$name.log /tmp/engine-runs/gpus.csv "$run/"
    tar czf "$OUT/$name.tgz" -C /tmp/engine-runs "$name"
    grep "^\[\|^error\|driver exit" /tmp/engine-runs/$name.log | sed "s/^/GPU $g: /"
  done
}
for g in $(printf '%s\n' "$@" | cut -d: -f1 | sort -u); do lane "$g" "$@" & done
wait
ls -la "$OUT"
