"""Message triggers of the model families: train's family flags, and Hugging Face configs and
folders of the families we refuse (picked up by test_messages.py)."""

from __future__ import annotations

from tests.hardening.message_case import Case

CASES = [
    Case("train --n-kv-head -1", lambda c: c.cli("train", "--data", "x.txt", "--out", "o.safetensors",
                                                 "--n-kv-head", "-1"), "--n-kv-head cannot be negative"),
]
