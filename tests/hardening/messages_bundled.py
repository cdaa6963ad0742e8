"""Messages of the training options for the bundled model's recipe."""

from tests.hardening.message_case import Case

CASES = [
    Case("train --repeat-fraction 2", lambda c: c.cli("train", "--data", "x.txt", "--out", "o.safetensors",
                                                      "--repeat-fraction", "2"),
         "--repeat-fraction must be between 0 and 1"),
]
