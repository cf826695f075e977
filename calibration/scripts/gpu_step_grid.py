"""One verify pass per cell, CUDA-graphed, at real shapes with random weights (issue 47 item 5).

    python calibration/scripts/gpu_step_grid.py --output DIR            # a GPU: the full grid, < 8 min
    python calibration/scripts/gpu_step_grid.py --output DIR --smoke    # a CPU: tiny models, < 60 s

Llama-3.1-8B and Qwen3-30B-A3B (shapes from simulator/data/models), bf16, B 1..128 x K 0..7 x context
512 and 4096; writes DIR/step_grid.csv (one row per cell, appended as measured) and
DIR/step_grid.meta.json (device, torch, shapes, kernels, status). What the pass runs and how experts
are dispatched: calibration/step_grid.py (step_grid_model.py, step_grid_kernels.py). Score the planner on it:
python -m calibration.score_step_grid DIR.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: runs without PYTHONPATH

from calibration.step_grid import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
