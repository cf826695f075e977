"""DSD planner: roofline cost model of speculative decoding and optimal-K tables.

Notebook use::

    from simulator import predict
    result = predict(model="llama-3.1-8b", hardware="h100-sxm", draft="eagle", acceptance=0.8)
    result.table      # one row per batch size: K*, goodput, speedups, bound regime
    result.grid       # one row per (batch size, K)
"""


def __getattr__(name):  # lazy: `import simulator.cost` stays light
    if name in ("predict", "Prediction", "predict_scenario"):
        from simulator import api
        return getattr(api, name)
    raise AttributeError(name)
