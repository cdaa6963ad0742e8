"""Shared test setup: offscreen Qt, seeded torch, few threads (the machine has two cores)."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
import torch  # noqa: E402

# Two threads at most (the machine has two cores), one when OMP_NUM_THREADS says so: the suite
# must pass under either thread count, since the split of each sum changes with it.
torch.set_num_threads(max(1, min(2, int(os.environ.get("OMP_NUM_THREADS") or 2))))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
