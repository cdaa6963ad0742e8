"""The clean and the corrupted prompt of a session, as the token ids the patching analyses take."""

from __future__ import annotations

import torch

from transformer_viewer.model.errors import ModelError


def session_pair(session) -> tuple[torch.Tensor, torch.Tensor]:
    """(clean ids, corrupted ids), (1, T) each: the session's prompt and its corrupted prompt."""
    clean = session._require_prompt()
    corrupted = getattr(session, "corrupted", None)  # Session.set_corrupted keeps it here
    if corrupted is None or not corrupted.ids:
        raise ModelError("there is no corrupted prompt; type one to patch from")
    return clean, torch.tensor([corrupted.ids], dtype=torch.long, device=clean.device)
