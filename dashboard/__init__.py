"""The Streamlit dashboard (app.py, pages/): a planner program, so it tunes the allocator when it starts, as the
CLI commands do (simulator/runtime.py); the ``simulator`` library itself leaves an importing process alone."""
from simulator.runtime import keep_freed_memory

keep_freed_memory()
