"""Reference speculative-decoding engine (torch): real batched draft/verify/accept with KV caches.

    load_target("smollm2-135m" | "moe-synthetic") -> Transformer
    make_draft("ngram" | "early-exit:N" | "model:N", target) -> draft
    SpecDecoder(target, draft, k, temperature).generate(prompts, max_new_tokens) -> Generation
    run_sweep(SweepSettings(target=..., draft=..., batch_sizes=[...], ks=[...], ...), output=...) -> pandas.DataFrame
"""

from .engine import (Generation, ModelDraft, NgramDraft, SpecDecoder, StepRecord, accept_greedy,
                     accept_sampling, make_draft)
from .model import KVCache, ModelConfig, Transformer, random_weights, transformer_configs
from .sweep import COLUMNS, SweepSettings, context_prompts, run_sweep
from .weights import TARGETS, TargetUnavailable, load_target, load_tokenizer

__all__ = [
    "COLUMNS", "Generation", "KVCache", "ModelConfig", "ModelDraft", "NgramDraft", "SpecDecoder",
    "StepRecord", "SweepSettings", "TARGETS", "TargetUnavailable", "Transformer", "accept_greedy", "accept_sampling",
    "context_prompts", "load_target", "load_tokenizer", "make_draft", "random_weights", "run_sweep",
    "transformer_configs",
]
