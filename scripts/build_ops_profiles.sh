#!/usr/bin/env bash
# Profiles priced from the operator tables (issue 17), engine "ops": the committed op tables under
# $OPS_DIR (default data/runs/ops/{h100,h200}) composed into pass times over the default grid
# (measure/ops/compose.py), one run directory per mode, then `costmodel fit` per GPU and precision,
# then every pass model turned into a table model (measure/ops/passtable.py: composed passes on a
# full (seqs, tokens, context) grid, interpolated in log space; the fit kept as the linear fallback):
#   OUT/h100-sxm-bf16.json  OUT/h100-sxm-fp8.json  OUT/h200-bf16.json  OUT/h200-fp8.json   (measured ops)
#   OUT/rtx-5090-int4.json  per-op projection to the RTX 5090 in int4 (weight-only, bf16 compute: the
#                           precision the project ships for 32 GB; `costmodel profile project` refuses fp8
#                           there, 25.6 GB > 75% of 32 GB): each H100 bf16 op's efficiency carried to the
#                           5090's int4 roofline (measure/ops/project.py), then composed and fitted the same way
#   OUT/rtx-5090-int4-profile-projected.json  for comparison: `costmodel profile project` of the H100 bf16 profile
#   OUT/runs/...            the composed run directories;  OUT/fit-*.log  each fit's table (held-out MAPE)
# usage: bash scripts/build_ops_profiles.sh OUT_DIR      (env: PYTHON, COSTMODEL, OPS_DIR, FIT_ARGS; SHIP=1 installs them
#        as the shipped defaults in costmodel/data/profiles/, fp8 variants in costmodel/data/profiles/ops/)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/build_ops_profiles.sh OUT_DIR}
PY=${PYTHON:-.venv/bin/python}
COSTMODEL=${COSTMODEL:-.venv/bin/costmodel}
OPS=${OPS_DIR:-data/runs/ops}
RUNS=$OUT/runs
mkdir -p "$RUNS"
NOTE="engine: ops - pass times composed from operator timings (measure/ops: fastest serving-grade kernel per op and shape, CUDA-graph timed, + a per-step device round-trip term; an engine's CPU scheduler is not in it); kernels per op in engine.kernels"

fit() {  # hw prec ops_dir id extra-note
  local hw=$1 prec=$2 dir=$3 id=$4 extra=${5:-}
  "$PY" -m measure.ops.compose "$dir" --precision "$prec" --hardware "$hw" -o "$RUNS"
  "$COSTMODEL" fit "$RUNS/ops-$hw-$prec-diffusion" "$RUNS/ops-$hw-$prec-ar" "$RUNS/ops-$hw-$prec-mtp" \
    --hardware "$hw" --precision "$prec" --id "$id" --note "$NOTE" ${extra:+--note "$extra"} ${FIT_ARGS:-} \
    -o "$OUT/$id.json" 2>&1 | tee "$OUT/fit-$id.log"
  # the pass models become tables of composed passes (log-space interpolation; the fit stays as the
  # linear fallback for other GPUs): held-out MAPE per kind appended to the fit log
  "$PY" -m measure.ops.passtable attach "$OUT/$id.json" "$dir" --hardware "$hw" --precision "$prec" | tee -a "$OUT/fit-$id.log"
}

fit h100-sxm bf16 "$OPS/h100" h100-sxm-bf16
fit h100-sxm fp8 "$OPS/h100" h100-sxm-fp8
fit h200 bf16 "$OPS/h200" h200-bf16
fit h200 fp8 "$OPS/h200" h200-fp8
"$PY" -m measure.ops.project "$OPS/h100" --from h100-sxm --to rtx-5090 --precisions bf16 --to-precision int4 -o "$OUT/ops-rtx-5090-projected"
fit rtx-5090 int4 "$OUT/ops-rtx-5090-projected" rtx-5090-int4 \
  "PROJECTED, not measured: every op of the H100 bf16 table carried to the RTX 5090's int4 (weight-only) roofline (floor + roofline-scaled rest, measure/ops/project.py), then composed and fitted; int4 kernels were not timed anywhere"
# the fit calls every composed pass "measured": the 5090's are projections, and its profile says so
"$PY" - "$OUT/rtx-5090-int4.json" <<'EOF'
import sys
from costmodel.schemas.profile import Profile, Provenance
path = sys.argv[1]
p = Profile.load(path)
src = "per-op projection of the H100 bf16 operator table (data/runs/ops/h100) to the RTX 5090's int4 roofline, measure/ops/project.py"
for m in p.modes.values():
    for pm in m.pass_models.values():
        pm.provenance = Provenance("projected", src, hardware="rtx-5090", date=pm.provenance.date, notes=pm.provenance.notes)
p.provenance = Provenance("projected", src, hardware="rtx-5090", date=p.provenance.date, notes=p.provenance.notes)
p.save(path)
EOF
"$COSTMODEL" profile project "$OUT/h100-sxm-bf16.json" --hardware rtx-5090 --precision int4 --id rtx-5090-int4-profile-projected \
  -o "$OUT/rtx-5090-int4-profile-projected.json" \
  || echo "note: the profile-level projection was refused (see above); the per-op projection rtx-5090-int4.json stands"
for f in "$OUT"/*.json; do "$COSTMODEL" profile validate "$f"; done
# SHIP=1: these become the shipped defaults (bf16 on Hopper, int4 on the 5090; fp8 beside them)
if [ "${SHIP:-0}" = 1 ]; then
  D=costmodel/data/profiles
  mkdir -p "$D/ops"
  cp "$OUT/h100-sxm-bf16.json" "$D/h100-sxm.json"; cp "$OUT/h200-bf16.json" "$D/h200.json"; cp "$OUT/rtx-5090-int4.json" "$D/rtx-5090.json"
  cp "$OUT/h100-sxm-fp8.json" "$OUT/h200-fp8.json" "$D/ops/"
  echo "shipped: $D/{h100-sxm,h200,rtx-5090}.json and $D/ops/{h100-sxm,h200}-fp8.json"
fi
