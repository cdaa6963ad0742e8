"""Export a view as PNG, SVG or PDF, or the matrix it shows as .npy or .csv. Every write is atomic.

Every format is first rendered into memory, then written by `write_file` (viewer/export_files.py): a temporary file in
the destination folder, each byte's write checked, flushed and counted, then moved over the
target with os.replace. A full disk or any other failure leaves the user's file as it was and
no temporary file behind. Rendering to memory matters for SVG: Qt's QSvgGenerator (used
because pyqtgraph's SVGExporter crashes on ImageItems with PySide6 6.12) never reports a
failed write, so writing through it to a file could not tell a short file from a whole one.
SVG and PDF (Qt's QPdfWriter) are rendered in viewer/vector_export.py, with the heatmap's
cells as vector rectangles. Qt is imported only by the image exporters.

A view is anything with `export_target()` (the QGraphicsView to render) and `matrix()`,
optionally `row_labels()` / `col_labels()` and `catch_up()` (a redraw it skipped while hidden);
a bare QGraphicsView, GraphicsLayoutWidget or QWidget can be rendered too.
"""

from __future__ import annotations

import csv
import io
import os

import numpy as np

from transformer_viewer.viewer.export_files import (
    MATRIX_FORMATS,
    ExportError,
    check_writable,
    extension,
    write_file,
)
from transformer_viewer.viewer.export_layout import laid_out


# -- matrices ----------------------------------------------------------------------------------
def export_matrix(matrix, path, row_labels=None, col_labels=None) -> str:
    """Write `matrix` as .npy (any shape) or .csv (2-D, header of column labels, first column of
    row labels). Returns the absolute path written."""
    ext = extension(path)
    if ext not in MATRIX_FORMATS:
        raise ExportError(f"{os.fspath(path)}: export_matrix writes .npy or .csv; use export_view for images")
    m = np.asarray(matrix)
    if ext == ".npy":
        buf = io.BytesIO()
        np.save(buf, m, allow_pickle=False)
        return write_file(path, buf.getbuffer())
    if m.ndim != 2:
        raise ExportError(f"{os.fspath(path)}: CSV holds a 2-D matrix but this view has shape {m.shape}; export .npy instead")
    R, C = m.shape
    rows = list(row_labels) if row_labels is not None else [str(i) for i in range(R)]
    cols = list(col_labels) if col_labels is not None else [str(i) for i in range(C)]
    if len(rows) != R or len(cols) != C:
        raise ExportError(f"{os.fspath(path)}: {len(rows)} row and {len(cols)} column labels for a {R} x {C} matrix")
    buf = io.StringIO()
    writer = csv.writer(buf, quoting=csv.QUOTE_MINIMAL, lineterminator="\n")
    writer.writerow(["", *cols])
    fmt = "%.9g" if m.dtype.kind == "f" else "%s"  # 9 digits round-trip float32 exactly
    for label, row in zip(rows, m, strict=True):
        writer.writerow([label, *(fmt % v for v in row.tolist())])
    return write_file(path, buf.getvalue().encode("utf-8"))


def read_csv_matrix(path) -> tuple[np.ndarray, list[str], list[str]]:
    """Read back what export_matrix wrote: (matrix, row_labels, col_labels)."""
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f))
    cols = rows[0][1:]
    labels = [r[0] for r in rows[1:]]
    values = np.array([[float(v) for v in r[1:]] for r in rows[1:]], dtype=np.float64).reshape(len(labels), len(cols))
    return values, labels, cols


# -- images ------------------------------------------------------------------------------------
MEMORY_BUDGET_ENV = "TV_MEMORY_BUDGET_MB"  # the app's memory budget, in MiB
RASTER_SHARE = 8  # a PNG's pixels may take this share of the memory budget: rendering and
# encoding it holds about 2.5 times its pixels' bytes at once


def raster_limit() -> int:
    """Bytes the pixels of one exported PNG may take: 1/RASTER_SHARE of the memory budget
    ($TV_MEMORY_BUDGET_MB, else the default), never over a quarter of this machine's memory."""
    from transformer_viewer.model.capture.memory_budget import DEFAULT_MEMORY_BUDGET
    from transformer_viewer.model.device import physical_memory

    try:
        budget = int(float(os.environ.get(MEMORY_BUDGET_ENV, "")) * 2**20)
    except ValueError:
        budget = 0
    if budget <= 0:
        budget = DEFAULT_MEMORY_BUDGET
    return min(budget // RASTER_SHARE, physical_memory() // 4)


def check_raster(width: int, height: int) -> None:
    """Refuse, in one line, a PNG of width x height pixels whose pixels are over `raster_limit`."""
    from transformer_viewer.model.capture.memory_budget import size_text

    need, limit = int(width) * int(height) * 4, raster_limit()
    if need > limit:
        raise ExportError(f"a {width} x {height} pixel PNG needs {size_text(need)} for its pixels alone, over the "
                          f"{size_text(limit)} an image may take (1/{RASTER_SHARE} of the memory budget, "
                          f"${MEMORY_BUDGET_ENV}); export a smaller size or dpi, or an SVG or PDF")


def export_png(target, path, scale: float = 1.0, size: tuple[int, int] | None = None, style=None) -> str:
    """Render `target` to PNG at `scale` device pixels per logical pixel, laid out at `size` (w, h)
    logical pixels (default: its on-screen size) as a figure in `style` (viewer/figure.py)."""
    from PySide6 import QtCore, QtGui

    if extension(path) != ".png":
        raise ExportError(f"{os.fspath(path)}: export_png writes .png files")
    if not (0 < float(scale) <= 16):
        raise ExportError(f"scale {scale} is out of range; use a value between 0.1 and 16")
    with laid_out(target, size, style) as (w, h, paint):
        W, H = max(1, round(w * scale)), max(1, round(h * scale))
        check_raster(W, H)
        image = QtGui.QImage(W, H, QtGui.QImage.Format.Format_ARGB32)
        image.fill(QtCore.Qt.GlobalColor.transparent)
        painter = QtGui.QPainter(image)
        try:
            painter.setRenderHint(QtGui.QPainter.RenderHint.Antialiasing)
            painter.setRenderHint(QtGui.QPainter.RenderHint.TextAntialiasing)
            painter.scale(W / w if w else 1, H / h if h else 1)
            paint(painter)
        finally:
            painter.end()
    # The PNG says its dpi (scale x 96), set only now: painting on an image of that dpi would
    # size every point-sized font by it once more.
    image.setDotsPerMeterX(round(scale * 96 / 0.0254))
    image.setDotsPerMeterY(round(scale * 96 / 0.0254))
    return write_file(path, png_bytes(image))


def png_bytes(image) -> bytes:
    """A QImage encoded as PNG in memory."""
    data = render_to_bytes(lambda device: image.save(device, "PNG"))
    if data is None:
        raise ExportError(f"Qt could not encode the {image.width()}x{image.height()} image as PNG; "
                          "export a smaller size")
    return data


def render_to_bytes(write) -> bytes | None:
    """The bytes `write(device)` puts into a QBuffer; None when it reports failure or writes nothing.
    PNG renders through here, SVG and PDF into their own QBuffer (vector_export.py): every image
    is whole in memory before `write_file` puts it on the disk."""
    from PySide6 import QtCore

    array = QtCore.QByteArray()
    device = QtCore.QBuffer(array)
    device.open(QtCore.QIODevice.OpenModeFlag.WriteOnly)
    try:
        ok = write(device)
    finally:
        device.close()
    data = bytes(array.data())
    return data if ok is not False and data else None


def export_svg(target, path, size: tuple[int, int] | None = None, style=None) -> str:
    """Render `target` to SVG: vector axes, text and cells (see viewer/vector_export.py)."""
    from transformer_viewer.viewer import vector_export

    if extension(path) != ".svg":
        raise ExportError(f"{os.fspath(path)}: export_svg writes .svg files")
    return vector_export.export_svg(target, path, size=size, style=style)


def export_pdf(target, path, size: tuple[int, int] | None = None, style=None) -> str:
    """Render `target` to a one-page vector PDF (Qt's QPdfWriter)."""
    from transformer_viewer.viewer import vector_export

    if extension(path) != ".pdf":
        raise ExportError(f"{os.fspath(path)}: export_pdf writes .pdf files")
    return vector_export.export_pdf(target, path, size=size, style=style)


def export_view(view, path, scale: float = 1.0, size: tuple[int, int] | None = None, style=None) -> str:
    """Export by extension: .png / .svg / .pdf render the view as a figure in `style` (a
    viewer.figure.FigureStyle; default: light, untitled), .npy / .csv write `view.matrix()`."""
    ext = extension(path)
    check_writable(path)
    catch_up = getattr(view, "catch_up", None)
    if catch_up is not None:  # a view hidden in the window (a closed dock) draws what it skipped
        catch_up()
    if ext == ".png":
        return export_png(view, path, scale=scale, size=size, style=style)
    if ext == ".svg":
        return export_svg(view, path, size=size, style=style)
    if ext == ".pdf":
        return export_pdf(view, path, size=size, style=style)
    if not hasattr(view, "matrix"):
        raise ExportError(f"this view has no matrix to write to {ext}; export .png, .svg or .pdf instead")
    rows = view.row_labels() if hasattr(view, "row_labels") else None
    cols = view.col_labels() if hasattr(view, "col_labels") else None
    return export_matrix(view.matrix(), path, rows, cols)
