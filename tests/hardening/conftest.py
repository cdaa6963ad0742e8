"""Fixtures of the hardening suite: the bad-checkpoint corpus and the tiny model, built once."""

from __future__ import annotations

import pytest

from tests.hardening import corpus as corpus_module
from tests.helpers.hardening import save_tiny


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    """(entries, marker): the generated bad files, and the file a code payload would create."""
    return corpus_module.build(str(tmp_path_factory.mktemp("bad-checkpoints")))


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory) -> str:
    return save_tiny(tmp_path_factory.mktemp("tiny") / "tiny.safetensors")


@pytest.fixture
def dialogs(monkeypatch):
    from tests.helpers.hardening import Dialogs

    return Dialogs(monkeypatch)


@pytest.fixture
def no_cuda(monkeypatch):
    """This machine, or any machine pretending: torch sees no CUDA device."""
    import torch

    from transformer_viewer.model import device as device_module

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(device_module, "cuda_available", lambda: False)


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Two cores shared with a training run: one intra-op thread is faster than two fighting."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
