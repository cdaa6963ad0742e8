"""The status bar names the loaded model's family."""

from transformer_viewer.viewer.state import ModelInfo
from transformer_viewer.viewer.window.status_bar import StatusBar


def test_status_bar_names_the_family(qtbot):
    from PySide6.QtWidgets import QMainWindow

    window = QMainWindow()
    qtbot.addWidget(window)
    bar = StatusBar(window)
    info = dict(name="Qwen/Qwen2.5-0.5B", format="huggingface", source="/x", n_layer=24, n_head=14, n_embd=896,
                block_size=32768, n_params=494_000_000, device="cpu")
    bar.show_model(ModelInfo(**info, family="Qwen2"))
    assert bar.model_label.text() == "Qwen/Qwen2.5-0.5B (Qwen2, huggingface)"
    bar.show_model(ModelInfo(**info))
    assert bar.model_label.text() == "Qwen/Qwen2.5-0.5B (huggingface)"
