"""Example prompts for the app's prompt menu, shipped as `assets/prompts.json`: lines where a
small Shakespeare/KJV model shows previous-token or induction behaviour (repeated formulae,
names, refrains), and clean/corrupted pairs for activation patching (with the token pair whose
logit difference tells the two runs apart)."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from importlib import resources

PROMPTS_FILE = "prompts.json"


@dataclass(frozen=True)
class ExamplePrompt:
    title: str  # menu entry
    text: str  # the prompt itself
    shows: str  # what to look for, one line
    head: tuple[int, int] | None = None  # (layer, head) of the bundled model that shows it
    corrupted: str = ""  # a patching example's corrupted prompt ("": a plain example)
    tokens: tuple[str, ...] = ()  # a patching example's tokens A and B, as text


def parse_layer_head(text: str) -> tuple[int, int] | None:
    """"2.2" -> (2, 2); None for anything else."""
    match = re.fullmatch(r"\s*([0-9]{1,6})\.([0-9]{1,6})\s*", text)  # ASCII digits: `\d` takes `٣` too
    return (int(match[1]), int(match[2])) if match else None


@functools.lru_cache(maxsize=1)
def example_prompts() -> tuple[ExamplePrompt, ...]:
    """The bundled example prompts, in menu order."""
    raw = resources.files("transformer_viewer.assets").joinpath(PROMPTS_FILE).read_text(encoding="utf-8")
    return tuple(ExamplePrompt(title=p["title"], text=p["text"], shows=p.get("shows", ""),
                               head=parse_layer_head(str(p.get("head", ""))), corrupted=str(p.get("corrupted", "")),
                               tokens=tuple(str(t) for t in p.get("tokens", ())))
                 for p in json.loads(raw))
