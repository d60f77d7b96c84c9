#!/usr/bin/env bash
# The profiles of real vLLM at load, from the committed GPU runs (data/runs/engine, issue 37): a thin wrapper
# of the CLI. Each GPU and precision recorded by scripts/gpu_engine.sh is fitted in one `costmodel fit`
# (engine-step pass models with vLLM's CUDA-graph regime, the front-end latency per request), with the modes'
# behaviour from the published prior (--behaviour prior: the runs have dummy weights, so they time the engine,
# not the model's commit statistics or acceptance).
#   OUT/<gpu>-<precision>.json   e.g. OUT/h200-fp8.json, with heldout_error (pipeline/engine_loso.py: each mode's settings
#                                sets held out in turn) where a mode recorded two or more settings sets
#   OUT/rtx-5090-nvfp4.json   the RTX 5090 projected from the H100's (no RTX 5090 was lent): NVFP4, the precision
#                             vLLM's recipe serves Gemma-4 in on a 32 GB card; labelled projected in its provenance
# usage: bash scripts/build_engine_profiles.sh OUT_DIR   (SHIP=1 installs them: fp8 as the shipped defaults,
#        costmodel/data/profiles/<gpu>.json, bf16 as costmodel/data/profiles/bf16/<gpu>.json; the per-operator
#        profiles they replaced stay in ops/ as what-ifs)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/build_engine_profiles.sh OUT_DIR}
CM=${COSTMODEL:-.venv/bin/costmodel}
PY=${PYTHON:-.venv/bin/python}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}  # the fits' least squares are small: BLAS threads only fight
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's packages, also one an older editable install does not map
RUNS=${ENGINE_RUNS:-data/runs/engine}
mkdir -p "$OUT"
for key in $(ls "$RUNS" | grep -o '^[a-z0-9-]*-\(fp8\|bf16\)' | sort -u); do
  setups=$(ls -d "$RUNS/$key"-*/*/ | while read -r d; do [ -f "$d/manifest.json" ] && echo "${d%/}"; done)
  "$CM" fit $setups --behaviour prior --id "$key-vllm-engine" -o "$OUT/$key.json" | tee "$OUT/fit-$key.log"
  # the engine model's error on settings its fit never saw (leave one settings set out, per mode): the profile's
  # heldout_error, which the plan states beside its SLO verdict; not written where no mode recorded two settings sets
  "$PY" -m pipeline.engine_loso --root "$RUNS" --gpu "${key%-*}" --precision "${key##*-}" --write-into "$OUT/$key.json" \
    | tee "$OUT/loso-$key.log"
done
"$CM" profile project "$OUT/h100-fp8.json" --hardware rtx-5090 --precision nvfp4 -o "$OUT/rtx-5090-nvfp4.json"
if [ "${SHIP:-0}" = 1 ]; then
  # fp8 is each GPU's default (costmodel/data/profiles/<gpu>.json); another precision ships beside it in its folder
  # (costmodel/data/profiles/bf16/<gpu>.json, passed with --profile); the catalog GPU id is read from the profile
  D=costmodel/data/profiles
  for f in "$OUT"/*-fp8.json "$OUT"/*-bf16.json; do
    [ -f "$f" ] || continue
    hw=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["hardware"]["id"])' "$f")
    case "$f" in *-fp8.json) dest="$D/$hw.json" ;; *) mkdir -p "$D/bf16"; dest="$D/bf16/$hw.json" ;; esac
    cp "$f" "$dest"; echo "shipped: $dest (measured vLLM 0.26, $(basename "$f" .json))"
  done
  cp "$OUT/rtx-5090-nvfp4.json" "$D/rtx-5090.json"; echo "shipped: $D/rtx-5090.json (projected, nvfp4)"
fi
