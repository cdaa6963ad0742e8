"""Hostile prompts against the headless Session: generated (hypothesis) and fixed cases. Nothing
escapes set_prompt/run/predict but the package's own one-line ModelError (an empty prompt, a
position outside it), and tokens map back onto the text they came from."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.hardening import TINY, one_line
from tests.helpers.hostile_prompts import HOSTILE_PIECES, one_megabyte
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.tokenizers.tokenizer import ENDOFTEXT, ENDOFTEXT_ID, Tokenizer

BLOCK = TINY.block_size
# Seeded and derandomized: the same cases every run; no example database is written.
SETTINGS = dict(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
HYPOTHESIS_CASES = {"general": 260, "hostile alphabet": 220, "masks and positions": 120, "tail": 150}  # 750

hostile_text = st.lists(st.sampled_from(HOSTILE_PIECES), max_size=40).map("".join)
LABEL_ALPHABET = set("·⏎⇥␍\\")  # characters a label uses for itself: a span holding them is ambiguous
_VISIBLE_BACK = {"·": " ", "⏎": "\n", "⇥": "\t", "␍": "\r"}
_ESCAPE = re.compile(r"\\x([0-9a-f]{2})|\\u([0-9a-f]{4})")


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    from tests.helpers.hardening import save_tiny

    path = save_tiny(tmp_path_factory.mktemp("prompts") / "tiny.safetensors")
    return Session(load_checkpoint(path, device="cpu"))


@pytest.fixture(scope="module")
def tok():
    return Tokenizer()


def unlabel(label: str) -> str:
    """The text a label of whole characters stands for: visible whitespace and escapes undone."""
    text = _ESCAPE.sub(lambda m: chr(int(m.group(1) or m.group(2), 16)), label)
    return "".join(_VISIBLE_BACK.get(c, c) for c in text)


def check_tokenization(tok: Tokenizer, text: str) -> None:
    t = tok.tokenize(text)
    assert len(t.ids) == len(t.labels) == len(t.spans)
    assert all(0 <= i < tok.n_vocab for i in t.ids)
    # Spans: contiguous, in order, covering the text exactly.
    pos = 0
    for a, b in t.spans:
        assert a == pos and a <= b <= len(text)
        pos = b
    assert pos == len(text)
    assert "".join(text[a:b] for a, b in t.spans) == text
    clean = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace") if _has_surrogates(text) else text
    if clean == text:  # tiktoken replaces lone surrogates; everything else round-trips byte for byte
        assert tok.decode(t.ids) == text
        assert b"".join(tok.token_bytes(i) for i in t.ids) == text.encode("utf-8")
    for i, label, (a, b) in zip(t.ids, t.labels, t.spans, strict=True):
        assert label and one_line(label.replace("\\", "/")) and "\n" not in label
        piece = tok.token_bytes(i)
        whole = _decodes(piece)
        if i == ENDOFTEXT_ID:
            assert label == ENDOFTEXT and text[a:b] == ENDOFTEXT
        elif whole is not None and whole == text[a:b] and not (set(whole) & LABEL_ALPHABET):
            assert unlabel(label) == whole, (label, whole)


def _decodes(piece: bytes) -> str | None:
    try:
        return piece.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _has_surrogates(text: str) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for c in text)


def exercise(session: Session, text: str, mask=None, position=None, ablation: str = "zero") -> None:
    """set_prompt, run and predict; only the package's own one-line ModelError may come out."""
    tok = session.set_prompt(text)
    total = len(session.tokenizer.encode(text))
    assert len(tok.ids) == min(total, BLOCK) and session.dropped == max(0, total - BLOCK)
    assert "".join(tok.text[a:b] for a, b in tok.spans) == tok.text
    if not tok.ids:
        for call in (lambda: session.run(), lambda: session.predict()):
            with pytest.raises(ModelError) as info:
                call()
            assert one_line(str(info.value)) and "empty" in str(info.value)
        return
    T = len(tok.ids)
    try:
        trace = session.run(mask, ablation, position=position, top_k=5)
    except ModelError as e:
        assert one_line(str(e))
        assert position is not None and not -T <= position < T, e
        return
    assert trace.labels == tok.labels and trace.n_tokens == T and trace.dropped_tokens == session.dropped
    n = trace.overview_max.shape[-1]
    assert trace.overview_max.shape == (TINY.n_layer, TINY.n_head, n, n) and n * trace.overview_cell >= T
    assert np.isfinite(trace.overview_max).all() and np.isfinite(trace.next.probs).all()
    assert abs(float(trace.next.probs.sum()) - 1.0) < 1e-3
    nxt = session.predict(mask, ablation, position=position, top_k=5)
    # a prediction reads the last layer's last rows alone: the float32 rule, not the capture's bits
    from tests.helpers.tolerances import assert_probs_close, largest_logit, model_reduction

    assert_probs_close(nxt.probs, trace.next.probs, logit_scale=largest_logit(session.model, trace.token_ids),
                       reduction=model_reduction(TINY), depth=TINY.n_layer + 1, what="predict vs run")


@settings(max_examples=HYPOTHESIS_CASES["general"], **SETTINGS)
@given(text=st.text(max_size=160))
def test_generated_text(session, tok, text):
    check_tokenization(tok, text)
    exercise(session, text)


@settings(max_examples=HYPOTHESIS_CASES["hostile alphabet"], **SETTINGS)
@given(text=hostile_text)
def test_generated_hostile_pieces(session, tok, text):
    check_tokenization(tok, text)
    exercise(session, text)


@settings(max_examples=HYPOTHESIS_CASES["masks and positions"], **SETTINGS)
@given(text=st.one_of(hostile_text, st.text(max_size=120)),
       mask=st.lists(st.booleans(), min_size=4, max_size=4),
       position=st.one_of(st.none(), st.integers(-80, 80)),
       ablation=st.sampled_from(["zero", "mean"]))
def test_generated_masks_and_positions(session, text, mask, position, ablation):
    exercise(session, text, np.array(mask).reshape(TINY.n_layer, TINY.n_head), position, ablation)


def sliced(tok: Tokenizer, text: str, n: int):
    """The long way round: tokenize everything, then keep the last n (what tokenize_last saves)."""
    full = tok.tokenize(text)
    dropped = max(0, len(full.ids) - n)
    if not dropped:
        return full, 0
    start = full.spans[dropped][0]
    spans = tuple((a - start, b - start) for a, b in full.spans[dropped:])
    return (full.ids[dropped:], full.labels[dropped:], spans, text[start:]), dropped


@settings(max_examples=HYPOTHESIS_CASES["tail"], **SETTINGS)
@given(text=st.one_of(hostile_text, st.text(max_size=120)), n=st.integers(1, 40))
def test_keeping_the_last_tokens_equals_slicing_them(tok, text, n):
    tail, dropped = tok.tokenize_last(text, n)
    expected, expected_dropped = sliced(tok, text, n)
    assert dropped == expected_dropped
    got = (tail.ids, tail.labels, tail.spans, tail.text) if dropped else tail
    assert got == expected


FIXED = {
    "empty": "",
    "space": " ",
    "whitespace only": " \t\n\r\n   \u00a0\u2028 ",
    "newlines": "\n" * 300,
    "endoftext alone": ENDOFTEXT,
    "endoftext repeated": ENDOFTEXT * 3,
    "endoftext far past the context": ENDOFTEXT * 500,
    "endoftext glued": f"a{ENDOFTEXT}b{ENDOFTEXT}{ENDOFTEXT}c",
    "endoftext broken": "<|endoftext|<|endoftext|>|>",
    "emoji": "🤗👩‍👩‍👧‍👦🏳️‍🌈🇯🇵 👍🏽",
    "cjk": "日本語の文章です。中文字符，한국어 텍스트",
    "combining": "e\u0301 a\u0308 Z\u0351\u0352\u0353\u0354\u0355\u0356\u0357\u0358" * 5,
    "rtl": "שלום עולם مرحبا بالعالم \u202eesrever\u202c \u200fRTL mark",
    "nul": "\x00",
    "nuls inside": "a\x00b\x00\x00c",
    "control characters": "".join(chr(i) for i in range(32)) + "\x7f" + "".join(chr(i) for i in range(0x80, 0xa0)),
    "escape sequences": "\x1b[31mred\x1b[0m \x08\x07",
    "bom and zero width": "\ufeffstart\u200b\u200c\u200d\u2060end",
    "lone surrogates": "a\ud800b\udfffc",
    "private use and the last code point": "\ue000\U000f0000\U0010ffff",
    "replacement characters": "\ufffd" * 10,
    "looks like an escape": "\\x41\\u0041 ·⏎⇥",
    "one long word": "x" * 5000,
    "far longer than the context": "The cat sat on the mat. " * 400,
    "one megabyte": one_megabyte(),
}


@pytest.mark.parametrize("name", list(FIXED))
def test_fixed_prompts(session, tok, name):
    text = FIXED[name]
    if len(text) < 20000:  # check_tokenization walks every token in Python; the 1 MB case below
        check_tokenization(tok, text)
    exercise(session, text)
    exercise(session, text, mask=np.array([[True, False], [False, True]]), position=0, ablation="mean")


def test_fixed_cases_are_what_they_say(session):
    assert session.set_prompt(FIXED["endoftext alone"]).ids == (ENDOFTEXT_ID,)
    assert session.set_prompt(FIXED["endoftext repeated"]).ids == (ENDOFTEXT_ID,) * 3
    tok = session.set_prompt(FIXED["endoftext far past the context"])
    assert tok.ids == (ENDOFTEXT_ID,) * BLOCK and session.dropped == 500 - BLOCK
    assert len(FIXED["one megabyte"]) == 1 << 20
    tok = session.set_prompt(FIXED["one megabyte"])
    assert len(tok.ids) == BLOCK and session.dropped > 100_000
    assert FIXED["one megabyte"].endswith(tok.text)


def test_the_empty_prompt_error_is_the_packages_own_line(session):
    session.set_prompt("")
    with pytest.raises(ModelError, match="the prompt is empty; type some text first"):
        session.run()


def test_hypothesis_case_count_meets_the_brief():
    assert sum(HYPOTHESIS_CASES.values()) >= 500


APP_PROMPTS = ["", " ", "\n\n", ENDOFTEXT, ENDOFTEXT * 100, "\x00", "a\x00b", "🤗👩‍👩‍👧‍👦", "שלום עולם",
               "e\u0301\u0308", "a\ud800b", "\x1b[31m", "x" * 5000]


def test_the_app_takes_every_hostile_prompt(qtbot, tmp_path, tiny_ckpt, dialogs):
    """In the window: an empty prompt is a notice (not a dialog), every other one gives a trace."""
    from tests.helpers.hardening import new_window, wait_idle

    window = new_window(qtbot, tmp_path, tiny_ckpt)
    st = window.state
    for text in APP_PROMPTS:
        before = st.trace
        window.run_prompt(text)
        if not text:
            assert window.prompt_editor.notice.text() == "Type a prompt to run the model."
            assert st.trace is before
            continue
        wait_idle(qtbot, window, lambda before=before: st.trace is not before)
        assert st.trace.n_tokens == min(64, len(Tokenizer().encode(text)))
        assert window.token_strip.canvas.labels == st.trace.labels
        assert window.attention.matrix().shape == (st.trace.n_tokens, st.trace.n_tokens)
    assert not dialogs.shown and window.last_error is None
    window.close()
