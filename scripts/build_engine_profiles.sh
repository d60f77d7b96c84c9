#!/usr/bin/env bash
# The profiles of real vLLM at load, from the committed GPU runs (data/runs/engine, issue 37): a thin wrapper
# of the CLI. Each GPU and precision recorded by scripts/gpu_engine.sh is fitted in one `costmodel fit`
# (engine-step pass models with vLLM's CUDA-graph regime, the front-end latency per request), with the modes'
# behaviour from the published prior (--behaviour prior: the runs have dummy weights, so they time the engine,
# not the model's commit statistics or acceptance).
#   OUT/<gpu>-<precision>.json   e.g. OUT/h200-fp8.json
# usage: bash scripts/build_engine_profiles.sh OUT_DIR   (SHIP=1 also installs them in costmodel/data/profiles/engine/)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/build_engine_profiles.sh OUT_DIR}
CM=${COSTMODEL:-.venv/bin/costmodel}
RUNS=${ENGINE_RUNS:-data/runs/engine}
mkdir -p "$OUT"
for key in $(ls "$RUNS" | grep -o '^[a-z0-9-]*-\(fp8\|bf16\)' | sort -u); do
  setups=$(ls -d "$RUNS/$key"-*/*/ | while read -r d; do [ -f "$d/manifest.json" ] && echo "${d%/}"; done)
  "$CM" fit $setups --behaviour prior --id "$key-vllm-engine" -o "$OUT/$key.json" | tee "$OUT/fit-$key.log"
done
if [ "${SHIP:-0}" = 1 ]; then
  mkdir -p costmodel/data/profiles/engine
  cp "$OUT"/*.json costmodel/data/profiles/engine/
  echo "shipped: costmodel/data/profiles/engine/$(cd "$OUT" && ls *.json | tr '\n' ' ')"
fi
