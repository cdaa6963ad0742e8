"""Sparse autoencoders (model/sae/) as worker requests: attach one to the worker's session, read a
labels file, and the feature analyses the window draws (each token's top features, one
feature's row, its logit effect and reconstruction share, a layer's overview).

The session holds the attached SAEs by index (`Session.attach_sae`); a request names its SAE by
that index, as a clamp in the Intervention does. The analyses start from the session's cached
residual stream of the run the request names (its text and Intervention), like every other
analysis. Handlers import the model code inside their bodies: importing this module keeps
torch off the GUI thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from transformer_viewer.model.errors import stop_if_cancelled
from transformer_viewer.viewer.worker.requests import Request

FEATURES_TOP = 16  # features kept per token: the panel's list; memory O(T k), never (T, d_sae)
ROWS_KEPT = 8  # feature rows the worker keeps per prompt: another token selected reuses its row


@dataclass(frozen=True)
class SaeLoadRequest(Request):
    """Read the SAE `spec` names (a folder, a params.npz, or REPO_ID/SUBFOLDER in the local
    Hugging Face cache; `PATH@HOOK` names its hook point, as `hook` does) and attach it to the
    session; `labels`: a labels file to read with it (the bundled SAE's)."""

    spec: str = ""
    hook: str | None = None
    labels: str | None = None

    @property
    def kind(self) -> str:  # one load per SAE: opening a second SAE never cancels the first
        return f"sae-load:{self.spec}@{self.hook}"


@dataclass(frozen=True)
class AttachedSae:
    """What the window knows about an SAE attached to the worker's session (no torch)."""

    index: int  # the session's index of it: what clamps and requests name
    name: str
    hook: str  # the viewer's hook point, e.g. "blocks.2.hook_resid_post"
    layer: int
    d_in: int
    d_sae: int
    architecture: str
    info: str  # one line for the status bar
    warnings: tuple[str, ...] = ()
    source: str = ""
    labels: dict | None = None  # feature id -> label, when a labels file came with it

    @property
    def title(self) -> str:
        return f"{self.index}: {self.name} ({self.hook}, {self.d_sae:,} features)"


@dataclass(frozen=True)
class SaeLabelsRequest(Request):
    """Read a labels file (a CSV of `id,label` or a Neuronpedia explanations JSON) for the SAE
    numbered `sae_index`, whose features run from 0 to `d_sae` - 1."""

    kind: ClassVar[str] = "sae-labels"
    path: str = ""
    sae_index: int = 0
    d_sae: int = 0


@dataclass(frozen=True)
class SaeLabels:
    sae_index: int
    labels: dict  # feature id -> label
    path: str


@dataclass(frozen=True, eq=False)  # holds an Intervention (an ndarray inside): compared by identity
class TokenFeaturesRequest(Request):
    """Every token's top `top` features of SAE `sae_index` in the run of `text` under
    `intervention`: (T, top) ids and activations."""

    kind: ClassVar[str] = "sae-token-features"
    text: str = ""
    sae_index: int = 0
    top: int = FEATURES_TOP
    intervention: Any = None
    skip_bos: bool = True  # a BOS token's row left empty (its features dwarf the rest)


@dataclass(frozen=True, eq=False)
class FeatureRequest(Request):
    """One feature of SAE `sae_index` in the run of `text` under `intervention`: its activation
    at every position, its decoder direction's direct effect on the logits, and its share of
    the reconstruction at `position`."""

    kind: ClassVar[str] = "sae-feature"
    text: str = ""
    sae_index: int = 0
    feature: int = 0
    position: int = 0
    top: int = 10
    intervention: Any = None


@dataclass(frozen=True)
class FeatureDetail:
    feature: int
    row: np.ndarray  # (T,) float32: the activation at each position
    effect: Any  # LogitEffect (model/analysis/sae_features.py): the top promoted and suppressed tokens
    share: float  # its share of the reconstruction at `position`
    position: int


@dataclass(frozen=True, eq=False)
class SaeOverviewRequest(Request):
    """The layer's overview through SAE `sae_index`: features firing per token (L0), the fraction
    of variance unexplained, and the next-token KL with the reconstruction spliced in."""

    kind: ClassVar[str] = "sae-overview"
    text: str = ""
    sae_index: int = 0
    intervention: Any = None
    skip_bos: bool = True  # the BOS token left out of the fraction of variance unexplained


def handle_sae_load(session, request: SaeLoadRequest, progress, is_cancelled) -> AttachedSae:
    import os

    from transformer_viewer.model.sae.loading import load_sae
    from transformer_viewer.model.sae.sources import parse_sae_spec

    path, _hook = parse_sae_spec(request.spec)
    progress(0, 0, f"loading the SAE {os.path.basename(os.path.normpath(path)) or path}…")
    # Its size is said before a weight is read; Cancel stops it at the next tensor, nothing attached.
    loaded = load_sae(request.spec, session.config, hook=request.hook, model_name=session.loaded.name,
                      progress=progress, is_cancelled=is_cancelled)
    stop_if_cancelled(is_cancelled)
    labels = _read_labels(request.labels, loaded.config.d_sae) if request.labels else None
    index = session.attach_sae(loaded)
    c = loaded.config
    return AttachedSae(index=int(index), name=loaded.name, hook=c.hook, layer=_layer_of(c.hook), d_in=int(c.d_in),
                       d_sae=int(c.d_sae), architecture=c.architecture, info=loaded.info,
                       warnings=tuple(loaded.warnings), source=str(c.source), labels=labels)


def _layer_of(hook: str) -> int:
    """The layer a hook point sits in: 3 for "blocks.3.hook_resid_post"."""
    parts = hook.split(".")
    return int(parts[1]) if len(parts) > 1 and parts[0] == "blocks" and parts[1].isdigit() else 0


def _read_labels(path: str, d_sae: int) -> dict:
    from transformer_viewer.model.sae.labels import read_feature_labels

    return dict(read_feature_labels(path, d_sae))


def handle_sae_labels(_session, request: SaeLabelsRequest, progress, _is_cancelled) -> SaeLabels:
    progress(0, 0, "reading the feature labels…")
    return SaeLabels(request.sae_index, _read_labels(request.path, request.d_sae), request.path)


def handle_token_features(session, request: TokenFeaturesRequest, progress, is_cancelled):
    from transformer_viewer.model.analysis.sae_features import token_features

    session.prepare_analysis(request.text)
    stop_if_cancelled(is_cancelled)
    return token_features(session, request.sae_index, top=request.top, intervention=request.intervention,
                          skip_bos=request.skip_bos)


def handle_feature(session, request: FeatureRequest, progress, is_cancelled) -> FeatureDetail:
    from transformer_viewer.model.analysis.sae_features import (
        feature_logit_effect,
        feature_row,
        reconstruction_share,
    )
    from transformer_viewer.viewer.worker.handlers import progress_after_delay

    session.prepare_analysis(request.text)
    report = progress_after_delay(progress, f"feature {request.feature}: {{stage}}…")
    # The row is the costly part (every token through the encoder) and the same at every selected
    # token: kept in the session's scratch, which a new prompt or device empties.
    rows = session.scratch.setdefault("sae-feature-rows", {})
    key = (request.sae_index, request.feature, request.intervention)
    row = rows.get(key)
    if row is None:
        report(0, 3, stage="its activation at every token")
        row = feature_row(session, request.sae_index, request.feature, intervention=request.intervention)
        stop_if_cancelled(is_cancelled)
        while len(rows) >= ROWS_KEPT:
            rows.pop(next(iter(rows)))
        rows[key] = row
    report(1, 3, stage="its effect on the logits")
    position = max(0, min(int(request.position), len(row) - 1))
    effect = feature_logit_effect(session, request.sae_index, request.feature, top=request.top, position=position,
                                  intervention=request.intervention)
    stop_if_cancelled(is_cancelled)
    share = reconstruction_share(session, request.sae_index, request.feature, position,
                                 intervention=request.intervention)
    return FeatureDetail(int(request.feature), np.asarray(row, dtype=np.float32), effect, float(share), position)


def handle_sae_overview(session, request: SaeOverviewRequest, progress, is_cancelled):
    from transformer_viewer.model.analysis.sae_features import sae_overview

    session.prepare_analysis(request.text)
    stop_if_cancelled(is_cancelled)
    return sae_overview(session, request.sae_index, intervention=request.intervention, skip_bos=request.skip_bos)
