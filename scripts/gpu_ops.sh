#!/usr/bin/env bash
# The operator campaign on a GPU machine, one run directory per precision (a thin wrapper of the CLI):
#   bash scripts/gpu_ops.sh [PRECISIONS] [BUDGET_S]     # default: bf16,fp8 and the CLI's budget per run
# -> $OUT/<gpu>-<precision>/ (ops.csv, meta.json); then anywhere: costmodel fit RUN -o profile.json
# The same as: costmodel measure --engine ops --precision P [--budget-s S] -o RUN
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f scripts/device_env.sh ] && . scripts/device_env.sh
DEST=${OUT:-/tmp/ops-out}
CM=${COSTMODEL:-costmodel}
command -v "$CM" >/dev/null || CM="python3 -c 'import sys; from costmodel.cli import console_main; sys.argv[0]=\"costmodel\"; sys.exit(console_main())'"
for p in $(echo "${1:-bf16,fp8}" | tr , ' '); do
  eval "$CM" measure --engine ops --precision "$p" ${2:+--budget-s "$2"} -o "$DEST/ops-$p"
done
