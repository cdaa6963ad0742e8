"""Rasterise exported figures with the renderers users have: librsvg (`rsvg-convert`, what
Debian's image viewer, pandoc and LaTeX tool chains use), headless Chromium, and poppler's
`pdftoppm` for PDFs. A test that needs one skips, saying how to install it, only where it is
missing (`.ci/run` installs all three)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

PACKAGES = {"rsvg-convert": "librsvg2-bin", "chromium": "chromium", "pdftoppm": "poppler-utils"}


def tool(name: str) -> str:
    exe = shutil.which(name)
    if exe is None:
        pytest.skip(f"{name} is not installed (Debian: apt-get install {PACKAGES[name]})")
    return exe


def rasterise_svg(renderer: str, svg, png, zoom: int = 1, size: tuple[int, int] | None = None) -> str:
    """`svg` drawn by `renderer` ("rsvg-convert" or "chromium") into `png` at `zoom` device pixels
    per CSS pixel; Chromium needs the figure's `size` in CSS pixels for its window."""
    exe = tool(renderer)
    svg, png = os.fspath(svg), os.fspath(png)
    if renderer == "rsvg-convert":
        cmd = [exe, "-z", str(zoom), svg, "-o", png]
    else:  # the SVG as a page, screenshot at `zoom` device pixels per CSS pixel
        profile = tempfile.mkdtemp(prefix="chromium-")
        cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
               "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}", "--hide-scrollbars",
               f"--force-device-scale-factor={zoom}", f"--window-size={size[0]},{size[1]}", f"--screenshot={png}",
               "file://" + os.path.abspath(svg)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if renderer == "chromium":
        shutil.rmtree(profile, ignore_errors=True)
    assert done.returncode == 0 and os.path.exists(png), done.stderr[-500:]
    return png


def rasterise_pdf(pdf, png_stem, dpi: int = 96) -> str:
    """The PDF's one page drawn by poppler at `dpi` (96: one pixel per logical pixel)."""
    exe = tool("pdftoppm")
    done = subprocess.run([exe, "-r", str(dpi), "-png", "-singlefile", os.fspath(pdf), os.fspath(png_stem)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-500:]
    return os.fspath(png_stem) + ".png"


def pixels(png) -> np.ndarray:
    """(h, w, 3) int RGB of a PNG, composited over white (a transparent pixel is the page)."""
    from PySide6 import QtCore, QtGui

    image = QtGui.QImage(os.fspath(png))
    assert not image.isNull(), png
    page = QtGui.QImage(image.size(), QtGui.QImage.Format.Format_RGB32)
    page.fill(QtCore.Qt.GlobalColor.white)
    painter = QtGui.QPainter(page)
    painter.drawImage(0, 0, image)
    painter.end()
    h, w = page.height(), page.width()
    data = np.frombuffer(page.constBits(), dtype=np.uint8, count=page.sizeInBytes()).reshape(h, page.bytesPerLine())
    bgra = data[:, : 4 * w].reshape(h, w, 4)
    return bgra[..., 2::-1].astype(np.int32)  # BGRA in memory -> RGB


def mismatch(a: np.ndarray, b: np.ndarray, threshold: int = 128) -> float:
    """The share of pixels (over the common area) where some channel differs by more than
    `threshold`: text anti-aliased differently stays well under 2 %, a stroke drawn fifty
    times too wide or a missing panel does not."""
    h, w = min(a.shape[0], b.shape[0]), min(a.shape[1], b.shape[1])
    return float((np.abs(a[:h, :w] - b[:h, :w]).max(-1) > threshold).mean())


def count_colour(image: np.ndarray, rgb: tuple[int, int, int], tolerance: int = 40) -> int:
    """Pixels within `tolerance` (per channel) of `rgb`: the ink of one outline or line."""
    return int((np.abs(image - np.array(rgb)).max(-1) <= tolerance).sum())
