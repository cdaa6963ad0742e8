"""Messages of the bundled model's training recipe and of showing one of its heads at start."""

from tests.hardening.message_case import Case

CASES = [
    Case("train --repeat-fraction 2", lambda c: c.cli("train", "--data", "x.txt", "--out", "o.safetensors",
                                                      "--repeat-fraction", "2"),
         "--repeat-fraction must be between 0 and 1"),
    Case("window --head 3", lambda c: c.cli("--head", "3", "--screenshot", str(c.tmp / "s.png")),
         "give a head as LAYER.HEAD"),
]
