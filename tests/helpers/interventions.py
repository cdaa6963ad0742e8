"""An Intervention for a bare (L, nh) mask in tests that have the mask but not the config."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from transformer_viewer.model.capture.interventions import Intervention


def ablating(mask, ablation: str = "zero") -> Intervention | None:
    """The Intervention that ablates `mask`'s heads, for a model of the mask's shape (None: none,
    the clean run)."""
    if mask is None:
        return None
    L, nh = np.shape(mask)
    return Intervention.make(SimpleNamespace(n_layer=L, n_head=nh), mask, ablation)


def count_makes(monkeypatch) -> list:
    """Record the arguments of every `Intervention.make` call (each time, the one check) from
    now until the test ends; returns the list they are appended to."""
    from transformer_viewer.model.capture import interventions

    calls = []
    original = Intervention.make.__func__

    def counted(cls, *args, **kwargs):
        calls.append(args)
        return original(cls, *args, **kwargs)
    monkeypatch.setattr(interventions.Intervention, "make", classmethod(counted))
    return calls
