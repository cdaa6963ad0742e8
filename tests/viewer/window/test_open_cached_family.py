"""The app opens every decoder family from its folder and from the Hugging Face cache by name:
the status bar names the family and the views get a trace; a tokenizer_config.json that asks for
a BOS and an EOS shows both in the token strip as special tokens; the recent-files menu keeps a
cached model's name, which reopens it. One window loads them all in turn (each is tiny)."""

from __future__ import annotations

import pytest

from tests.helpers import tokenizers as tc
from tests.helpers.hf_family_models import FAMILY_OF, WITH_GPT2, build, save_with_tokenizer
from tests.helpers.hf_hub import cache_entry
from tests.helpers.window import new_window, wait_idle
from transformer_viewer.model.tokenizers.tokenizer_loading import load_tokenizer


@pytest.fixture
def hub(tmp_path, monkeypatch):
    for var in ("HF_HOME", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


def _open(qtbot, window, source: str) -> None:
    window.load(source, device="cpu")
    wait_idle(qtbot, window, lambda: window.state.model_info is not None and window.state.model_info.source == source
              and window.state.trace is not None)


def test_every_family_opens_from_its_folder_and_by_name(qtbot, tmp_path, hub):
    window = new_window(qtbot, tmp_path, None, prompt="the quick brown fox")
    try:
        for name in WITH_GPT2:
            folder = str(tmp_path / name)
            hf = save_with_tokenizer(name, folder)
            repo = f"tiny-org/{name}-tiny"
            cache_entry(hub, repo, folder)
            family = FAMILY_OF[hf.config.architectures[0]]
            for source, shown in ((folder, name), (repo, repo)):
                _open(qtbot, window, source)
                assert window.last_error is None, (name, window.last_error)
                assert window.state.model_info.family == family
                assert window.status.model_label.text() == f"{shown} ({family}, huggingface)"
                info = window.state.model_info
                text = hf.config.get_text_config()  # a multimodal model's decoder
                assert (info.n_layer, info.n_head) == (text.num_hidden_layers, text.num_attention_heads)
    finally:
        window.close()


def test_bos_and_eos_in_the_strip_and_the_name_in_recent_files(qtbot, tmp_path, hub, tiny_ckpt):
    folder = str(tmp_path / "llama")
    tc.metaspace(folder, config={"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True,
                                 "add_eos_token": True})
    build("llama", vocab_size=load_tokenizer(folder).n_vocab).save_pretrained(folder)
    repo = "tiny-org/llama-eos"
    cache_entry(hub, repo, folder)
    window = new_window(qtbot, tmp_path, repo, prompt="the quick brown fox")
    try:
        trace = window.state.trace
        assert trace.labels[0] == "<s>" and trace.labels[-1] == "</s>"
        assert trace.special[0] and trace.special[-1] and not any(trace.special[1:-1])
        assert window.actions_.recent()[0] == repo  # the name, not a path made of it
        _open(qtbot, window, tiny_ckpt)
        entry = next(a for a in window.actions_.recent_menu.actions() if a.toolTip() == repo)
        entry.trigger()
        wait_idle(qtbot, window, lambda: window.state.model_info.source == repo and window.state.trace is not None)
        assert window.state.model_info.family == "Llama"
    finally:
        window.close()
