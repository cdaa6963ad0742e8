"""How far two float32 computations of the same model may differ, derived from float32
arithmetic rather than from one CPU's kernels.

Why a rule and not a number. Our decoder and the reference implementation (Hugging Face,
TransformerLens, nanoGPT) do the same arithmetic, but their GEMMs add the K products of each
dot product in different orders: MKL picks AVX2 or AVX-512 kernels by CPU, oneDNN blocks
differently again, and the thread count splits the sums. Each order rounds differently. A
bound measured on one machine (1e-5 held on an AMD EPYC) fails on another (1.3e-5 on an Intel
Xeon with AVX-512) while nothing is wrong. So every parity tolerance is computed as

    atol = SAFETY * eps32 * sqrt(reduction) * sqrt(depth) * scale

- ``eps32`` (2**-23, about 1.2e-7): float32's relative rounding step.
- ``sqrt(reduction)``: a dot product of K terms summed in another order differs by about
  eps32 * sqrt(K) relative to the size of its terms; the rounding errors have random signs and
  add like a random walk (the worst case, K * eps32, is never approached by real kernels).
  ``reduction`` is the longest sum in the path: ``max(n_embd, n_mlp)`` for a decoder block
  (attention's own sums over positions and head sizes are shorter); see `model_reduction`.
- ``sqrt(depth)``: each layer adds its own independent rounding to the residual stream, which
  every later layer carries; ``depth`` is how many blocks a value has gone through (layer
  ``l``'s attention pattern: ``l + 1``; the final logits: ``n_layer + 1``).
- ``scale``: the magnitude of the compared values (1 for probabilities, the reference's largest
  absolute value for the residual stream or logits), since the errors are relative.
- ``SAFETY`` = 4: measured differences on GPT-2-small shapes sit at 0.25-1x the rule without
  it (AVX2, AVX-512, oneDNN, 1 or 2 threads); 4 leaves room for other CPUs while a real error
  still fails: an exact-erf GELU in place of GPT-2's tanh GELU moves patterns by 2e-4 to 1e-3,
  5-10x over the bound (tests/model/decoder/test_parity_hf.py shows it).

Use `float32_atol` for a bound and `assert_float32_close` to compare arrays or tensors with one.
"""

from __future__ import annotations

import math

import numpy as np

F32_EPS = float(np.finfo(np.float32).eps)
SAFETY = 4.0


def float32_atol(reduction: int, depth: int = 1, scale: float = 1.0, safety: float = SAFETY) -> float:
    """Absolute tolerance for two float32 results whose longest sum has `reduction` terms,
    after `depth` layers, for values of magnitude `scale` (see the module docstring)."""
    if reduction < 1 or depth < 1:
        raise ValueError(f"reduction and depth must be >= 1, got {reduction} and {depth}")
    return safety * F32_EPS * math.sqrt(reduction) * math.sqrt(depth) * max(float(scale), 1e-30)


def model_reduction(config) -> int:
    """The longest dot product in a decoder block: the residual width or the MLP's hidden width
    (GPTConfig or a Hugging Face config; MLP width 4 * n_embd when the config leaves it unset)."""
    n_embd = getattr(config, "n_embd", None) or config.hidden_size
    n_mlp = getattr(config, "n_mlp", None) or getattr(config, "n_inner", None) \
        or getattr(config, "intermediate_size", None) or 4 * n_embd
    return max(int(n_embd), int(n_mlp))


def _numpy(x) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def assert_float32_close(actual, expected, *, reduction: int, depth: int = 1, scale: float | None = None,
                         what: str = "") -> float:
    """Assert |actual - expected| <= float32_atol(...) everywhere; `scale` defaults to the largest
    |expected| (at least 1). Returns the largest difference seen, for tests that report it."""
    a, e = _numpy(actual), _numpy(expected)
    assert a.shape == e.shape, f"{what}: shapes differ, {a.shape} vs {e.shape}"
    if scale is None:
        scale = max(1.0, float(np.abs(e).max(initial=0.0)))
    atol = float32_atol(reduction, depth, scale)
    diff = float(np.abs(a - e).max(initial=0.0))
    assert diff <= atol, (f"{what}: differs by {diff:.3g}, over the float32 bound {atol:.3g} "
                          f"(reduction {reduction}, depth {depth}, scale {scale:.3g})")
    return diff


def assert_probs_close(actual, expected, *, logit_scale: float, reduction: int, depth: int = 1,
                       what: str = "") -> None:
    """Assert two float32 probability vectors p = exp(logit - logsumexp) agree to the rule.

    A log-probability moves by at most twice its logits' largest error (its logit's and the
    normaliser's), `float32_atol(reduction, depth, logit_scale)` each, with `logit_scale` the
    largest |logit| (`largest_logit`); so each probability moves by that much relative to
    itself, whatever its size (probabilities near zero stay comparable, unlike under an
    absolute bound of probability 1's scale)."""
    a, e = _numpy(actual), _numpy(expected)
    assert a.shape == e.shape, f"{what}: shapes differ, {a.shape} vs {e.shape}"
    rtol = float32_atol(reduction, depth, 2 * logit_scale)
    np.testing.assert_allclose(a, e, rtol=rtol, atol=float(np.finfo(np.float32).tiny), err_msg=what)


def largest_logit(model, token_ids) -> float:
    """The largest |logit| of a plain forward of `token_ids` (a 1-d sequence) through `model`:
    the size its logits' float32 errors scale with."""
    import torch

    with torch.no_grad():
        logits = model(torch.as_tensor(np.asarray(token_ids, dtype=np.int64))[None])[0]
    return float(logits.abs().max())
