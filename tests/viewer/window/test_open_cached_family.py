"""The app opens a decoder family from the Hugging Face cache by name: the status bar names the
family, the token strip starts with the BOS and ends with the EOS its tokenizer_config.json asks
for (both shown as special tokens), and the recent-files menu keeps the name, which reopens it."""

from __future__ import annotations

import pytest

from tests.helpers.hf_hub import cache_entry
from tests.helpers.window import new_window, wait_idle
from tests.model import tokenizer_common as tc
from tests.model.hf_family_models import build
from transformer_viewer.model.tokenizer import load_tokenizer

REPO = "tiny-org/llama-tiny"


@pytest.fixture
def cached_llama(tmp_path, monkeypatch):
    folder = str(tmp_path / "llama")
    tc.metaspace(folder, config={"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True,
                                 "add_eos_token": True})
    build("llama", vocab_size=load_tokenizer(folder).n_vocab).save_pretrained(folder)
    for var in ("HF_HOME", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    return cache_entry(tmp_path / "hub", REPO, folder)


def test_a_cached_family_opens_by_name_in_the_window(qtbot, tmp_path, cached_llama, tiny_ckpt):
    window = new_window(qtbot, tmp_path, REPO, prompt="the quick brown fox")
    try:
        info = window.state.model_info
        assert info.name == REPO and info.family == "Llama"
        assert window.status.model_label.text() == f"{REPO} (Llama, huggingface)"
        trace = window.state.trace
        assert trace.labels[0] == "<s>" and trace.labels[-1] == "</s>"
        assert trace.special[0] and trace.special[-1] and not any(trace.special[1:-1])
        assert window.actions_.recent()[0] == REPO  # the name, not a path made of it
        window.load(tiny_ckpt, device="cpu")
        wait_idle(qtbot, window, lambda: window.state.model_info.name != REPO)
        entry = next(a for a in window.actions_.recent_menu.actions() if a.toolTip() == REPO)
        entry.trigger()
        wait_idle(qtbot, window, lambda: window.state.model_info.name == REPO and window.state.trace is not None)
        assert window.state.model_info.family == "Llama"
    finally:
        window.close()
