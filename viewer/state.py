"""The one object every view shares: what is loaded, what was run, and what is selected.

Views take a `ViewerState`, read its attributes and subscribe to its signals; they change the
selection through its setters, never by writing attributes. All of it lives on the GUI thread.

Signals (each emitted only when the value really changed):
- `model_changed(ModelInfo | None)`: a new model was loaded or moved to another device. The
  selection is clamped, the mask reset to all-False of the new shape, neuron cleared.
- `clean_trace_changed(Trace)`: the run of the current prompt without any intervention (the
  baseline the Diff toggles and the attention diff subtract).
- `trace_changed(Trace)`: the run views draw: the run under `intervention` when it changes
  anything (a masked head, a feature clamp), otherwise the same object as `clean_trace`.
  Emitted after `clean_trace_changed` when both change.
- `selection_changed()`: `layer`, `head` or `query` changed.
- `mask_changed(np.ndarray)`: the (L, nh) head mask or the ablation changed: `intervention`, the
  value requests carry, is new (`mask` and `ablation` read it, for the controls).
- `neuron_changed(int | None)`: the MLP neuron chips are coloured by (of `layer`).
- `prompt_changed(str)`: the prompt text to run (the editor and e.g. generation set it).
- `activations_changed(int)`: MLP activations of that layer arrived from the worker
  (`layer_activations` has them now).
- `token_overlay_changed()`: the shown view that colours the tokens (the routes' token shares,
  the rollout's query row) set or cleared `token_overlay`.
- `patching_changed()`: `patching` (the corrupted prompt, the metric, the direction, what is
  patched: viewer/patch_setup.py) or `corrupted_tokens` changed.

`saes` (viewer/sae_state.py) holds the attached sparse autoencoders and the selected feature; a
feature clamp is part of `intervention` like the head mask (`set_clamps`), and emits
`mask_changed` as a head toggle does: every run under it is asked for the same way.

`query` is None for "the last token"; `query_index` resolves it against the current trace.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QObject, Signal

from transformer_viewer.model.capture.interventions import Intervention
from transformer_viewer.viewer.patch_setup import PatchSetup, differing
from transformer_viewer.viewer.sae_state import SaeState
from transformer_viewer.viewer.worker.requests import ModelInfo

__all__ = ["ModelInfo", "ViewerState"]


class ViewerState(QObject):
    model_changed = Signal(object)
    trace_changed = Signal(object)
    clean_trace_changed = Signal(object)
    selection_changed = Signal()
    mask_changed = Signal(object)
    neuron_changed = Signal(object)
    prompt_changed = Signal(object)  # str; `object` passes a long prompt without UTF-16 round trips
    activations_changed = Signal(int)
    token_overlay_changed = Signal()
    patching_changed = Signal()

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.model_info: ModelInfo | None = None
        self.trace = None  # Trace drawn by the views (under the mask and clamps when set)
        self.clean_trace = None  # Trace without any intervention, the baseline
        self.prompt = ""
        self.layer = 0
        self.head = 0
        self.query: int | None = None
        self.intervention = Intervention.none(self)  # what the runs change; checked where it is made
        self.neuron: int | None = None
        self._tokenizer = None  # (spec, tokenizer) of the model last asked about
        self._activations: dict[tuple[int, int], np.ndarray] = {}  # (run_id, layer) -> (T, n_mlp)
        # (values (T,), legend, owner): what the token strip colours by while a view showing it is up
        self.token_overlay: tuple[np.ndarray, str, object] | None = None
        self.patching = PatchSetup()  # the activation-patching experiment the patching view runs
        self.corrupted_tokens = None  # Tokenized of the corrupted prompt, for the strips and their diff
        self.saes = SaeState(self)  # the attached SAEs, the selected feature, their labels

    # -- derived --------------------------------------------------------------------------
    @property
    def mask(self) -> np.ndarray:
        """The (L, nh) head mask, read-only: a change goes through set_mask."""
        return self.intervention.mask

    @property
    def ablation(self) -> str:
        return self.intervention.ablation

    @property
    def clamps(self) -> tuple:
        """The feature clamps (FeatureClamp values) the runs apply, read-only: see set_clamps."""
        return self.intervention.clamps

    @property
    def n_layer(self) -> int:
        return self.model_info.n_layer if self.model_info else 1

    @property
    def n_head(self) -> int:
        return self.model_info.n_head if self.model_info else 1

    @property
    def n_tokens(self) -> int:
        return self.trace.n_tokens if self.trace is not None else 0

    @property
    def query_index(self) -> int | None:
        """The selected query position resolved against the trace (None without a trace)."""
        T = self.n_tokens
        if T == 0:
            return None
        return T - 1 if self.query is None else min(self.query, T - 1)

    @property
    def is_masked(self) -> bool:
        return bool(self.mask.any())

    def layer_activations(self, trace, layer: int) -> np.ndarray | None:
        """(T, n_mlp) MLP post-activations of `layer` in `trace`'s run: the trace's own when it
        kept them, else what the worker sent (None: not fetched yet; the MLP view asks for them)."""
        if trace is None:
            return None
        if trace.mlp_post is not None:
            return trace.mlp_post[layer]
        return self._activations.get((trace.run_id, layer))

    def tokenizer(self):
        """The loaded model's tokenizer, for labelling token ids. The worker has just loaded it
        from the same files, so this is its cached object; kept per model, never re-read."""
        from transformer_viewer.model.tokenizers.tokenizer_loading import load_tokenizer  # no torch

        spec = self.model_info.tokenizer if self.model_info else "gpt2"
        if self._tokenizer is None or self._tokenizer[0] != spec:
            self._tokenizer = (spec, load_tokenizer(spec))
        return self._tokenizer[1]

    # -- setters --------------------------------------------------------------------------
    def set_model(self, info: ModelInfo | None) -> None:
        """A new model (or the same one on another device). Resets what no longer fits."""
        old = self.model_info
        self.model_info = info
        self._tokenizer = None  # looked up again: the worker's load may have replaced a dropped one
        same_shape = old is not None and info is not None and (old.n_layer, old.n_head) == (info.n_layer, info.n_head)
        if not same_shape or old.source != info.source:
            self.trace = None
            self.clean_trace = None
            self._activations = {}
            self.intervention = Intervention.make(self, None, self.ablation)
            self.neuron = None
            self.layer = min(self.layer, self.n_layer - 1)
            self.head = min(self.head, self.n_head - 1)
            self.query = None
            # Token ids and layers name another vocabulary and depth in another model.
            self.patching = self.patching.changed(tokens=(), layer=0, receiver=(0, 0))
            self.corrupted_tokens = None
        self.model_changed.emit(info)
        if not same_shape or old.source != info.source:
            self.patching_changed.emit()

    def set_prompt(self, text: str) -> None:
        if text != self.prompt:
            self.prompt = text
            self.prompt_changed.emit(text)

    def set_traces(self, trace, clean) -> None:
        """Install a worker result: `trace` under the current mask and `clean` without one."""
        if clean is not None and clean is not self.clean_trace:
            self.clean_trace = clean
            if self.query is not None and self.query >= clean.n_tokens:
                self.query = None
            self.clean_trace_changed.emit(clean)
        if trace is not self.trace:
            self.trace = trace
            if self._activations:  # the runs' activations no trace shows any more are let go
                runs = self._run_ids()
                self._activations = {k: v for k, v in self._activations.items() if k[0] in runs}
            self.trace_changed.emit(trace)

    def set_layer_activations(self, layer: int, acts: dict) -> None:
        """Keep the worker's activations of `layer` ({run_id: (T, n_mlp)}) for the current traces
        only: one layer's worth for the masked and the clean run at most."""
        runs = self._run_ids()
        self._activations = {k: v for k, v in self._activations.items() if k[0] in runs and k[1] == layer}
        self._activations.update({(r, layer): a for r, a in acts.items() if r in runs})
        self.activations_changed.emit(int(layer))

    def _run_ids(self) -> set[int]:
        return {t.run_id for t in (self.trace, self.clean_trace) if t is not None}

    def set_selection(self, layer: int | None = None, head: int | None = None, query: int | None = None,
                      *, clear_query: bool = False) -> None:
        """Change any of layer, head, query (None leaves it); `clear_query=True` selects the last token."""
        new_layer = self.layer if layer is None else max(0, min(int(layer), self.n_layer - 1))
        new_head = self.head if head is None else max(0, min(int(head), self.n_head - 1))
        new_query = self.query
        if clear_query:
            new_query = None
        elif query is not None:
            T = self.n_tokens
            q = int(query)
            new_query = None if T and q >= T - 1 else max(0, q)
        if (new_layer, new_head, new_query) == (self.layer, self.head, self.query):
            return
        self.layer, self.head, self.query = new_layer, new_head, new_query
        self.selection_changed.emit()

    def set_mask(self, mask) -> None:
        """Mask these heads (L, nh); a mask of another shape is refused (ModelError). The
        feature clamps stay."""
        self.set_intervention(self._made(mask, self.ablation, self.clamps))

    def toggle_head(self, layer: int, head: int) -> None:
        mask = self.mask.copy()
        mask[layer, head] = not mask[layer, head]
        self.set_mask(mask)

    def set_ablation(self, ablation: str) -> None:
        """Ablate masked heads this way (one of interventions.ABLATIONS; others: ModelError)."""
        self.set_intervention(self._made(self.mask, ablation, self.clamps))

    def set_clamps(self, clamps) -> None:
        """Clamp these SAE features (FeatureClamp values, model/sae/); the head mask stays."""
        self.set_intervention(self._made(self.mask, self.ablation, tuple(clamps)))

    def _made(self, mask, ablation: str, clamps: tuple) -> Intervention:
        """The Intervention of this mask, ablation and clamps, keeping any activation patches."""
        kept = {"clamps": clamps} if clamps else {}
        patches = getattr(self.intervention, "patches", ())
        if patches:
            kept["patches"] = patches
        return Intervention.make(self, mask, ablation, **kept)

    def set_intervention(self, intervention: Intervention) -> None:
        """What the runs change, made (and checked) elsewhere for this model's shape."""
        if intervention != self.intervention:
            self.intervention = intervention
            self.mask_changed.emit(self.mask)

    def set_token_overlay(self, values, legend: str = "", owner=None) -> None:
        """Colour the tokens by `values` (T,) >= 0, described by `legend`, for `owner` (the view
        that set it); None clears it, but only `owner`'s own overlay (or any, without an owner)."""
        if values is None:
            if self.token_overlay is None or (owner is not None and self.token_overlay[2] is not owner):
                return
            self.token_overlay = None
        else:
            self.token_overlay = (np.asarray(values, dtype=np.float32), legend, owner)
        self.token_overlay_changed.emit()

    def set_patching(self, **changes) -> None:
        """Change fields of the patching setup (PatchSetup's names); a bad value: ModelError."""
        new = self.patching.changed(**changes)
        if new != self.patching:
            self.patching = new
            self.patching_changed.emit()

    def set_corrupted_tokens(self, tokens) -> None:
        """The corrupted prompt as the loaded model's tokenizer splits it (a Tokenized), or None."""
        if tokens != self.corrupted_tokens:
            self.corrupted_tokens = tokens
            self.patching_changed.emit()

    def patch_differences(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Which clean (trace) and corrupted tokens differ, (T,) and (T',) bool; None while there
        is no comparison to draw."""
        if not self.patching.comparing or self.trace is None or self.corrupted_tokens is None:
            return None
        return differing(self.trace.token_ids, self.corrupted_tokens.ids)

    def set_neuron(self, neuron: int | None) -> None:
        neuron = None if neuron is None else int(neuron)
        if neuron != self.neuron:
            self.neuron = neuron
            self.neuron_changed.emit(neuron)
