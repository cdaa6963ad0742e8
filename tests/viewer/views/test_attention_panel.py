"""AttentionPanel: modes (head, layer mean, head mean), titles, controls, re-emitted signals."""

from types import SimpleNamespace

import numpy as np
import pytest

from transformer_viewer.viewer.views.attention_panel import AttentionPanel, attention_matrix


def fake_trace(L=3, nh=4, T=5):
    rng = np.random.default_rng(2)
    a = np.tril(rng.random((L, nh, T, T)) + 0.01)
    a = (a / a.sum(-1, keepdims=True)).astype(np.float16)
    mask = np.zeros((L, nh), dtype=bool)
    mask[2, 1] = True
    # Up to 256 tokens the overview is the pattern itself, shared with the full arrays.
    return SimpleNamespace(attention=a, overview_max=a, overview_mean=a, overview_cell=1,
                           labels=tuple(f"t{i}" for i in range(T)), mask=mask, run_id=0)


@pytest.fixture
def panel(qtbot):
    p = AttentionPanel()
    qtbot.addWidget(p)
    p.resize(700, 640)
    p.show()
    qtbot.waitExposed(p)
    return p


def test_single_head(panel):
    tr = fake_trace()
    panel.set_trace(tr, 1, 2, 3)
    np.testing.assert_array_equal(panel.matrix(), tr.attention[1, 2].astype(np.float32))
    assert panel.title() == "layer 1 head 2"
    assert panel.heatmap.highlighted_row() == 3
    assert panel.row_labels() == tr.labels
    panel.set_trace(tr, 2, 1)
    assert panel.title() == "layer 2 head 1 (masked)"


def test_layer_and_head_means(panel):
    tr = fake_trace()
    panel.set_trace(tr, 2, 3)
    panel.set_mode("layer-mean")
    np.testing.assert_allclose(panel.matrix(), tr.attention[2].astype(np.float32).mean(0), rtol=1e-6)
    assert panel.title() == "layer 2 (mean of heads)"
    assert panel.mode() == "layer-mean"
    panel.set_mode("head-mean")
    np.testing.assert_allclose(panel.matrix(), tr.attention[:, 3].astype(np.float32).mean(0), rtol=1e-6)
    assert panel.title() == "head 3 (mean over layers)"
    np.testing.assert_allclose(panel.matrix().sum(-1), 1.0, atol=2e-3)  # means of distributions stay distributions


def test_controls_drive_the_heatmap(panel, qtbot):
    panel.set_trace(fake_trace(), 0, 0)
    panel.scale_combo.setCurrentText("log")
    assert panel.heatmap.log_scale()
    panel.colormap_combo.setCurrentText("magma")
    assert panel.heatmap.colormap_name() == "magma"
    with qtbot.waitSignal(panel.mode_changed) as sig:
        panel.mode_combo.setCurrentIndex(panel.mode_combo.findData("layer-mean"))
    assert sig.args == ["layer-mean"]
    panel.set_trace(fake_trace(), 1, 0)  # a new trace keeps the chosen mode and scale
    assert panel.title() == "layer 1 (mean of heads)" and panel.heatmap.log_scale()


def test_signals_are_re_emitted(panel, qtbot):
    panel.set_trace(fake_trace(), 0, 0)
    with qtbot.waitSignal(panel.cell_clicked) as sig:
        panel.heatmap.cell_clicked.emit(3, 1)
    assert sig.args == [3, 1]
    with qtbot.waitSignal(panel.hover_text_changed) as sig:
        panel.heatmap.graphics.scene().sigMouseMoved.emit(panel.heatmap.cell_scene_pos(4, 0))
    assert sig.args[0].startswith("query 't4' (4) -> key 't0' (0): ")


def test_attention_matrix_errors():
    a = fake_trace().attention
    with pytest.raises(ValueError, match="layer 3 does not exist"):
        attention_matrix(a, 3, 0)
    with pytest.raises(ValueError, match="head 9 does not exist"):
        attention_matrix(a, 0, 9)
    with pytest.raises(ValueError, match="unknown attention mode"):
        attention_matrix(a, 0, 0, "bogus")
