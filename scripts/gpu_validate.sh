#!/usr/bin/env bash
# H200 validation loads (issue 9), run on the device machine from the repo root:
#   PROFILE=data/validation/h200-eager-profile.json bash scripts/gpu_validate.sh MODES [REQUESTS] [MTP_REQUESTS]
# The profile must come from a SEPARATE `costmodel measure` run (the eager campaign under data/runs),
# fitted here on the CPU with `costmodel fit ... --engine eager`. Each mode's load runs are tarred to
# $OUT/validate-<mode>.tar.gz with the log; `costmodel validate --score-only` re-scores them anywhere.
set -uo pipefail
modes=${1:?modes: e.g. diffusion or ar,mtp}
requests=${2:-24}
mtp_requests=${3:-10}
OUT=${OUT:-$PWD/out}
PROFILE=${PROFILE:?set PROFILE to the eager profile fitted from the measure campaign}
mkdir -p "$OUT" runs
source "$(dirname "$0")/device_env.sh"
for m in ${modes//,/ }; do
  extra=()
  n=$requests
  case "$m" in
    diffusion) extra=(--max-batch 8 --max-output-tokens 256) ;;
    ar)        extra=(--max-batch 8 --max-output-tokens 64) ;;
    mtp)       extra=(--max-output-tokens 20 --draft-tokens 2); n=$mtp_requests ;;
  esac
  s=$(date +%s)
  python3 -m costmodel.cli validate --profile "$PROFILE" --mode "$m" --requests "$n" --prompt-tokens 128,1024 \
    "${extra[@]}" -o runs/validate 2>&1 | tee "runs/validate-$m.log"
  echo "=== validate $m: $(( $(date +%s) - s )) s ==="
  tar -czf "$OUT/validate-$m.tar.gz" -C runs validate "validate-$m.log"
done
