"""Seeded, realistic-looking test data: pseudo-English chat messages that compress like text.

Words come from a fixed syllable vocabulary drawn with a Zipf-like weighting, so zstd sees
roughly the 3x ratio of real chat transcripts (not the 100x of repeated characters).
"""

from __future__ import annotations

import random
from functools import lru_cache
from typing import Any

_SYLLABLES = ("ka te ri so lu ma ne vo pi da ger stan tion ple ment ber com pro ex in re de "
              "con al ly ing er ed es or an ar is it on at en ter qui fra bel mor zen "
              "ship work data file run plan tool call step agent model page form line").split()
VOCAB_SIZE = 4000
ROLES = ("user", "assistant", "tool", "assistant")
TOOLS = ("search_docs", "read_file", "run_query", "http_get", "write_note", "calc")


@lru_cache(maxsize=1)
def vocabulary() -> tuple[list[str], list[float]]:
    """A fixed vocabulary of pseudo-words and their Zipf weights (same on every call)."""
    rng = random.Random(1234)
    words: list[str] = []
    seen: set[str] = set()
    common = ("the of and to a in is that for it as with was on be by this are or from "
              "at not have an but which you they we can will one all there".split())
    for w in common:
        seen.add(w)
        words.append(w)
    while len(words) < VOCAB_SIZE:
        w = "".join(rng.choice(_SYLLABLES) for _ in range(rng.choice((1, 2, 2, 3, 3, 4))))
        if w not in seen:
            seen.add(w)
            words.append(w)
    weights = [1.0 / (rank + 1) ** 1.05 for rank in range(len(words))]
    return words, weights


def sentence_text(rng: random.Random, n_bytes: int) -> str:
    """About ``n_bytes`` of pseudo-English: capitalised sentences with punctuation."""
    words, weights = vocabulary()
    out: list[str] = []
    size = 0
    while size < n_bytes:
        sent = rng.choices(words, weights, k=rng.randint(6, 22))
        s = " ".join(sent).capitalize() + rng.choice((".", ".", ".", "?", "!", ":"))
        if rng.random() < 0.15:
            s += f" {rng.randint(1, 99999)}"
        out.append(s)
        size += len(s) + 1
    return " ".join(out)[:n_bytes]


def message(i: int, seed: int = 0, content_bytes: int = 860) -> dict[str, Any]:
    """Chat message number ``i`` (about 1 KB encoded): role, content, a small tool-call list."""
    rng = random.Random(seed * 1_000_003 + i)
    role = ROLES[i % len(ROLES)]
    msg: dict[str, Any] = {"id": f"msg-{seed}-{i:06d}", "role": role,
                           "content": sentence_text(rng, content_bytes)}
    calls = []
    if role == "assistant":
        for k in range(rng.randint(1, 2)):
            calls.append({"id": f"call_{rng.getrandbits(48):012x}", "name": rng.choice(TOOLS),
                          "args": {"query": sentence_text(rng, 40), "limit": rng.randint(1, 50),
                                   "exact": rng.random() < 0.5}})
    msg["tool_calls"] = calls
    return msg


def messages(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """The first ``n`` messages of the conversation ``seed``."""
    return [message(i, seed) for i in range(n)]
