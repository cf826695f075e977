"""What a serving engine adds to the kernels of a decode step (see ``simulator/data/engines/README.md``).

For batch size B and K drafts (K = 0: plain decoding):

    verify   = kernels of the target pass over B (K + 1) tokens; outside a CUDA graph the host must
               launch every kernel, so the pass takes max(GPU time, kernels x eager launch time)
    draft    = passes x the same for one draft pass (+ the extend pass over the B (K + 1) verified
               tokens for EAGLE / MTP heads and draft models: simulator/physics/draft_cost.py)
    host     = fixed + per_sequence x B  (+ the speculative terms when K > 0)
    exposed  = host                                   without overlap scheduling
             = max(min_exposed, host - window)        with it; window = the GPU time the host work
                                                      hides behind (the whole step, or the draft passes)
    step     = verify + draft + exposed + passes x per_draft_pass (host work between chained draft passes)

A verify pass is captured when its size (tokens or sequences, as the engine keys its graphs) is within
the capture limit, which with speculation on may be a limit of its own (e.g. B (K + 1) <= 512 tokens).
"""
from __future__ import annotations

import numpy as np

from simulator.physics.caches import PhysicsCaches, make_room
from simulator.specs.engines import EngineProfile


def _within(size, limit: int, sizes: tuple[int, ...], padding: bool) -> np.ndarray:
    size = np.asarray(size, dtype=float)
    ok = size <= limit if limit else np.ones(size.shape, dtype=bool)
    if not padding and sizes:
        ok = ok & np.isin(size, np.asarray(sizes, dtype=float))
    return ok


def _step_sizes(batch, k, tokens):
    """(B, K, B (K + 1), tokens) as float arrays, each on its own axes (a grid's B and K stay small: every
    comparison on one of them alone costs its length, not the grid's); tokens B (K + 1) where not given."""
    batch, k = np.asarray(batch, dtype=float), np.asarray(k, dtype=float)
    decode = batch * (k + 1)
    return batch, k, decode, decode if tokens is None else np.asarray(tokens, dtype=float)


def _in_graph(engine: EngineProfile, batch, k, decode, tokens, mixed: bool) -> np.ndarray:
    """:func:`verify_in_graph` of :func:`_step_sizes`' arrays; ``mixed``: tokens were given."""
    shape = np.broadcast_shapes(batch.shape, k.shape, tokens.shape)
    if not engine.graphs_enabled:
        return np.zeros(shape, dtype=bool)
    if engine.unlimited:
        return np.ones(shape, dtype=bool)
    by_tokens = engine.size_unit == "tokens"
    plain = _within(tokens if by_tokens else batch, engine.max_capture_size, engine.capture_sizes, engine.padding)
    if not (engine.spec_capture_max_tokens or engine.spec_capture_max_batch):  # speculation keeps the plain rule
        graph = plain if engine.verify_captured else np.where(k > 0, False, plain)
    else:
        spec = np.asarray(engine.verify_captured)
        if engine.spec_capture_max_tokens:
            spec = spec & (tokens <= engine.spec_capture_max_tokens)
        if engine.spec_capture_max_batch:
            spec = spec & (batch <= engine.spec_capture_max_batch)
        graph = np.where(k > 0, spec, plain)
    graph = graph if graph.shape == shape else np.array(np.broadcast_to(graph, shape))
    if mixed:
        steps = tokens != decode
        if steps.any():
            return np.where(steps, plain if by_tokens else False, graph)
    return graph


def verify_in_graph(engine: EngineProfile, batch, k, tokens=None) -> np.ndarray:
    """Whether the target pass of B sequences x (K + 1) tokens replays a captured CUDA graph. ``tokens``: the
    step's token count where it also runs prompt chunks (more than B (K + 1)): such a mixed step follows the
    plain capture rule on its tokens where graphs are keyed by tokens (vLLM's piecewise graphs), and runs
    eagerly where they are keyed by sequences (SGLang captures decode and verify batches only)."""
    return _in_graph(engine, *_step_sizes(batch, k, tokens), tokens is not None)


def _pad_table(sizes: tuple[int, ...], caches: PhysicsCaches | None = None) -> np.ndarray:
    """The captured size each whole size 0..max(sizes) is padded to, and NaN past it (read-only; made once per
    capture list and kept in ``caches.pad_tables``, the step model's: the grid reads it at every cell)."""
    kept = caches.pad_tables if caches is not None else None
    table = kept.get(sizes) if kept is not None else None
    if table is None:
        cap = np.asarray(sorted(sizes), dtype=float)
        whole = np.arange(cap[-1] + 1)
        table = np.append(cap[np.searchsorted(cap, whole)], np.nan)
        table.flags.writeable = False
        if kept is not None:
            make_room(kept, PhysicsCaches.PAD_SLOTS)
            kept[sizes] = table
    return table


def _padded(size: np.ndarray, sizes: tuple[int, ...], caches: PhysicsCaches | None = None) -> np.ndarray:
    """Each size rounded up to the next captured size (unchanged above the largest)."""
    table = _pad_table(sizes, caches)
    top = table.size - 2
    up = np.take(table, np.ceil(size).astype(np.intp), mode="clip")  # NaN past the largest size
    return np.where(size <= top, up, size)


def pad_key(engine: EngineProfile) -> tuple:
    """What :func:`pad` reads of a profile, hashable: with the B and K axes it fixes the padded sizes (a cache key
    cheaper than the padded array itself)."""
    e = engine
    return (e.graphs_enabled, e.unlimited, e.padding, e.size_unit, e.capture_sizes, e.max_capture_size,
            e.spec_capture_sizes, e.spec_capture_max_tokens, e.spec_capture_max_batch, e.verify_captured)


def pads(engine: EngineProfile) -> bool:
    """Whether any pass of ``engine`` runs at a padded size (graphs on, padded to a capture list)."""
    return engine.graphs_enabled and engine.padding and not engine.unlimited and bool(engine.capture_sizes)


def pad(engine: EngineProfile, batch, k, tokens=None, caches: PhysicsCaches | None = None) -> tuple[np.ndarray,
                                                                                                    np.ndarray]:
    """(tokens the target pass runs at, whether it replays a captured graph) for a step of B sequences
    decoding K + 1 positions each, ``tokens`` in all (default B (K + 1); more with prompt chunks), both of
    the broadcast shape. The one padding rule of every engine, read from its profile: a pass in a padded
    graph runs at the next captured size, in tokens where graphs are keyed by tokens (vLLM), in sequences x
    (K + 1) where keyed by sequences (SGLang; its speculative capture list at K > 0 where it has one); an
    eager pass, an unlimited engine's exact-size graph or one without padding runs at its own size. The grid,
    the serving pricer and the K-change notes read it (plan.grid, serving.pricer, plan.api). ``caches``: the step
    model's (its capture lists' tables kept there), None: made afresh."""
    batch, k, decode, tokens = _step_sizes(batch, k, tokens)
    graph = _in_graph(engine, batch, k, decode, tokens, tokens is not decode)
    if not pads(engine):
        return np.array(np.broadcast_to(tokens, graph.shape), dtype=float), graph
    if engine.size_unit == "tokens":
        padded = _padded(tokens, engine.capture_sizes, caches)
    else:
        seqs = _padded(batch, engine.capture_sizes, caches)
        if engine.spec_capture_sizes:
            seqs = np.where(k > 0, _padded(batch, engine.spec_capture_sizes, caches), seqs)
        padded = seqs * (k + 1)
    return np.where(graph, padded, tokens), graph


def graph_batch(engine: EngineProfile, batch, k, caches: PhysicsCaches | None = None) -> np.ndarray:
    """The batch size the verify pass of B sequences x (K + 1) tokens runs at: its :func:`pad`ded tokens
    / (K + 1) where it replays a padded graph, else B."""
    batch, k = np.broadcast_arrays(np.asarray(batch, dtype=float), np.asarray(k, dtype=float))
    padded, graph = pad(engine, batch, k, caches=caches)
    return np.where(graph, padded / (k + 1), batch)


def padding_routed(engine: EngineProfile, model) -> bool:
    """Whether ``engine``'s router sends a padded graph's padding rows of ``model`` to experts as real tokens."""
    rule = engine.moe_padding_routed
    return model.is_moe and (rule == "all" or (rule == "grouped-topk" and model.expert_groups > 0))


def expert_batch(engine: EngineProfile, model, batch, k, caches: PhysicsCaches | None = None):
    """Sequences whose routing a verify pass's routed experts load: B, or, where the pass replays a graph
    padded to a larger captured size and the engine's router sends the padding rows to experts as real
    tokens (``moe_padding_routed``), the padded size: padded tokens / (K + 1) for token-keyed graphs,
    the padded batch for sequence-keyed ones (the speculative capture list at K > 0 where the engine has
    one). None where no cell pads (the routed experts then see B, as without graphs)."""
    if not padding_routed(engine, model) or not pads(engine):
        return None
    batch, k = np.broadcast_arrays(np.asarray(batch, dtype=float), np.asarray(k, dtype=float))
    padded = graph_batch(engine, batch, k, caches)
    return None if np.array_equal(padded, batch) else padded


def draft_in_graph(engine: EngineProfile, batch) -> np.ndarray:
    """Whether a draft pass (one token per sequence) replays a captured graph: within the plain limit
    and, with speculation on, within the speculative batch limit too."""
    batch = np.asarray(batch, dtype=float)
    if not engine.graphs_enabled:
        return np.zeros(batch.shape, dtype=bool)
    if engine.unlimited:
        return np.ones(batch.shape, dtype=bool)
    ok = engine.draft_captured & _within(batch, engine.max_capture_size, engine.capture_sizes, engine.padding)
    return ok & (batch <= engine.spec_capture_max_batch) if engine.spec_capture_max_batch else ok


def draft_extend_in_graph(engine: EngineProfile, batch, k, verify_graph=None) -> np.ndarray:
    """Whether the draft's extend pass (B (K + 1) tokens, the verify pass's size) replays a graph: the
    engine's own rule for it where its profile states one, else that of the draft passes, within
    the verify pass's capture range either way (``verify_graph``: that range's mask, when known)."""
    captured = engine.draft_captured if engine.draft_extend_captured is None else engine.draft_extend_captured
    if not captured:
        return np.zeros(np.broadcast(np.asarray(batch), np.asarray(k)).shape, dtype=bool)
    if verify_graph is None:
        verify_graph = verify_in_graph(engine, batch, k)
    return verify_graph & draft_in_graph(engine, batch)


def extend_expert_batch(engine: EngineProfile, batch, k, padded):
    """The sequences a draft head's extend pass loads experts for: the verify pass's ``padded`` batch
    (:func:`expert_batch`) where the extend pass replays a graph too, B where it runs eagerly; None
    without padding."""
    if padded is None:
        return None
    in_graph = draft_extend_in_graph(engine, *np.broadcast_arrays(np.asarray(batch, dtype=float), k))
    return np.where(in_graph, padded, np.broadcast_to(batch, padded.shape))


def pass_time_s(gpu_s, kernels, in_graph, eager_per_kernel_s: float, copy: bool = True) -> np.ndarray:
    """A pass in a graph takes its GPU time; outside one, the host launches each kernel while the GPU
    runs the previous ones, so the slower of the two sets the pass time: max(GPU time, kernels x eager
    launch). The GPU time keeps its per-kernel launch gaps: a kernel launched by the host reaches the GPU
    no sooner than one replayed from a graph, so a pass is never faster outside a graph than in one.
    ``copy`` False: ``gpu_s`` itself where every cell replays a graph and it has the answer's shape (a
    caller that only reads the answer, or hands over its own array)."""
    in_graph = np.asarray(in_graph)
    shape = np.broadcast_shapes(np.shape(gpu_s), np.shape(kernels), in_graph.shape)
    if in_graph.all():  # every cell replays a graph (the common case): no select over the whole grid
        if not copy and np.shape(gpu_s) == shape:
            return gpu_s
        return np.array(np.broadcast_to(gpu_s, shape), dtype=float)
    eager = np.maximum(gpu_s, kernels * eager_per_kernel_s)
    if not in_graph.any():
        return eager if np.shape(eager) == shape else np.array(np.broadcast_to(eager, shape), dtype=float)
    return np.where(in_graph, gpu_s, eager)


def engine_host_s(engine: EngineProfile, batch, spec, tp: int = 1) -> np.ndarray:
    """The engine's host time per step (its profile's): per step and per sequence, with TP > 1 shipping the inputs
    to the ranks, and the speculating step's own where ``spec``."""
    return engine.host_fixed_s + engine.host_per_sequence_s * batch + (engine.tp_broadcast_per_step_s if tp > 1 else 0.0) \
        + np.where(spec, engine.spec_fixed_s + engine.spec_per_sequence_s * batch, 0.0)


def engine_host_scalar_s(engine: EngineProfile, batch: int, spec: bool, tp: int = 1) -> float:
    """:func:`engine_host_s` for one step in Python floats, the same arithmetic in the same order."""
    host = engine.host_fixed_s + engine.host_per_sequence_s * batch + (engine.tp_broadcast_per_step_s if tp > 1 else 0.0)
    if spec:
        host += engine.spec_fixed_s + engine.spec_per_sequence_s * batch
    return host


def host_exposed_and_room_s(engine: EngineProfile, batch, k, step_gpu_s, draft_gpu_s,
                            tp: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(host time per step not hidden behind GPU work, the room the overlap window still leaves): with TP > 1 the
    host time includes shipping inputs to the ranks. Where the engine overlaps its host work with the GPU's (its
    ``overlap_window``: the step's GPU time, or its draft passes') it hides all but max(min exposed, host - window),
    and max(min exposed + window - host, 0) more host time per step would still hide (the engine
    terms' host time, simulator.specs.step_terms, hides there: adding H to the engine's host time exposes
    max(0, H - room) more); where it does not overlap, all of it is exposed and the room is 0 (the scalar, where
    neither plain nor speculating steps overlap)."""
    batch, k = np.asarray(batch, dtype=float), np.asarray(k, dtype=float)
    spec = k > 0
    host = engine_host_s(engine, batch, spec, tp)
    windows = {"none": 0.0, "step": step_gpu_s, "draft": draft_gpu_s}
    floor = engine.min_exposed_s
    # beyond = host - window; exposed = max(floor, beyond), and the room is exposed - beyond: 0 where the host time
    # already overruns the window, floor - beyond where the floor alone is exposed
    if engine.spec_overlap_window == engine.overlap_window:  # one rule for K = 0 and K > 0: no selects
        window = windows[engine.overlap_window]
        shape = np.broadcast_shapes(spec.shape, np.shape(host), np.shape(window))
        if engine.overlap_window == "none":  # no room: the scalar 0 (the terms' formula drops its room term)
            exposed, room = host, 0.0
        else:
            beyond = host - window
            exposed = np.maximum(floor, beyond)
            room = exposed - beyond
        return (np.asarray(exposed) if np.shape(exposed) == shape else np.array(np.broadcast_to(exposed, shape)),
                room)
    window = np.where(spec, windows[engine.spec_overlap_window], windows[engine.overlap_window])
    overlap = np.where(spec, engine.spec_overlap_window != "none", engine.overlap_window != "none")
    beyond = host - window
    exposed = np.where(overlap, np.maximum(floor, beyond), host)
    return exposed, np.where(overlap, exposed - beyond, 0.0)


def host_exposed_s(engine: EngineProfile, batch, k, step_gpu_s, draft_gpu_s, tp: int = 1) -> np.ndarray:
    """Host time per step not hidden behind GPU work (:func:`host_exposed_and_room_s`)."""
    return host_exposed_and_room_s(engine, batch, k, step_gpu_s, draft_gpu_s, tp)[0]


def host_exposed_and_room_scalar_s(engine: EngineProfile, batch: int, k: int, step_gpu_s: float,
                                   draft_gpu_s: float, tp: int = 1) -> tuple[float, float]:
    """:func:`host_exposed_and_room_s` for one step (Python floats: the serving simulation calls it once per step),
    the same arithmetic in the same order."""
    spec = k > 0
    host = engine_host_scalar_s(engine, batch, spec, tp)
    name = engine.spec_overlap_window if spec else engine.overlap_window
    if name == "none":
        return float(host), 0.0
    beyond = host - (step_gpu_s if name == "step" else draft_gpu_s)
    exposed = max(engine.min_exposed_s, beyond)
    return float(exposed), float(exposed - beyond)
