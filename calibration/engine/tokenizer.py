"""Minimal GPT-2 style byte-level BPE over the vocabulary embedded in a GGUF file.

Enough for ASCII/UTF-8 prompts: special tokens (<|im_start|> ...) are matched first, the
rest is pre-tokenized with the SmolLM regex (digits split one by one), mapped to the GPT-2
byte alphabet and merged by rank.
"""

from __future__ import annotations

import functools
import re


@functools.lru_cache(maxsize=1)
def _bytes_to_unicode() -> dict[int, str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


# GPT-2 pre-tokenizer; \p{L} -> [^\W\d_], \p{N} -> \d (digits are split individually for SmolLM).
_PRETOK = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d| ?[^\s\w]+|\s+(?!\S)|\s+""")


class BPETokenizer:
    def __init__(self, tokens: list[str], merges: list[str], token_types: list[int] | None = None,
                 eos_id: int = 2, bos_id: int = 1):
        self.tokens = tokens
        self.vocab = {t: i for i, t in enumerate(tokens)}
        self.ranks = {tuple(m.split(" ", 1)): r for r, m in enumerate(merges)}
        self.eos_id, self.bos_id = eos_id, bos_id
        # special tokens: control type (3) in GGUF, or <|...|>-looking entries
        specials = [t for i, t in enumerate(tokens)
                    if (token_types is not None and token_types[i] == 3) or (t.startswith("<") and t.endswith(">") and len(t) > 2 and i < 32)]
        self.specials = sorted(specials, key=len, reverse=True)
        self._special_re = re.compile("(" + "|".join(re.escape(s) for s in self.specials) + ")") if self.specials else None
        self.b2u = _bytes_to_unicode()
        self.u2b = {v: k for k, v in self.b2u.items()}
        self.vocab_size = len(tokens)

    @functools.lru_cache(maxsize=65536)
    def _bpe(self, word: str) -> tuple[int, ...]:
        parts = list(word)
        while len(parts) > 1:
            best, best_rank = None, None
            for i in range(len(parts) - 1):
                r = self.ranks.get((parts[i], parts[i + 1]))
                if r is not None and (best_rank is None or r < best_rank):
                    best, best_rank = i, r
            if best is None:
                break
            parts[best:best + 2] = [parts[best] + parts[best + 1]]
        out = []
        for p in parts:
            if p in self.vocab:
                out.append(self.vocab[p])
            else:  # fall back to single byte-chars
                out.extend(self.vocab.get(c, 0) for c in p)
        return tuple(out)

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        chunks = self._special_re.split(text) if self._special_re else [text]
        for chunk in chunks:
            if not chunk:
                continue
            if chunk in self.vocab and chunk in self.specials:
                ids.append(self.vocab[chunk])
                continue
            for word in _PRETOK.findall(chunk):
                mapped = "".join(self.b2u[b] for b in word.encode("utf-8"))
                ids.extend(self._bpe(mapped))
        return ids

    def decode(self, ids) -> str:
        out = bytearray()
        for i in ids:
            t = self.tokens[int(i)]
            if t in self.specials:
                out += t.encode("utf-8")
            else:
                out += bytes(self.u2b.get(c, ord("?")) for c in t)
        return out.decode("utf-8", errors="replace")
