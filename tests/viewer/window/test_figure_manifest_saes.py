"""A figure the window exports under a feature clamp: its manifest records the SAE the clamp
names, and `transformer-viewer export --from-manifest` reopens it and writes the same data."""

from __future__ import annotations

import numpy as np

from tests.helpers.cli import cli
from tests.helpers.sae_window import HOOK, opened
from tests.helpers.window import new_window, wait_idle
from transformer_viewer.model.sessions.figure_manifest import read_manifest
from transformer_viewer.viewer.window.actions import export


def test_a_clamped_window_export_regenerates_from_its_manifest(qtbot, tmp_path, tiny_ckpt, sae_folder, capsys):
    w = new_window(qtbot, tmp_path / "w", tiny_ckpt)
    st = w.state
    opened(qtbot, w, sae_folder)
    st.saes.set_feature(5)
    controls = w.views["token-features"].clamp_controls
    controls.set_choice("scale", 3.0)
    clamp = controls.clamp()
    wait_idle(qtbot, w, lambda: st.trace.intervention.clamps == (clamp,))
    st.set_selection(layer=1, head=2)
    first = export(w, "heatmap", str(tmp_path / "att.npy"), manifest=True)
    w.close()

    records, _notes = read_manifest(first + ".manifest.json")
    (sae,) = records["saes"].saes
    assert sae.spec == str(sae_folder) and sae.hook == HOOK and records["intervention"].clamps == (clamp,)
    again = str(tmp_path / "again.npy")
    rc, _out, err = cli(capsys, "export", "--from-manifest", first + ".manifest.json", "--out", again)
    assert rc == 0, err
    assert np.load(first).tobytes() == np.load(again).tobytes()
