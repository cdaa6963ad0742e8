"""What a run changes, as one frozen value: `Intervention`.

A head mask, applied as hooks on `blocks.{l}.attn.hook_z`: each masked head's output is removed
(zero) or replaced by its mean over the prompt's positions (mean) before the output projection;
and feature clamps (`FeatureClamp`: a feature of an SAE the session holds set to a value or
scaled, at one position or all), which the session applies at the SAE's hook point
(model/capture/feature_clamps.py). `Intervention.make` is the one place a mask, an ablation and
clamps from outside are checked; everything that runs the model (capture, prediction, the lens, scans, attributions,
generation, the worker, the command line, exports) takes the value it returns, and every cache
of runs keys on it: two Interventions are equal when they change the run alike.

Room for what comes next, compared like the mask: `patches` (activation patches, each naming
where its value comes from: source run, hook point, layer, head, positions; never a tensor, so
a key stays cheap and exact), reserved and empty: `make` does not take them until the runs
apply them.

Torch loads on first use: the window makes Interventions on the GUI thread, which never imports
torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from transformer_viewer.model.errors import ModelError

# The ablation kinds and what each does, listed here only: the window's buttons and the command
# line's --ablation read them from here.
ABLATION_HELP = {
    "zero": "a masked head writes nothing",
    "mean": "a masked head writes its mean output over the prompt's positions",
}
ABLATIONS = tuple(ABLATION_HELP)

_MADE = object()  # the token only `Intervention.make` passes

# The clamp kinds: "set" replaces the feature's activation by the value (0: the feature zeroed),
# "scale" multiplies it.
CLAMP_KINDS = ("set", "scale")
MAX_CLAMPS = 256  # clamps in one Intervention; each costs an encode at its hook point
MAX_CLAMP_VALUE = 1e6  # an activation's magnitude past any an SAE produces


@dataclass(frozen=True)
class FeatureClamp:
    """Feature `feature` of the session's SAE number `sae`, set to `value` ("set") or multiplied
    by it ("scale"), at token `position` (None: at every position). A value, compared and
    hashed as one: checked by `Intervention.make`, applied by the session that holds the SAE."""

    sae: int
    feature: int
    kind: str = "set"
    value: float = 0.0
    position: int | None = None

    def describe(self) -> str:
        """"3:1234=5" / "3:1234x0.5", with "@7" for one position (the command line's spelling)."""
        what = f"={self.value:g}" if self.kind == "set" else f"x{self.value:g}"
        return f"{self.sae}:{self.feature}{what}" + ("" if self.position is None else f"@{self.position}")


@dataclass(frozen=True, eq=False)  # compared and hashed by value below
class Intervention:
    """A head mask (n_layer, n_head) bool, read-only, and how masked heads are ablated.

    Made only by `Intervention.make` (or `none`), which checks it once; equal values hash
    alike, so caches of runs key on it."""

    mask: np.ndarray  # (L, nh) bool, read-only
    ablation: str  # one of ABLATIONS
    patches: tuple = ()  # reserved: activation patches, each naming its source
    clamps: tuple = ()  # FeatureClamps, applied in order
    _token: object = field(default=None, repr=False)

    def __post_init__(self):
        if self._token is not _MADE:
            raise TypeError("make an Intervention with Intervention.make(config, mask, ablation)")

    # -- making: the one check ----------------------------------------------------------------
    @classmethod
    def make(cls, config, mask=None, ablation: str = ABLATIONS[0], what: str = "head mask",
             clamps=()) -> Intervention:
        """The intervention of `mask` (None: no head masked) under `ablation` for a model of
        `config`'s shape (anything with n_layer and n_head), with feature `clamps`, once all
        are known to fit (whether each clamp's SAE and feature exist is the session's to say).
        `what` names the mask in the message."""
        if ablation not in ABLATIONS:
            raise ModelError(f"ablation must be one of {', '.join(ABLATIONS)}, got {ablation!r}")
        if mask is None:
            mask = np.zeros((config.n_layer, config.n_head), dtype=bool)
        else:
            mask = np.array(mask, dtype=bool)  # a copy: the caller's array may change later
            _check_shape(mask, config, what)
        mask.setflags(write=False)
        return cls(mask, ablation, clamps=_checked_clamps(clamps, config), _token=_MADE)

    @classmethod
    def none(cls, config) -> Intervention:
        """No change: the clean run of a model of `config`'s shape."""
        return cls.make(config)

    def with_head(self, layer: int, head: int) -> Intervention:
        """This with head `head` of layer `layer` masked too (a scan's run): derived from a
        checked value, so nothing is checked again."""
        mask = self.mask.copy()
        mask[layer, head] = True
        mask.setflags(write=False)
        return Intervention(mask, self.ablation, self.patches, self.clamps, _token=_MADE)

    def without_clamps(self) -> Intervention:
        """This head mask alone."""
        return Intervention(self.mask, self.ablation, self.patches, (), _token=_MADE)

    # -- equality: caches key on the value ------------------------------------------------------
    def _key(self) -> tuple:
        return (self.mask.shape, self.mask.tobytes(), self.ablation, self.patches, self.clamps)

    def __eq__(self, other) -> bool:
        return isinstance(other, Intervention) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    # -- reading ----------------------------------------------------------------------------
    @property
    def is_empty(self) -> bool:
        """True when the run is the clean one."""
        return not self.mask.any() and not self.patches and not self.clamps

    @property
    def n_masked(self) -> int:
        return int(np.count_nonzero(self.mask))

    def masked_heads(self) -> list[tuple[int, int]]:
        """(layer, head) of every masked head, layer by layer."""
        return [(int(la), int(h)) for la, h in zip(*self.mask.nonzero(), strict=True)]

    def describe(self) -> str:
        """One line for people: "heads 1.2, 3.0 (zero)", "clamps 0:12=0", or "no intervention"."""
        if self.is_empty:
            return "no intervention"
        parts = []
        if self.n_masked:
            heads = ", ".join(f"{la}.{h}" for la, h in self.masked_heads())
            parts.append(f"head{'s' if self.n_masked != 1 else ''} {heads} ({self.ablation})")
        if self.clamps:
            parts.append(f"clamp{'s' if len(self.clamps) != 1 else ''} " + ", ".join(c.describe() for c in self.clamps))
        return "; ".join(parts)

    def first_changed_layer(self, other: Intervention) -> int:
        """The first layer whose head mask computation differs between `other` and this (n_layer
        if none); where clamps differ too, the session says from which layer (it holds their SAEs)."""
        L = self.mask.shape[0]
        for layer in range(L):
            if not np.array_equal(other.mask[layer], self.mask[layer]):
                return layer
            if other.ablation != self.ablation and self.mask[layer].any():
                return layer
        return L

    def hooks(self, start_layer: int = 0) -> list[tuple[str, object]]:
        """(hook name, hook) pairs that apply the head mask to layers >= start_layer, in every
        batch element alike. Clamps need the SAEs, which the session holds: with clamps, ask
        `Session.intervention_hooks` instead."""
        if self.clamps:
            raise ModelError("an Intervention with feature clamps is applied by the session that holds their SAEs "
                             "(Session.intervention_hooks), not on its own")
        return head_mask_hooks(self.mask, self.ablation, start_layer)


def _check_shape(mask: np.ndarray, config, what: str) -> None:
    L, nh = config.n_layer, config.n_head
    if mask.shape != (L, nh):
        raise ModelError(f"{what} has shape {mask.shape}; this model needs ({L}, {nh})")


def _checked_clamps(clamps, config) -> tuple:
    clamps = tuple(clamps or ())
    if len(clamps) > MAX_CLAMPS:
        raise ModelError(f"{len(clamps)} feature clamps, more than the {MAX_CLAMPS} one run applies; clamp fewer")
    block = getattr(config, "block_size", None)
    for c in clamps:
        if not isinstance(c, FeatureClamp):
            raise ModelError(f"a feature clamp must be a FeatureClamp, got {type(c).__name__}")
        if not all(_index(v) for v in (c.sae, c.feature)):
            raise ModelError(f"clamp {c.sae!r}:{c.feature!r}: the SAE and the feature are numbers from 0")
        if c.kind not in CLAMP_KINDS:
            raise ModelError(f"a clamp's kind must be one of {', '.join(CLAMP_KINDS)}, got {str(c.kind)[:20]!r}")
        if (isinstance(c.value, bool) or not isinstance(c.value, (int, float)) or not math.isfinite(c.value)
                or abs(c.value) > MAX_CLAMP_VALUE):
            raise ModelError(f"clamp {c.sae}:{c.feature}: its value must be a number within ±{MAX_CLAMP_VALUE:g}, "
                             f"got {str(c.value)[:20]}")
        if c.position is not None and not (_index(c.position) and (block is None or c.position < block)):
            raise ModelError(f"clamp {c.sae}:{c.feature}: position {str(c.position)[:20]} is not a token position "
                             f"of this model's context (0..{(block or 1) - 1})")
    # Plain numbers, so that clamps made from NumPy values compare and hash as the same clamps.
    return tuple(FeatureClamp(int(c.sae), int(c.feature), c.kind, float(c.value),
                              None if c.position is None else int(c.position)) for c in clamps)


def _index(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 0


def head_mask_hooks(mask: np.ndarray, ablation: str, start_layer: int = 0) -> list[tuple[str, object]]:
    """(hook name, hook) pairs that apply a checked `mask` (L, nh) (an Intervention's, or a
    trace's) to layers >= start_layer, in every batch element alike."""
    return batched_head_mask_hooks(np.asarray(mask)[None], ablation, start_layer)


def batched_head_mask_hooks(masks: np.ndarray, ablation: str, start_layer: int = 0) -> list[tuple[str, object]]:
    """Like `head_mask_hooks` for a batch of runs: masks (B, L, nh), masks[b] applied to batch
    element b (a single mask, B = 1, to all), with the same arithmetic as a run of its own."""
    import torch  # on first use: see the module's docstring

    named = []
    for layer in range(start_layer, masks.shape[1]):
        rows = masks[:, layer]  # (B, nh)
        if rows.any():
            # A copy: the caller's mask may be read-only (a trace's) or change after this returns.
            named.append((f"blocks.{layer}.attn.hook_z", _ablate_rows(torch.tensor(rows), ablation)))
    return named


def _ablate_rows(masked, ablation: str):
    import torch  # on first use: see the module's docstring

    # A new tensor, never an edit of z: other hooks may hold it.
    def hook(_module, _inputs, z: torch.Tensor) -> torch.Tensor:
        m = masked.to(z.device)[:, None, :, None]  # (B, 1, nh, 1) against z's (B, T, nh, hs)
        if ablation == "zero":
            return torch.where(m, torch.zeros((), dtype=z.dtype, device=z.device), z)
        return torch.where(m, z.mean(dim=1, keepdim=True), z)  # each run's own mean over positions
    return hook


def as_intervention(config, intervention=None, ablation: str | None = None,
                    what: str = "head mask") -> Intervention:
    """The Intervention a caller passed, or one made by `Intervention.make` from a bare (L, nh)
    mask (or None) and `ablation` (default the first kind, zero). Kept so that scripts that pass
    `mask, ablation` still run; everything in the package passes Interventions."""
    if isinstance(intervention, Intervention):
        if ablation is not None and ablation != intervention.ablation:
            raise ModelError("pass the ablation inside the Intervention, not beside it")
        _check_shape(intervention.mask, config, what)  # made for another model?
        return intervention
    return Intervention.make(config, intervention, ABLATIONS[0] if ablation is None else ablation, what)


def requested(config, intervention=None, mask=None, ablation: str | None = None,
              what: str = "head mask") -> Intervention:
    """What an analysis was asked to run under: its `intervention=`, or the `mask=` and
    `ablation=` keywords kept for scripts, made into an Intervention by `Intervention.make`."""
    if intervention is not None and mask is not None:
        raise ValueError("pass an Intervention or a mask, not both")
    return as_intervention(config, intervention if intervention is not None else mask, ablation, what)
