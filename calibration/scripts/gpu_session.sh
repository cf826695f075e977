#!/usr/bin/env bash
# One short GPU session (one H200, ~8 minutes of device time): the microbenchmark calibration at a
# real model's shapes, then the torch engine at real model shapes (random weights, synthetic
# acceptance), each under its own hard limit; one failing does not stop the other. Everything lands
# in RESULTS (default /tmp/gpu-session) and, when DEST is set, in DEST/results.tar.gz with the log
# (a host that returns only a few files gets one archive).
#   CAL_MODE=medium      microbenchmark grid (full: denser, ~4x the points)
#   MODEL=llama-3.1-8b   GEMM / attention shapes of the calibration (Llama-3.1-8B: the dense sweep's target)
#   CAL_LIMIT_S=130 DENSE_LIMIT_S=100 MOE_LIMIT_S=160   hard limits [s]
#   TIMING_AB=1          also time cold kernels four ways (flush, flush+sleep, read+sleep, graph replay)
#   SKIP_ENGINE=1        calibration only
#   SMOKE=1              CPU smoke run: tiny calibration on the CPU, the engine sweep's own smoke mode
# Run from anywhere: bash calibration/scripts/gpu_session.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
RES="${RESULTS:-/tmp/gpu-session}"
mkdir -p "$RES/calibration" "$RES/engine"
LOG="$RES/session.log"
: > "$LOG"
t0=$SECONDS
stamp() { echo "[session +$((SECONDS - t0)) s] $*" | tee -a "$LOG"; }

stamp "start: $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv >> "$LOG" 2>&1 || true
${PYTHON:-python3} -c "import torch, numpy, pandas, scipy; print('torch', torch.__version__, 'numpy', numpy.__version__,
  'pandas', pandas.__version__, 'scipy', scipy.__version__)" >> "$LOG" 2>&1 || true

# 1. microbenchmarks at the model's GEMM shapes, with M = B (K + 1) of the engine sweep's grid
if [[ "${SMOKE:-0}" == 1 ]]; then
  stamp "calibration (smoke: tiny, CPU)"
  timeout --signal=INT "${CAL_LIMIT_S:-120}" ${PYTHON:-python3} -m calibration.run --mode tiny \
    --model smollm2-135m --moe-model '' --device cpu --output-dir "$RES/calibration" --no-progress >> "$LOG" 2>&1
else
  stamp "calibration (${CAL_MODE:-medium}, ${MODEL:-llama-3.1-8b} shapes)"
  MODE="${CAL_MODE:-medium}" MODEL="${MODEL:-llama-3.1-8b}" EXTRA_M="3,5,6,7,12,20,28,40,56,96,112,160,224,448" \
    LIMIT_S="${CAL_LIMIT_S:-130}" OUTPUT_DIR="$RES/calibration" bash calibration/scripts/gpu_calibrate.sh >> "$LOG" 2>&1
fi
stamp "calibration rc=$?"

# 1b. optional: the four timings of a cold kernel side by side (calibration/scripts/gpu_timing_ab.py)
if [[ "${TIMING_AB:-0}" == 1 && "${SMOKE:-0}" != 1 ]]; then
  stamp "timing A/B"
  timeout 60 ${PYTHON:-python3} calibration/scripts/gpu_timing_ab.py --model "${MODEL:-llama-3.1-8b}" \
    --output "$RES/calibration/timing_ab.csv" >> "$LOG" 2>&1
  stamp "timing A/B rc=$?"
fi

# 2. the torch engine at real shapes: Llama-3.1-8B and Qwen3-30B-A3B, B = 1..64 x K = 0..6
if [[ "${SKIP_ENGINE:-0}" != 1 ]]; then
  stamp "engine sweep"
  OUT_DIR="$RES/engine" DENSE_LIMIT_S="${DENSE_LIMIT_S:-100}" MOE_LIMIT_S="${MOE_LIMIT_S:-160}" \
    bash calibration/scripts/gpu_engine_sweep.sh >> "$LOG" 2>&1
  stamp "engine sweep rc=$?"
fi

ls -la "$RES"/* >> "$LOG" 2>&1
if [[ -n "${DEST:-}" ]]; then
  mkdir -p "$DEST"
  cp "$LOG" "$DEST/session.log"
  tar -czf "$DEST/results.tar.gz" -C "$RES" . && stamp "archive: $DEST/results.tar.gz"
fi
stamp "done"
