#!/usr/bin/env bash
# Regenerate the transformers-engine profiles (costmodel/data/profiles/transformers/*.json; the defaults
# are the operator-level "ops" profiles of scripts/build_ops_profiles.sh), from
# the committed H200 campaign runs:
#   h200.json      measured: `costmodel fit` of every H200 bf16 GPU run under $RUNS_DIR (kind gpu, a
#                  passes table, not synthetic) timed by engine $ENGINE, modes diffusion, ar and mtp; pass kinds no run
#                  timed are filled from the stated sources `costmodel fit` prints (or it refuses);
#                  commit statistics from runs with the model's own weights, else the published prior;
#   h100-sxm.json  projected from h200.json at bf16;
#   rtx-5090.json  projected from h200.json at int4 (the 5090's 32 GB cannot hold bf16 weights).
# Environment: ENGINE (default compiled: static cache + CUDA graphs, the closest of the measured
#   engines to a production server; its campaign timed diffusion at batch 1 and AR at batch 1 and 32
#   only, so batch scaling is extrapolated as a multiple of the roofline and says so. ENGINE=eager
#   builds the fits whose grid covers every pass kind over batch and context (each with a held-out
#   check), a launch-bound upper bound, into costmodel/data/profiles/eager/; `costmodel validate`
#   scored the simulator against real load with that one);
#   RUNS_DIR (default data/runs); PROFILES_DIR (default costmodel/data/profiles, or .../eager);
#   COSTMODEL (default .venv/bin/costmodel);
#   MTP_METRICS: vLLM counters for measured MTP acceptance ("before.prom after.prom" scrapes, a JSON
#   counters file, or an endpoint run dir); unset: the one run under $RUNS_DIR holding
#   mtp_counters.json (an MTP endpoint run), if exactly one does, else the stated default (0.8 x 4);
#   FIT_ARGS (extra `costmodel fit` options, e.g. "--heldout each-shape").
set -euo pipefail
cd "$(dirname "$0")/.."
COSTMODEL=${COSTMODEL:-.venv/bin/costmodel}
RUNS_DIR=${RUNS_DIR:-data/runs}
ENGINE=${ENGINE:-compiled}
if [ "$ENGINE" = compiled ]; then OUT=${PROFILES_DIR:-costmodel/data/profiles/transformers}; else OUT=${PROFILES_DIR:-costmodel/data/profiles/$ENGINE}; fi
mkdir -p "$OUT"

args=(--campaign "$RUNS_DIR" --hardware h200 --precision bf16 --engine "$ENGINE" --modes diffusion,ar,mtp)
if [ "$ENGINE" = compiled ]; then
  args+=(--note "engine: transformers compiled (static cache, torch.compile reduce-overhead / CUDA graphs). The compiled campaign timed diffusion passes at batch 1 and AR decode at batch 1 and 32: larger batches are priced as the fitted multiple of their roofline (the eager sweep over batch 1-32 keeps measured/roofline within 6.2-7.9x, so the multiple is roughly constant), and those shapes are flagged extrapolated. ENGINE=eager scripts/build_profiles.sh gives the fully gridded (launch-bound) eager profiles")
fi
if [ "$ENGINE" = eager ]; then
  args+=(--note "engine: transformers eager (dynamic cache, no CUDA graphs): small passes are host/launch-bound, so every target pass costs tens of ms even at batch 1; the compiled runs under $RUNS_DIR (batch 1-32) are 2-9x faster there, and a serving engine with fused MoE kernels faster still - treat this profile's latencies and costs as an upper bound (see $RUNS_DIR/README.md)")
fi
if [ -z "${MTP_METRICS:-}" ]; then
  found=()
  for d in "$RUNS_DIR"/*/; do [ -f "$d/mtp_counters.json" ] && found+=("${d%/}"); done
  if [ "${#found[@]}" -gt 1 ]; then
    echo "several runs hold mtp_counters.json (${found[*]}); set MTP_METRICS to the one to use" >&2
    exit 2
  fi
  if [ "${#found[@]}" -eq 1 ]; then
    echo "MTP acceptance from ${found[0]}/mtp_counters.json"
    MTP_METRICS=${found[0]}
  fi
fi
for f in ${MTP_METRICS:-}; do args+=(--mtp-metrics "$f"); done
# shellcheck disable=SC2206
args+=(${FIT_ARGS:-})

"$COSTMODEL" fit "${args[@]}" -o "$OUT/h200.json"
"$COSTMODEL" profile project "$OUT/h200.json" --hardware h100-sxm --precision bf16 -o "$OUT/h100-sxm.json"
"$COSTMODEL" profile project "$OUT/h200.json" --hardware rtx-5090 --precision int4 -o "$OUT/rtx-5090.json"
for p in "$OUT/h200.json" "$OUT/h100-sxm.json" "$OUT/rtx-5090.json"; do
  "$COSTMODEL" profile validate "$p"
done
