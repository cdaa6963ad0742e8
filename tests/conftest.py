"""Shared test setup: offscreen Qt, seeded torch, few threads (the machine has two cores)."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(2)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
