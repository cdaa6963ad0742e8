"""A checkpoint load reports its tensors as it reads and checks them, and stops at the next
one once cancelled; outside a watched load nothing is reported."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.hf_family_models import save_with_tokenizer
from transformer_viewer.model.checkpoints import load_watch
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
from transformer_viewer.model.errors import Cancelled


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("llama")
    hf = save_with_tokenizer("llama", str(folder))
    hf.save_pretrained(folder, max_shard_size="20KB")  # sharded, with its index
    (folder / "model.safetensors").unlink(missing_ok=True)
    return folder


def test_a_load_reports_each_tensor_read_then_checked(llama_folder):
    seen = []
    loaded = load_checkpoint(str(llama_folder), progress=lambda *a: seen.append(a))
    stages = [s for _d, _t, s in seen]
    assert stages == sorted(stages, key=load_watch.STAGES.index)  # reading, then checking
    for stage in load_watch.STAGES:
        steps = [(d, t) for d, t, s in seen if s == stage]
        total = steps[0][1]
        assert [d for d, _ in steps] == list(range(total)) and {t for _, t in steps} == {total}
    n_checked = len([s for s in stages if s == load_watch.CHECKING])
    assert n_checked == len(list(loaded.model.parameters()))  # each once: the tied head is the embedding


@pytest.mark.parametrize("after", [0, 3, 40])
def test_a_cancelled_load_stops_at_the_next_tensor(llama_folder, after):
    polls, seen = [], []

    def is_cancelled() -> bool:
        polls.append(1)
        return len(polls) > after

    with pytest.raises(Cancelled):
        load_checkpoint(str(llama_folder), progress=lambda *a: seen.append(a), is_cancelled=is_cancelled)
    assert len(seen) <= after  # nothing reported once it was cancelled


def test_a_load_that_is_not_cancelled_gives_the_model_an_unwatched_load_gives(llama_folder):
    watched = load_checkpoint(str(llama_folder), progress=lambda *a: None, is_cancelled=lambda: False)
    plain = load_checkpoint(str(llama_folder))
    for (k, a), b in zip(watched.model.state_dict().items(), plain.model.state_dict().values(), strict=True):
        assert torch.equal(a, b), k


def test_tensor_done_outside_a_watched_load_does_nothing():
    load_watch.tensor_done(load_watch.READING, 0, 1)
    load_watch.check_cancelled()
    with load_watch.watching(is_cancelled=lambda: True):
        with pytest.raises(Cancelled):
            load_watch.check_cancelled()
    load_watch.check_cancelled()  # the watch ended with its block
