"""Exported figures compared: a PNG decoded to its pixels, an SVG without its embedded manifest,
and a figure regenerated from its manifest by `transformer-viewer export --from-manifest`."""

from __future__ import annotations

import re

import numpy as np

from transformer_viewer.viewer.cli.main import main


def png_pixels(path) -> np.ndarray:
    """The PNG at `path` decoded by Qt: (H, W, 4) uint8, B G R A."""
    from PySide6 import QtGui

    image = QtGui.QImage(str(path))
    assert not image.isNull(), f"{path} is not a PNG Qt can read"
    image = image.convertToFormat(QtGui.QImage.Format.Format_ARGB32)
    rows = np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), image.bytesPerLine())
    return rows[:, :image.width() * 4].reshape(image.height(), image.width(), 4).copy()


def without_embedded_manifest(svg: bytes) -> bytes:
    """An SVG's bytes less the manifest it embeds (which names the machine's paths it ran with)."""
    return re.sub(rb'<metadata id="transformer-viewer-manifest">[A-Za-z0-9+/=]*</metadata>', b"", svg)


def regenerate(capsys, manifest: str, out: str, *extra: str) -> str:
    """`export --from-manifest MANIFEST --out OUT` run in-process; returns OUT. `manifest` may be
    a FILE.manifest.json or a figure embedding one."""
    rc = main(["export", "--from-manifest", str(manifest), "--out", str(out), *extra])
    _out, err = capsys.readouterr()
    assert rc == 0, err
    return str(out)
