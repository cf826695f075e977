#!/usr/bin/env bash
# Full microbenchmark calibration on a GPU host (prepared for one H200; not run on the CPU box).
# Writes calibration/data/<catalog entry>.raw.csv (+ .meta.json) and .profile.json, bf16.
# Budget: at most ~8 minutes. Run from anywhere: bash calibration/scripts/gpu_calibrate.sh
#   PYTHON=/path/to/python   interpreter with torch (CUDA) + nvidia-ml-py (default: .venv or python3)
#   MODE=full|medium         grid density (default full; medium if the budget is tight)
#   MODEL=smollm2-135m       GEMM/attention shapes (add EXTRA_M=3,5,9 for a scenario's B*(K+1))
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
  if [[ -x .venv/bin/python ]]; then PY=.venv/bin/python; else PY=python3; fi
fi
MODE="${MODE:-full}"
MODEL="${MODEL:-smollm2-135m}"
OUT="${OUTPUT_DIR:-calibration/data}"
LIMIT_S="${LIMIT_S:-480}"

"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device visible to torch')"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv || true
"$PY" -m calibration.device

# Measure under a hard time limit; raw samples are appended point by point, so a timeout keeps
# what was measured and a rerun of this script resumes. Then fit whatever is there.
set +e
timeout --signal=INT "$LIMIT_S" "$PY" -m calibration.run --mode "$MODE" --model "$MODEL" \
  ${EXTRA_M:+--extra-m "$EXTRA_M"} --device cuda --output-dir "$OUT" --no-fit --no-progress
rc=$?
set -e
if [[ $rc -ne 0 ]]; then echo "measurement stopped (rc=$rc); fitting the samples taken so far" >&2; fi
NAME=$("$PY" -c "from calibration.device import discover, catalog_name; print(catalog_name(discover('cuda')) or '')")
if [[ -z "$NAME" ]]; then echo "no hardware catalog entry matches this GPU; run calibration.run --hardware NAME" >&2; exit 2; fi
RAW="$OUT/$NAME.raw.csv"
"$PY" -m calibration.fit "$RAW" --output "${RAW%.raw.csv}.profile.json"
"$PY" -m calibration.show "${RAW%.raw.csv}.profile.json"
