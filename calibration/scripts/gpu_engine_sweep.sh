#!/usr/bin/env bash
# The project's own torch reference engine (calibration/engine) at REAL model shapes with random
# weights under a SYNTHETIC acceptance, on one GPU: Llama-3.1-8B (dense) and Qwen3-30B-A3B (MoE, 128
# experts, top-8), each drafted by an EAGLE-like one-layer head of the target's sizes, bf16,
# B = 1..64 (powers of two) x K = 0..6, every phase timed by CUDA events
# (python -m calibration.engine.synthetic; its docstring says what is real and what is imposed).
#
# STATUS: prepared and smoke-tested on a CPU only (SMOKE=1); it has NOT run on a GPU yet.
#
# Budget: about 5 minutes on one H200 (each sweep under a hard `timeout`; rows are appended point by
# point, so a timeout keeps what was measured and a rerun measures only the missing points). Needs
# ~75 GB of GPU memory for the MoE (61 GB of bf16 weights). Then, where a table-derived profile exists
# for the GPU (simulator/data/profiles/<hardware>.<engine>-<version>.profile.json), it runs
# python -m calibration.validate on each CSV: "ITL MAPE, physics only" is how far the profile's
# kernel times are from the measured steps before any engine term is fitted.
#   PYTHON=...        interpreter with torch + CUDA (default: .venv/bin/python if it sees CUDA, else python3)
#   OUT_DIR=...       CSVs, scenarios and validation reports (default calibration/data/runs/gpu-synthetic)
#   ACCEPTANCE=0.8    per-position acceptance (or a list: 0.85,0.8,0.76; the last repeats)
#   DENSE_LIMIT_S=100 MOE_LIMIT_S=170   hard limits per sweep [s]
#   PROFILE=...       profile for validation (default: the GPU's shipped vllm profile, else any shipped one)
#   SMOKE=1           CPU smoke run of this script (1 layer, B 1-2, K 0-1, fp32): checks it end to end
# Run from anywhere: bash calibration/scripts/gpu_engine_sweep.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
  PY=python3
  if [[ -x .venv/bin/python ]] && { [[ "${SMOKE:-0}" == 1 ]] || .venv/bin/python -c \
      "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; }; then
    PY=.venv/bin/python
  fi
fi
OUT="${OUT_DIR:-calibration/data/runs/gpu-synthetic}"
ACC="${ACCEPTANCE:-0.8}"
mkdir -p "$OUT"

if [[ "${SMOKE:-0}" == 1 ]]; then
  DEVICE=cpu; HW=cpu-xeon-2c; PROF="${PROFILE:-calibration/data/cpu-xeon-2c.profile.json}"
  GRID=(--layers 1 --dtype fp32 --batch-sizes 1,2 --k 0,1 --steps 2 --warmup-steps 1 --context-len 16)
  MOE_GRID=("${GRID[@]}"); DENSE_LIMIT_S="${DENSE_LIMIT_S:-240}"; MOE_LIMIT_S="${MOE_LIMIT_S:-240}"
else
  # 1. device check
  "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device visible to torch')"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv || true
  "$PY" -m calibration.device
  DEVICE=cuda
  HW=$("$PY" -c "from calibration.device import discover, catalog_name; print(catalog_name(discover('cuda')) or '')")
  PROF="${PROFILE:-}"
  if [[ -z "$PROF" && -n "$HW" ]]; then
    PROF=$(ls simulator/data/profiles/"$HW".vllm-*.profile.json 2>/dev/null | tail -1 || true)
    [[ -n "$PROF" ]] || PROF=$(ls simulator/data/profiles/"$HW".*.profile.json 2>/dev/null | tail -1 || true)
  fi
  # 8 timed steps (+2 warm-up) per point at 512-token contexts; the MoE's eager expert loop is ~10x
  # slower per step, so it times 5 steps (+1)
  GRID=(--dtype bf16 --batch-sizes 1-64:pow2 --k 0-6 --steps 8 --warmup-steps 2 --context-len 512)
  MOE_GRID=(--dtype bf16 --batch-sizes 1-64:pow2 --k 0-6 --steps 5 --warmup-steps 1 --context-len 512)
  DENSE_LIMIT_S="${DENSE_LIMIT_S:-100}"; MOE_LIMIT_S="${MOE_LIMIT_S:-170}"
fi
echo "device $DEVICE, hardware catalog entry '${HW:-none}', profile '${PROF:-none}', acceptance $ACC"

# 2. the two sweeps, each under a hard limit (SIGINT first: the engine stops cleanly between points)
sweep() {  # model limit_s grid...
  local model=$1 limit=$2; shift 2
  local csv="$OUT/$model.${HW:-gpu}.synthetic.csv"
  local args=(--model "$model" --draft eagle --acceptance "$ACC" --device "$DEVICE" "$@" --output "$csv"
              --time-limit $((limit > 40 ? limit - 25 : limit)) --scenario-out "${csv%.csv}.toml")
  [[ -n "$HW" ]] && args+=(--hardware "$HW")
  [[ -n "$PROF" ]] && args+=(--profile "$PROF")
  set +e
  timeout --signal=INT --kill-after=15 "$limit" "$PY" -m calibration.engine.synthetic "${args[@]}"
  local rc=$?
  set -e
  [[ $rc -eq 0 ]] || echo "$model sweep stopped (rc=$rc); rows measured so far are in $csv" >&2
  CSVS+=("$csv")
}
CSVS=()
sweep llama-3.1-8b "$DENSE_LIMIT_S" "${GRID[@]}"
sweep qwen3-30b-a3b "$MOE_LIMIT_S" "${MOE_GRID[@]}"

# 3. planner vs measurement, where a table-derived profile exists
for csv in "${CSVS[@]}"; do
  [[ -s "$csv" ]] || { echo "no rows in $csv" >&2; continue; }
  if [[ -n "$PROF" ]]; then
    "$PY" -m calibration.validate --measured "$csv" --scenario "${csv%.csv}.toml" \
      > "${csv%.csv}.validation.md" || { echo "validation of $csv failed" >&2; rm -f "${csv%.csv}.validation.md"; }
  else
    echo "no profile for '${HW:-this GPU}': validation of $csv skipped" >&2
  fi
done
echo "results:"
for csv in "${CSVS[@]}"; do
  [[ -s "$csv" ]] && echo "  $csv ($(($(wc -l < "$csv") - 1)) rows)" || echo "  $csv (no rows)"
  [[ -f "${csv%.csv}.validation.md" ]] && echo "  ${csv%.csv}.validation.md" || true
done
