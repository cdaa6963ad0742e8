"""The window finds its views by their registry ids: retitling every view changes what the tabs
and the View menu say, and nothing else."""

from __future__ import annotations

import dataclasses

from tests.helpers.window import new_window
from transformer_viewer.viewer.views import registry
from transformer_viewer.viewer.window import main_window


def test_retitled_views_are_placed_and_found_by_id(qtbot, tmp_path, tiny_ckpt, monkeypatch):
    retitled = tuple(dataclasses.replace(v, title=f"{v.title} (renamed)") for v in registry.VIEWS)
    monkeypatch.setattr(registry, "VIEWS", retitled)
    monkeypatch.setattr(main_window, "VIEWS", retitled)
    window = new_window(qtbot, tmp_path, tiny_ckpt)
    assert set(window.views) == {v.id for v in registry.VIEWS}
    tabs = {window.tabs.tabText(i) for i in range(window.tabs.count())}
    menu = {a.text() for a in window.actions_.view_menu.actions()}
    for v in retitled:
        assert v.place == "top" or v.title in tabs | menu, v.title  # a top view sits in the prompt's dock
        window.show_view(v.id)
        qtbot.waitUntil(window.views[v.id].isVisible)
    assert window.token_strip is window.views["tokens"] and window.logits is window.views["next-token"]
    window.close()
