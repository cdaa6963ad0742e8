"""What a run changes, as one frozen value: `Intervention`.

A head mask, applied as hooks on `blocks.{l}.attn.hook_z`: each masked head's output is removed
(zero) or replaced by its mean over the prompt's positions (mean) before the output projection;
and feature clamps (`FeatureClamp`: a feature of an SAE the session holds set to a value or
scaled, at one position or all), which the session applies at the SAE's hook point
(model/capture/feature_clamps.py). `Intervention.make` is the one place a mask, an ablation and
clamps from outside are checked; everything that runs the model (capture, prediction, the lens, scans, attributions,
generation, the worker, the command line, exports) takes the value it returns, and every cache
of runs keys on it: two Interventions are equal when they change the run alike.

`patches` are activation patches (`Patch`), each naming where its value comes from: the source
run (the session's clean or corrupted prompt), the site, layer, head and positions; never a
tensor, so a key stays cheap and exact. `hooks()` cannot apply them (it has no source run):
`Session.predict_patched` runs an Intervention with patches, reading the sources from the runs
it caches. `clamps` are feature clamps (`FeatureClamp`) of the sparse autoencoders a session
holds; the session applies them (`Session.intervention_hooks`).

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

# Where a patch writes, by site name: the hook point in a layer (None: outside the blocks) and
# what one "head" of it is (None: the site has no heads).
PATCH_SITES = {
    "embed": ("hook_embed", None),  # the token embedding (learned positions with it, where the model has them)
    "resid_pre": ("blocks.{layer}.hook_resid_pre", None),  # layer n_layer: the final resid_post
    "attn_out": ("blocks.{layer}.hook_attn_out", None),
    "mlp_out": ("blocks.{layer}.hook_mlp_out", None),
    "z": ("blocks.{layer}.attn.hook_z", "head"),
    "q": ("blocks.{layer}.attn.hook_q", "head"),
    "k": ("blocks.{layer}.attn.hook_k", "kv_head"),
    "v": ("blocks.{layer}.attn.hook_v", "kv_head"),
    "pattern": ("blocks.{layer}.attn.hook_pattern", "head"),
}
PATCH_SOURCES = ("clean", "corrupted")


@dataclass(frozen=True)
class Patch:
    """One activation patch: `site` (one of PATCH_SITES) of `layer` (0 for the embedding;
    n_layer with "resid_pre" is the final resid_post), one `head` (a key/value head for k and
    v: it serves its whole group of query heads) or all (None), at `positions` (sorted, distinct)
    or all (None), its value read from the `source` run at the same site.

    Positions index the run being patched; where the two prompts differ in length a patch over
    all positions lines the runs up at the metric's position (see model/analysis/patching)."""

    source: str  # one of PATCH_SOURCES
    site: str
    layer: int = 0
    head: int | None = None
    positions: tuple[int, ...] | None = None

    @property
    def target(self) -> str:
        """The run this patch is written into: the other one."""
        return PATCH_SOURCES[1 - PATCH_SOURCES.index(self.source)]

    def hook_name(self, n_layer: int) -> str:
        if self.site == "resid_pre" and self.layer == n_layer:
            return f"blocks.{n_layer - 1}.hook_resid_post"
        return PATCH_SITES[self.site][0].format(layer=self.layer)

    def describe(self) -> str:
        head = "" if self.head is None else f" head {self.head}"
        where = "" if self.positions is None else " at " + ",".join(map(str, self.positions))
        return f"{self.site} {self.layer}{head}{where} from {self.source}"


def check_patch(patch, config) -> Patch:
    """`patch` once known to fit a model of `config`'s shape (n_layer, n_head, kv heads,
    block_size); anything else raises ModelError saying what is wrong."""
    if not isinstance(patch, Patch):
        raise ModelError(f"a patch must be a Patch, got {type(patch).__name__}")
    if patch.source not in PATCH_SOURCES:
        raise ModelError(f"a patch's source must be one of {', '.join(PATCH_SOURCES)}, got {patch.source!r}")
    if patch.site not in PATCH_SITES:
        raise ModelError(f"a patch's site must be one of {', '.join(PATCH_SITES)}, got {patch.site!r}")
    L = config.n_layer
    top = L if patch.site == "resid_pre" else 0 if patch.site == "embed" else L - 1
    if not isinstance(patch.layer, int) or not 0 <= patch.layer <= top:
        raise ModelError(f"{patch.site} can be patched in layers 0..{top}, not {patch.layer!r}")
    heads = PATCH_SITES[patch.site][1]
    if patch.head is not None:
        n = {"head": config.n_head, "kv_head": getattr(config, "kv_heads", config.n_head), None: 0}[heads]
        if heads is None:
            raise ModelError(f"{patch.site} has no heads; patch it without one")
        if not isinstance(patch.head, int) or not 0 <= patch.head < n:
            kind = "key/value head" if heads == "kv_head" else "head"
            raise ModelError(f"{kind} {patch.head!r} does not exist; layer {patch.layer} has {kind}s 0..{n - 1}")
    if patch.positions is not None:
        pos = patch.positions
        if (not isinstance(pos, tuple) or not pos or any(not isinstance(p, int) for p in pos)
                or list(pos) != sorted(set(pos)) or pos[0] < 0 or pos[-1] >= config.block_size):
            raise ModelError(f"a patch's positions must be distinct sorted positions in 0..{config.block_size - 1}, "
                             f"or None for all; got {pos!r}")
    return patch


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
             patches=(), clamps=()) -> Intervention:
        """The intervention of `mask` (None: no head masked) under `ablation` for a model of
        `config`'s shape (anything with n_layer and n_head), with `patches` (Patch values, all
        from one source run) and feature `clamps`, once all are known to fit (whether each
        clamp's SAE and feature exist is the session's to say). `what` names the mask in the
        message."""
        if ablation not in ABLATIONS:
            raise ModelError(f"ablation must be one of {', '.join(ABLATIONS)}, got {ablation!r}")
        if mask is None:
            mask = np.zeros((config.n_layer, config.n_head), dtype=bool)
        else:
            mask = np.array(mask, dtype=bool)  # a copy: the caller's array may change later
            _check_shape(mask, config, what)
        mask.setflags(write=False)
        patches = tuple(check_patch(p, config) for p in patches)
        if len({p.source for p in patches}) > 1:
            raise ModelError("the patches of one run must all come from one source run (clean or corrupted)")
        return cls(mask, ablation, patches, _checked_clamps(clamps, config), _token=_MADE)

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
        if self.patches:
            parts.append("patched " + "; ".join(p.describe() for p in self.patches))
        if self.clamps:
            parts.append(f"clamp{'s' if len(self.clamps) != 1 else ''} " + ", ".join(c.describe() for c in self.clamps))
        return "; ".join(parts)

    def with_patches(self, patches) -> Intervention:
        """This head mask and clamps with `patches` (checked Patch values) instead of its own."""
        return Intervention(self.mask, self.ablation, tuple(patches), self.clamps, _token=_MADE)

    def first_changed_layer(self, other: Intervention) -> int:
        """The first layer whose head mask computation differs between `other` and this (n_layer
        if none); where clamps differ too, the session says from which layer (it holds their SAEs)."""
        L = self.mask.shape[0]
        if self.patches != other.patches:
            return 0  # a patch's source run may differ at every layer
        for layer in range(L):
            if not np.array_equal(other.mask[layer], self.mask[layer]):
                return layer
            if other.ablation != self.ablation and self.mask[layer].any():
                return layer
        return L

    def hooks(self, start_layer: int = 0) -> list[tuple[str, object]]:
        """(hook name, hook) pairs that apply the head mask to layers >= start_layer, in every
        batch element alike. Patches need their source run (`Session.predict_patched` runs
        them) and clamps their SAEs (`Session.intervention_hooks`), which the session holds."""
        if self.patches:
            raise ModelError("an intervention with patches runs through Session.predict_patched, "
                             "which holds the runs the patches read from")
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
