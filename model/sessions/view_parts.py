"""The parts that say what the window showed: `selection` (layer, head, query, neuron and each
view's zoom), `views` (the front tab, closed docks, each view's settings, the figure options)
and `window` (Qt's own bytes for the docks' layout, which the window validates or drops)."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field

from transformer_viewer.model.sessions.checkpoint_part import MAX_COUNT
from transformer_viewer.model.sessions.fields import Fields, bad_field, int_pair
from transformer_viewer.model.sessions.parts import Part

MAX_TOKENS = 1 << 24
MAX_VIEWS = 64
VIEW_ID_CHARS = 40
MAX_WINDOW_STATE = 64 << 10  # Qt's layout of a dozen docks takes about 2 KB
HEAD_CHOICES = ("mean", "max")
ATTENTION_MODES = ("head", "layer-mean", "head-mean")
POOLINGS = ("max", "mean")


@dataclass(frozen=True)
class SelectionRecord:
    layer: int = 0
    head: int = 0
    query: int | None = None  # None: the last token
    neuron: int | None = None
    zoom: dict[str, tuple[tuple[int, int], tuple[int, int]]] = field(default_factory=dict)  # view -> (rows, cols)


@dataclass(frozen=True)
class RoutesSettings:
    position: int | None = None  # None: follows the selected query
    threshold: float = 0.0
    renormalize: bool = False


@dataclass(frozen=True)
class RolloutSettings:
    layers: tuple[int, int] = (0, 1)  # first..last+1
    heads: str | tuple[tuple[int, int], ...] = "mean"
    residual: bool = True


@dataclass(frozen=True)
class AttentionSettings:
    mode: str = "head"  # one head, the layer's mean, or the head's mean over layers
    colormap: str = "viridis"
    log: bool = False
    pooling: str = "max"  # how a long prompt's blocks are drawn


@dataclass(frozen=True)
class FigureSettings:
    theme: str = "light"
    dpi: float = 300.0
    size: tuple[int, int] | None = None  # logical pixels; None: the view's own


@dataclass(frozen=True)
class ViewsRecord:
    front_tab: str = ""  # the view id of the tab in front
    hidden: tuple[str, ...] = ()  # view ids of the docks closed
    attribution_tokens: tuple[int, ...] = ()  # the logit split: () the top token, (a,) or (a, b)
    routes: RoutesSettings = RoutesSettings()
    rollout: RolloutSettings = RolloutSettings()
    figure: FigureSettings = FigureSettings()
    attention: AttentionSettings = AttentionSettings()


@dataclass(frozen=True)
class WindowRecord:
    state: bytes = b""  # QMainWindow.saveState()
    geometry: bytes = b""  # QWidget.saveGeometry()


# -- selection ----------------------------------------------------------------------------
def _selection_to_json(r: SelectionRecord) -> dict:
    return {"layer": r.layer, "head": r.head, "query": r.query, "neuron": r.neuron,
            "zoom": {k: {"rows": list(rows), "cols": list(cols)} for k, (rows, cols) in r.zoom.items()}}


def _selection_from_json(f: Fields) -> SelectionRecord:
    zoom = {}
    z = f.nested("zoom")
    if z is not None:
        if len(z.obj) > MAX_VIEWS:
            raise bad_field(z.where, f"has {len(z.obj):,} views, more than {MAX_VIEWS}")
        for key in list(z.obj):
            view = _view_id(key, z.where)
            box = z.nested(key)
            zoom[view] = (box.pair("rows", 0, MAX_TOKENS, required=True), box.pair("cols", 0, MAX_TOKENS, required=True))
            box.finish()
    return SelectionRecord(f.integer("layer", 0, MAX_COUNT, 0), f.integer("head", 0, MAX_COUNT, 0),
                           f.integer("query", 0, MAX_TOKENS), f.integer("neuron", 0, MAX_COUNT), zoom)


def _view_id(key: str, where: str) -> str:
    if not (0 < len(key) <= VIEW_ID_CHARS and key.replace("-", "").isalnum() and key.isascii()):
        raise bad_field(where, f"names a view {key[:VIEW_ID_CHARS]!r} that no view id is")
    return key


# -- views --------------------------------------------------------------------------------
def _views_to_json(r: ViewsRecord) -> dict:
    heads = r.rollout.heads if isinstance(r.rollout.heads, str) else [list(p) for p in r.rollout.heads]
    return {"front_tab": r.front_tab, "hidden": list(r.hidden), "attribution_tokens": list(r.attribution_tokens),
            "routes": {"position": r.routes.position, "threshold": r.routes.threshold,
                       "renormalize": r.routes.renormalize},
            "rollout": {"layers": list(r.rollout.layers), "heads": heads, "residual": r.rollout.residual},
            "figure": {"theme": r.figure.theme, "dpi": r.figure.dpi,
                       "size": None if r.figure.size is None else list(r.figure.size)},
            "attention": dict(r.attention.__dict__)}


def _views_from_json(f: Fields) -> ViewsRecord:
    front = f.text("front_tab", "", max_chars=VIEW_ID_CHARS)
    hidden = tuple(_view_id(v if isinstance(v, str) else "", f"{f.where}.hidden") for v in f.items("hidden", MAX_VIEWS))
    tokens = f.items("attribution_tokens", 2)
    for i, t in enumerate(tokens):
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < (1 << 24):
            raise bad_field(f"{f.where}.attribution_tokens[{i}]", "is not a token id")
    routes, rollout, figure, attention = RoutesSettings(), RolloutSettings(), FigureSettings(), AttentionSettings()
    if (g := f.nested("routes")) is not None:
        routes = RoutesSettings(g.integer("position", 0, MAX_TOKENS), g.number("threshold", 0.0, 0.5, 0.0),
                                g.flag("renormalize"))
        g.finish()
    if (g := f.nested("rollout")) is not None:
        raw = g.obj.get("heads", "mean")
        if isinstance(raw, str):
            heads = g.choice("heads", HEAD_CHOICES, "mean")
        else:
            heads = tuple(int_pair(p, f"{g.where}.heads[{i}]", 0, MAX_COUNT) for i, p in enumerate(g.items("heads")))
        layers = g.pair("layers", 0, MAX_COUNT, (0, 1))
        if layers[0] >= layers[1]:
            raise bad_field(f"{g.where}.layers", f"is {list(layers)}, an empty range")
        rollout = RolloutSettings(layers, heads, g.flag("residual", True))
        g.finish()
    if (g := f.nested("figure")) is not None:
        figure = FigureSettings(g.choice("theme", ("light", "dark"), "light"), g.number("dpi", 10, 2400, 300.0),
                                g.pair("size", 16, 16384))
        g.finish()
    if (g := f.nested("attention")) is not None:
        attention = AttentionSettings(g.choice("mode", ATTENTION_MODES, "head"),
                                      g.text("colormap", "viridis", max_chars=40), g.flag("log"),
                                      g.choice("pooling", POOLINGS, "max"))
        g.finish()
    return ViewsRecord(front, hidden, tuple(tokens), routes, rollout, figure, attention)


# -- window -------------------------------------------------------------------------------
def _window_to_json(r: WindowRecord) -> dict:
    return {"state": base64.b64encode(r.state).decode("ascii"), "geometry": base64.b64encode(r.geometry).decode("ascii")}


def _window_from_json(f: Fields) -> WindowRecord:
    out = []
    for key in ("state", "geometry"):
        text = f.text(key, "", max_chars=MAX_WINDOW_STATE * 4 // 3 + 4)
        try:
            out.append(base64.b64decode(text.encode("ascii"), validate=True))
        except (binascii.Error, UnicodeEncodeError, ValueError):
            raise bad_field(f"{f.where}.{key}", "is not base64 text") from None
    return WindowRecord(*out)


SELECTION = Part("selection", 1, _selection_to_json, _selection_from_json)
VIEWS = Part("views", 1, _views_to_json, _views_from_json)
WINDOW = Part("window", 1, _window_to_json, _window_from_json)
