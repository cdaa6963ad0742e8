"""Every request type the worker answers, with its handler: the one table of the protocol.

`ROUTES` lists each request type once, beside the handler that answers it and whether that
handler needs a loaded model; nothing registers a handler anywhere else, and importing a request
module registers nothing. A handler is a function of its request module (lens.py, scan.py, ...),
whose body imports the model code, or, for the built-in requests, a "module:function" name in
handlers.py, which imports torch at its top and so is imported only when the worker thread first
looks a handler up. Importing this table therefore keeps torch (and Qt) off the GUI thread.

Lookup is by the request's exact type: a subclass is a request type of its own and needs its own
route (tests/viewer/worker/test_registry.py checks that every request type has exactly one).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from transformer_viewer.viewer.worker.attribution import (
    AttributionRequest,
    HeadSourcesRequest,
    handle_attribution,
    handle_head_sources,
)
from transformer_viewer.viewer.worker.generate import GenerateRequest, handle_generate
from transformer_viewer.viewer.worker.lens import LensRequest, handle_lens
from transformer_viewer.viewer.worker.mlp import MlpActivationsRequest, handle_mlp
from transformer_viewer.viewer.worker.patching import (
    PatchCellsRequest,
    PatchRequest,
    handle_patch,
    handle_patch_cells,
)
from transformer_viewer.viewer.worker.patterns import (
    PatternDiffRequest,
    PatternExportRequest,
    PatternRowRequest,
    PatternTileRequest,
    handle_diff,
    handle_export,
    handle_tile,
)
from transformer_viewer.viewer.worker.requests import (
    DeviceRequest,
    Handler,
    LoadRequest,
    LogprobsRequest,
    PredictRequest,
    ProbeRequest,
    Request,
    TraceRequest,
)
from transformer_viewer.viewer.worker.rollout import RolloutRequest, handle_rollout
from transformer_viewer.viewer.worker.routes import RoutesRequest, handle_routes
from transformer_viewer.viewer.worker.sae import (
    FeatureRequest,
    SaeLabelsRequest,
    SaeLoadRequest,
    SaeOverviewRequest,
    TokenFeaturesRequest,
    handle_feature,
    handle_sae_labels,
    handle_sae_load,
    handle_sae_overview,
    handle_token_features,
)
from transformer_viewer.viewer.worker.scan import ScanRequest, handle_scan


@dataclass(frozen=True)
class Route:
    """One request type and its handler: a function, or "module:function" imported on first use."""

    request: type[Request]
    handler: Handler | str
    needs_session: bool = True  # False: runs before any model is loaded (session is None)

    def __post_init__(self) -> None:
        if not (isinstance(self.request, type) and issubclass(self.request, Request)):
            raise TypeError(f"{self.request!r} is not a Request subclass")
        if isinstance(self.handler, str) and ":" not in self.handler:
            raise ValueError(f"{self.request.__name__}: a named handler is 'module:function', got {self.handler!r}")


_BUILTIN = "transformer_viewer.viewer.worker.handlers"  # imports torch at its top: named, not imported here
ROUTES: tuple[Route, ...] = (
    Route(LoadRequest, f"{_BUILTIN}:handle_load", needs_session=False),
    Route(ProbeRequest, f"{_BUILTIN}:handle_probe", needs_session=False),
    Route(DeviceRequest, f"{_BUILTIN}:handle_device"),
    Route(TraceRequest, f"{_BUILTIN}:handle_trace"),
    Route(PredictRequest, f"{_BUILTIN}:handle_predict"),
    Route(LogprobsRequest, f"{_BUILTIN}:handle_logprobs"),
    Route(PatternTileRequest, handle_tile),
    Route(PatternRowRequest, handle_tile),
    Route(PatternDiffRequest, handle_diff),
    Route(PatternExportRequest, handle_export),
    Route(MlpActivationsRequest, handle_mlp),
    Route(LensRequest, handle_lens),
    Route(ScanRequest, handle_scan),
    Route(AttributionRequest, handle_attribution),
    Route(HeadSourcesRequest, handle_head_sources),
    Route(RoutesRequest, handle_routes),
    Route(RolloutRequest, handle_rollout),
    Route(PatchRequest, handle_patch),
    Route(PatchCellsRequest, handle_patch_cells),
    Route(GenerateRequest, handle_generate),
    Route(SaeLoadRequest, handle_sae_load),
    Route(SaeLabelsRequest, handle_sae_labels, needs_session=False),
    Route(TokenFeaturesRequest, handle_token_features),
    Route(FeatureRequest, handle_feature),
    Route(SaeOverviewRequest, handle_sae_overview),
)

# The table the worker reads, by request type. Tests swap one route for the length of a test
# (tests/helpers/handlers.py); the app never writes to it.
HANDLERS: dict[type[Request], Route] = {route.request: route for route in ROUTES}
if len(HANDLERS) != len(ROUTES):
    raise RuntimeError("a request type is routed twice in ROUTES")

_imported: dict[str, Handler] = {}  # "module:function" -> the function, once imported


def resolve(handler: Handler | str) -> Handler:
    """The function a route names (importing its module on first use)."""
    if not isinstance(handler, str):
        return handler
    if handler not in _imported:
        module_name, _, attr = handler.partition(":")
        _imported[handler] = getattr(importlib.import_module(module_name), attr)
    return _imported[handler]


def lookup_handler(request_type: type) -> tuple[Handler, bool]:
    """The handler for a request type, and whether it needs a session."""
    route = HANDLERS.get(request_type)
    if route is None:
        raise KeyError(f"no handler for {request_type.__name__}: add its Route to viewer/worker/registry.py")
    return resolve(route.handler), route.needs_session
