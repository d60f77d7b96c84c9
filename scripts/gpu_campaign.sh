#!/usr/bin/env bash
# H200 campaigns of `costmodel measure` (issues 3 and 4), run on the device machine from the repo root:
#   bash scripts/gpu_campaign.sh smoke|eager|compiled-dg|compiled-ar   (as run on 2026-11-21: eager, compiled-dg, final, extra)
# Needs the transformers 5.23 wheel in .whl/ (the image has 5.17). Each run directory is tarred into
# $OUT (default ./out) with its log; every measure runs under `timeout -s INT`, so a run that overstays
# its share is interrupted cleanly (finished units kept, manifest "incomplete") and still tarred.
set -uo pipefail
phase=${1:?phase: smoke|eager|compiled-dg|compiled-ar}
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT" runs
source "$(dirname "$0")/device_env.sh"
M="python3 -m costmodel.cli measure"
t0=$(date +%s)
measure() {  # measure SECONDS NAME ARGS...: one run directory runs/NAME, tarred to $OUT/NAME.tar.gz
  local secs=$1 name=$2; shift 2
  echo "=== $name: $* (limit ${secs}s) ==="
  local s=$(date +%s)
  timeout -s INT "$secs" $M -o "runs/$name" "$@" 2>&1 | tee "runs/$name.log"
  echo "=== $name: rc ${PIPESTATUS[0]}, $(( $(date +%s) - s )) s ==="
  [ -d "runs/$name" ] && cp "runs/$name.log" "runs/$name/measure.log" && tar -czf "$OUT/$name.tar.gz" -C runs "$name"
}
case "$phase" in
  smoke)
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
    python3 -c "import torch, transformers, pynvml; print('torch', torch.__version__, torch.version.cuda, 'transformers', transformers.__version__, torch.cuda.get_device_name(0))"
    measure 240 smoke-dg --model diffusiongemma-26b-a4b --random-weights --canvases 1 --contexts 1024 --blocks 2 \
      --max-denoising-steps 4 --repeats 2 --hook-overhead-repeats 2
    ;;
  eager)
    measure 200 h200-dg-eager --model diffusiongemma-26b-a4b --random-weights --canvases 1,2,4,8,16,32 \
      --contexts 1024,128,4096,8192 --grid star --blocks 2 --max-denoising-steps 4 --repeats 2 --hook-overhead-repeats 4 --profile-steps 3
    measure 170 h200-ar-eager --model gemma4-26b-a4b --random-weights --decode-batches 1,4,16,64,256 \
      --contexts 1024,128,4096,8192 --grid star --decode-steps 8 --repeats 2 --profile-steps 4
    measure 120 h200-mtp-eager --model gemma4-26b-a4b --mode mtp --random-weights --decode-batches 1,8,32 \
      --contexts 1024 --draft-tokens 1,2,4,8 --mtp-rounds 3 --repeats 2 --profile-steps 2
    ;;
  compiled-dg)
    measure 430 h200-dg-compiled --model diffusiongemma-26b-a4b --random-weights --engine compiled --canvases 1,8 \
      --contexts 1024 --blocks 2 --replay prior --repeats 3 --hook-overhead-repeats 3 --profile-steps 4
    # batch 256 at a 1024-token prompt did not fit in the eager phase (prefill transients): a shorter prompt
    measure 100 h200-ar-eager-big --model gemma4-26b-a4b --random-weights --decode-batches 128,256 --contexts 256 \
      --decode-steps 8 --repeats 2
    ;;
  compiled-ar)
    measure 320 h200-ar-compiled --model gemma4-26b-a4b --random-weights --engine compiled --decode-batches 1,32 \
      --contexts 1024 --decode-steps 16 --repeats 3 --profile-steps 6
    measure 200 h200-mtp-compiled --model gemma4-26b-a4b --mode mtp --random-weights --engine compiled --decode-batches 1 \
      --contexts 1024 --draft-tokens 4 --mtp-rounds 6 --repeats 3
    ;;
  final)
    # compiled batch 1 again (the compiled-dg phase spent its time compiling batch 8 and was cut before
    # its hook-overhead and profile units), then the AR compiled batch-1 decode step
    measure 250 h200-dg-compiled-b1 --model diffusiongemma-26b-a4b --random-weights --engine compiled --canvases 1 \
      --contexts 1024 --blocks 2 --max-denoising-steps 16 --replay prior --repeats 3 --hook-overhead-repeats 4 --profile-steps 4
    measure 210 h200-ar-compiled --model gemma4-26b-a4b --random-weights --engine compiled --decode-batches 1 \
      --contexts 1024 --decode-steps 16 --repeats 3 --profile-steps 6
    ;;
  extra)
    # the eager hook overhead again with the current hook (the eager phase measured its first version),
    # the compiled AR decode step at batch 32, and compiled MTP at batch 1, k = 4
    measure 100 h200-dg-eager-hook --model diffusiongemma-26b-a4b --random-weights --canvases 1 --contexts 1024 --blocks 2 \
      --max-denoising-steps 8 --repeats 1 --hook-overhead-repeats 8
    measure 190 h200-ar-compiled-b32 --model gemma4-26b-a4b --random-weights --engine compiled --decode-batches 32 \
      --contexts 1024 --decode-steps 16 --repeats 3
    measure 200 h200-mtp-compiled --model gemma4-26b-a4b --mode mtp --random-weights --engine compiled --decode-batches 1 \
      --contexts 1024 --draft-tokens 4 --mtp-rounds 6 --repeats 3
    ;;
  *) echo "unknown phase $phase"; exit 2 ;;
esac
echo "phase $phase: $(( $(date +%s) - t0 )) s"
ls -la "$OUT"
