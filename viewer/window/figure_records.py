"""What the window remembers of each export: FILE.manifest.json beside it when asked (the same
manifest `transformer-viewer export --write-manifest` writes, so `export --from-manifest`
regenerates it), and a FigureRecord in `window.exported_figures`, which a saved session lists.

The window's heatmap data (.npy/.csv) is the matrix it draws, the trace's overview: its
manifest says `pooled`, which is what the export command writes for the same request. A
window's figure is laid out at the view's on-screen size; regenerated, it is laid out at the
export command's size for that view, with the same data, theme and resolution.
"""

from __future__ import annotations

import os

from transformer_viewer.model.sessions.figure_manifest import ExportRecord, file_sha256, write_manifest
from transformer_viewer.model.sessions.figures_part import FigureRecord
from transformer_viewer.model.sessions.prompt_part import PromptRecord
from transformer_viewer.viewer.figure import CSS_DPI


def record_export(window, what: str, path: str, scale: float, theme: str, manifest: bool, private: bool) -> None:
    """After `path` was written from the heatmap ("heatmap") or the heads grid ("grid")."""
    from transformer_viewer.viewer.export import extension
    from transformer_viewer.viewer.window.session_binding import capture

    view = "attention" if what == "heatmap" else "grid"
    written = None
    if manifest:
        st = window.state
        ext = extension(path)
        panel = window.attention if what == "heatmap" else window.head_grid
        figure = ext in (".png", ".svg", ".pdf")
        export = ExportRecord(
            view=view, out_format=ext, layer=st.layer, head=st.head, query=st.query_index if view == "attention" else None,
            mode=panel.mode() if view == "attention" else "head", colormap=panel.heatmap.colormap_name()
            if view == "attention" else "viridis", log=panel.heatmap.log_scale() if view == "attention" else False,
            theme=theme, dpi=round(scale * CSS_DPI, 3) if ext == ".png" else None, pooled=not figure,
            file=os.path.basename(path), sha256=file_sha256(path))
        session = capture(window)
        records = {k: session[k] for k in ("checkpoint", "intervention", "saes", "environment") if k in session}
        records.update(prompt=PromptRecord(st.prompt), export=export)
        written = write_manifest(path, records, private=private)
    window.exported_figures.append(FigureRecord(os.path.abspath(path), view, written))


