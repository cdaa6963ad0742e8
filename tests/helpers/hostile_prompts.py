"""Hostile prompts: the pieces random prompts are built from (special tokens, control and
zero-width characters, combining marks, emoji sequences, right-to-left scripts) and a 1 MiB
paste."""

from __future__ import annotations

import random

from transformer_viewer.model.tokenizers.tokenizer import ENDOFTEXT

HOSTILE_PIECES = [
    ENDOFTEXT, "<|endoftext", "|>", "<|", " ", "  ", "\n", "\r\n", "\t", "\x00", "\x01", "\x1b[31m", "\x7f", "\x85",
    "\u00a0", "\u200b", "\u200d", "\u2028", "\u202e", "\u202c", "\ufeff", "\ufffd", "e\u0301", "\u0308\u0308\u0308",
    "🤗", "👩‍👩‍👧‍👦", "🏳️‍🌈", "日本語", "中文", "한국어", "שלום", "مرحبا", "Ωμέγα", "naïve", "’", "…", "\\x41", "·", "⏎",
    "\U0010ffff", "\ue000", "A", "the", " cat", "123", "$$", "'s", "don't",
]


def one_megabyte(seed: int = 0) -> str:
    """A 1 MiB prompt of seeded words, scripts, emoji, control characters and special tokens."""
    rng = random.Random(seed)
    words = ["the", " cat", "日本語", "🤗", "naïve", ENDOFTEXT, "\n", "  ", "\x00", "שלום", "e\u0301", "x" * 40]
    return "".join(rng.choice(words) for _ in range(300_000))[: 1 << 20]
