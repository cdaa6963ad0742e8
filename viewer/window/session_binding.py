"""What each session part reads from the window and how it is put back.

`capture(window)` makes the records (model/sessions/) of what the window shows; `restore`
puts them back through the state's setters and the views' own setters, never by writing a
widget's attributes, so the window sends its requests as for a user's change. A part that needs
the trace (each view's zoom, the routes' chosen position) is applied once the first trace of the
restored prompt has arrived (`restore_after_trace`).

A feature that adds a part adds its capture and restore here, beside its model-side module.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from transformer_viewer.model.sessions.checkpoint_part import CheckpointRecord
from transformer_viewer.model.sessions.fingerprint import SAMPLED, Fingerprint
from transformer_viewer.model.sessions.patching_part import PatchingRecord
from transformer_viewer.model.sessions.prompt_part import InterventionRecord, PromptRecord
from transformer_viewer.model.sessions.view_parts import (
    AttentionSettings,
    FigureSettings,
    RolloutSettings,
    RoutesSettings,
    SelectionRecord,
    ViewsRecord,
    WindowRecord,
)
from transformer_viewer.viewer.views.zoom_heatmap import ZoomHeatmap

STATE_VERSION = 1  # passed to saveState/restoreState: a layout of another version is refused by Qt
QT_STATE_MARKER = b"\x00\x00\x00\xff"  # the first four bytes of every QMainWindow.saveState()


def capture(window) -> dict[str, object]:
    """Every part the window has something to say for (the checkpoint only once a model is open)."""
    st = window.state
    records: dict[str, object] = {"prompt": PromptRecord(st.prompt), "selection": _selection(window),
                                  "views": _views(window), "window": _window(window),
                                  "figures": tuple(window.exported_figures),
                                  "patching": PatchingRecord(**st.patching.__dict__)}
    info = st.model_info
    if info is not None:
        records["checkpoint"] = checkpoint_record(info)
        masked = tuple((int(a), int(b)) for a, b in zip(*np.nonzero(st.mask), strict=True))
        records["intervention"] = InterventionRecord(info.n_layer, info.n_head, masked, st.ablation)
        if info.environment is not None:
            records["environment"] = info.environment
    return records


def checkpoint_record(info) -> CheckpointRecord:
    from transformer_viewer.model.checkpoints.bundled import is_bundled

    return CheckpointRecord(
        source=None if is_bundled(info.source) else info.source, name=info.name, format=info.format,
        family=info.family, n_layer=info.n_layer, n_head=info.n_head, n_embd=info.n_embd,
        block_size=info.block_size, vocab_size=info.vocab_size,
        fingerprint=info.fingerprint or Fingerprint(SAMPLED, "", 0), tokenizer=info.tokenizer,
        tokenizer_fingerprint=info.tokenizer_fingerprint)


def _zoomable(window) -> dict[str, ZoomHeatmap]:
    return {vid: v.heatmap for vid, v in window.views.items() if isinstance(getattr(v, "heatmap", None), ZoomHeatmap)}


def _selection(window) -> SelectionRecord:
    st = window.state
    zoom = {}
    if st.trace is not None:
        for vid, heatmap in _zoomable(window).items():
            rows, cols = heatmap.visible_tokens()
            if rows[1] > rows[0] and cols[1] > cols[0]:
                zoom[vid] = (rows, cols)
    return SelectionRecord(st.layer, st.head, st.query, st.neuron, zoom)


def front_tab(window) -> str:
    page = window.tabs.currentWidget()
    return next((vid for vid, v in window.views.items() if page is not None and (page is v or page.isAncestorOf(v))),
                "")


def _views(window) -> ViewsRecord:
    v = window.views
    routes, rollout = v["routes"], v["rollout"]
    heads = rollout.head_choice()
    options = window.figure_options
    att = v["attention"]
    return ViewsRecord(
        front_tab=front_tab(window),
        hidden=tuple(vid for vid, dock in window.docks.items() if dock.isHidden() and vid in v),
        attribution_tokens=tuple(int(t) for t in v["attribution"].tokens),
        routes=RoutesSettings(routes.position, routes.threshold_value(), routes.renormalize.isChecked()),
        rollout=RolloutSettings(rollout.layers(), heads if heads is not None else "mean", rollout.residual.isChecked()),
        figure=FigureSettings(options.theme, float(options.dpi), None),
        attention=AttentionSettings(att.mode(), att.colormap_combo.currentText(), att.heatmap.log_scale(), att.pooling()))


def _window(window) -> WindowRecord:
    return WindowRecord(bytes(window.saveState(STATE_VERSION).data()), bytes(window.saveGeometry().data()))


# -- restore ------------------------------------------------------------------------------
def restore(window, records: dict[str, object], notes: list[str]) -> None:
    """Put back what needs no trace, on the model now loaded (its shape already checked)."""
    from transformer_viewer.model.capture.interventions import Intervention
    st = window.state
    if (w := records.get("window")) is not None:
        _restore_window(window, w, notes)
    if (i := records.get("intervention")) is not None and st.model_info is not None:
        mask = np.zeros((i.n_layer, i.n_head), dtype=bool)
        for layer, head in i.masked:
            mask[layer, head] = True
        st.set_intervention(Intervention.make(st, mask, i.ablation))
    if (s := records.get("selection")) is not None:
        st.set_selection(layer=s.layer, head=s.head, query=s.query, clear_query=s.query is None)
        st.set_neuron(s.neuron)
    if (views := records.get("views")) is not None:
        window.figure_options = replace(window.figure_options, theme=views.figure.theme, dpi=views.figure.dpi)
        _restore_attention(window.views["attention"], views.attention, notes)
        for vid, dock in window.docks.items():
            if vid in window.views:
                dock.setHidden(vid in views.hidden)
        _restore_rollout(window, views.rollout)
        routes = window.views["routes"]
        routes.renormalize.setChecked(views.routes.renormalize)
        routes.set_threshold(views.routes.threshold)
        _restore_tokens(window, views.attribution_tokens, notes)
        if views.front_tab in window.views:
            window.show_view(views.front_tab)
    if (patching := records.get("patching")) is not None:
        _restore_patching(window, patching, notes)
    if (p := records.get("prompt")) is not None:
        window.run_prompt(p.text)
    window.exported_figures = list(records.get("figures", ()))


def restore_after_trace(window, records: dict[str, object]) -> None:
    """What refers to the trace's tokens: each view's zoom, the routes' chosen position."""
    st = window.state
    T = st.n_tokens
    if (s := records.get("selection")) is not None:
        for vid, heatmap in _zoomable(window).items():
            if vid in s.zoom:
                view = window.views[vid]
                if hasattr(view, "catch_up"):  # a view behind another tab draws now: its zoom needs its data
                    view.catch_up()
                rows, cols = s.zoom[vid]
                heatmap.set_visible_tokens((min(rows[0], T), min(rows[1], T)), (min(cols[0], T), min(cols[1], T)))
    if (views := records.get("views")) is not None and views.routes.position is not None:
        routes = window.views["routes"]
        routes.position = views.routes.position if views.routes.position < T else None
        routes.request()


def _restore_rollout(window, r: RolloutSettings) -> None:
    st = window.state
    first, last = min(r.layers[0], st.n_layer - 1), min(r.layers[1], st.n_layer)
    heads = r.heads if isinstance(r.heads, str) else tuple(
        (a, b) for a, b in r.heads if a < st.n_layer and b < st.n_head) or "mean"
    window.views["rollout"].set_options(layers=(first, max(first + 1, last)), heads=heads, residual=r.residual)


def _restore_attention(view, a: AttentionSettings, notes: list[str]) -> None:
    view.set_mode(a.mode)
    view.set_pooling(a.pooling)
    view.set_log_scale(a.log)
    from transformer_viewer.viewer.views.heatmap import get_colormap

    try:
        get_colormap(a.colormap)
    except ValueError:
        notes.append(f"the colormap {a.colormap[:40]!r} is not known here; kept the one shown")
        return
    view.set_colormap(a.colormap)


def _restore_patching(window, r, notes: list[str]) -> None:
    """The patching setup, its token ids and layers checked against the model now loaded."""
    from transformer_viewer.model.errors import ModelError

    st = window.state
    fields = dict(r.__dict__)
    vocab = st.model_info.vocab_size if st.model_info is not None else 0
    if vocab and any(t >= vocab for t in r.tokens):
        notes.append("the patching metric's tokens are outside this model's vocabulary; choose them again")
        fields["tokens"] = ()
    fields["layer"] = min(r.layer, st.n_layer - 1)
    fields["receiver"] = (min(r.receiver[0], st.n_layer - 1), min(r.receiver[1], st.n_head - 1))
    try:
        st.set_patching(**fields)
    except ModelError as e:
        notes.append(f"the patching setup was not restored: {e}")


def _restore_tokens(window, tokens: tuple[int, ...], notes: list[str]) -> None:
    from transformer_viewer.model.errors import ModelError

    view = window.views["attribution"]
    try:
        view.set_tokens(*(tokens or (None,)))
    except ModelError as e:
        notes.append(f"the attribution's tokens were not restored: {e}")


def _restore_window(window, w: WindowRecord, notes: list[str]) -> None:
    """Qt's layout bytes, only when they look like one and Qt takes them; otherwise dropped."""
    from PySide6.QtCore import QByteArray

    if w.geometry and not window.restoreGeometry(QByteArray(w.geometry)):
        notes.append("the window's saved geometry was not valid and was dropped")
    if not w.state:
        return
    if not w.state.startswith(QT_STATE_MARKER) or not window.restoreState(QByteArray(w.state), STATE_VERSION):
        notes.append("the window's saved dock layout was not valid and was dropped")

