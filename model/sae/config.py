"""What an SAE is, as one frozen value: `SaeConfig`.

The names follow SAELens 6 (`architecture`, `d_in`, `d_sae`, `apply_b_dec_to_input`,
`normalize_activations`, `rescale_acts_by_decoder_norm`, `k`), with `hook` in the viewer's hook
names (`blocks.3.hook_resid_post`) and `processing`, the TransformerLens processing the model's
activations need before the SAE reads them (model/sae/processing.py).
"""

from __future__ import annotations

from dataclasses import dataclass

ARCHITECTURES = ("standard", "jumprelu", "topk", "gated")
# What each normalisation does to an activation before encoding (and undoes after decoding).
NORMALIZATIONS = {
    "none": "none",
    "constant_norm_rescale": "each token rescaled to norm sqrt(d_in)",
    "layer_norm": "each token centred and divided by its standard deviation",
    "expected_average_only_in": "the inputs scaled by one constant, folded into the weights at load",
}
CENTER_RESIDUAL = "center residual"  # TransformerLens's center_writing_weights on a LayerNorm model
FOLD_VALUE_BIASES = "fold value biases"  # TransformerLens's fold_value_biases: hook_z less b_V
PROCESSING_STEPS = (CENTER_RESIDUAL, FOLD_VALUE_BIASES)


@dataclass(frozen=True)
class SaeConfig:
    """One SAE's shape and arithmetic, read and checked by model/sae/loading.py."""

    architecture: str  # one of ARCHITECTURES
    d_in: int
    d_sae: int
    hook: str  # the viewer's hook point name, e.g. "blocks.3.hook_resid_post"
    k: int | None = None  # topk only: features kept per token
    apply_b_dec_to_input: bool = True
    normalize_activations: str = "none"  # a key of NORMALIZATIONS
    rescale_acts_by_decoder_norm: bool = False  # topk: pre-activations times each decoder row's norm
    model_name: str = ""  # the model the SAE was trained on, as its file says ("" unknown)
    context_size: int | None = None  # the longest context it was trained on (None unknown)
    processing: tuple[str, ...] = ()  # steps of PROCESSING_STEPS the hooked activation needs
    source: str = ""  # where it was read from
    dtype: str = "float32"  # the weights' dtype in the file (the module computes in float32)

    @property
    def n_params(self) -> int:
        """Numbers the module holds (encoder, decoder, their biases and any threshold or gate)."""
        extra = {"standard": 1, "topk": 1, "jumprelu": 2, "gated": 3}[self.architecture]
        return 2 * self.d_in * self.d_sae + extra * self.d_sae + self.d_in

    @property
    def n_bytes(self) -> int:
        """Bytes of the module in float32."""
        return 4 * self.n_params


def size_text(n: int) -> str:
    """Bytes for people: "3.8 GB", "12.0 MB"."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"
