"""DSD planner: roofline cost model of speculative decoding and optimal-K tables.

Floors, each importing only the ones below it::

    specs/     hardware, models, deployment, drafts, acceptance, routing, profile, scenario
    physics/   operators, layer builders, experts, draft cost, memory
    plan/      goodput grid (B x K, B x L x K), K*, policies, exports, the Prediction API
    serving/   workload, step pricer, simulation loop, results
    sizing/    SLO capacity search, fleet ranking, uncertainty, reports
    sweep/     fleet sweeps: many models x traffic x hardware x layouts, local pool or Ray
    cli/       predict, serve, size, sweep
    (errors.py, files.py, file_sets.py and runtime.py, the ground floor: one-line errors, capped reads and
    atomic writes, all-or-nothing sets of files, the memory allocator tuning the planner's own programs
    apply for the grids' temporaries)

Notebook use::

    from simulator import predict
    result = predict(model="llama-3.1-8b", hardware="h100-sxm", draft="eagle", acceptance=0.8)
    result.table      # one row per batch size: K*, goodput, speedups, bound regime
    result.grid_rows       # one row per (batch size, K)
"""

# Importing the package changes nothing in the importing process: the planner's programs (the CLI commands, the
# dashboard, sweep workers) tune the allocator themselves (simulator/runtime.py); a notebook may call
# simulator.runtime.keep_freed_memory() for the same speed.
_API = ("predict", "Prediction", "predict_scenario")


def __getattr__(name):  # lazy: `import simulator.physics` stays light
    if name in _API:
        from simulator.plan import api
        value = getattr(api, name)
        globals()[name] = value  # later lookups skip this hook
        return value
    raise AttributeError(name)
