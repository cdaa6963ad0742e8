"""Attribution patching: every cell of a patching grid estimated at once, to first order.

Patching one activation a of the patched run with the source run's value a' changes the metric
by about (a' - a) . d metric / d a, the gradient taken on the patched run: the corrupted run
when denoising (a' the clean value), the clean run when noising (a' the corrupted value). One
forward and one backward of the patched run give that gradient for every layer, position and
head, where the exact grid needs a patched run per cell. `PatchGrid.raw` holds the estimated
metric of each patched run (the patched run's metric plus the estimated change), so the grid
reads like the exact one and normalises alike; `estimate` is True and `note` says so.

Where a first-order estimate goes wrong: a patch that moves the run far (a whole residual stream,
an early layer's attention) or through a saturated softmax is underestimated or overestimated.
The kl metric is at its minimum, zero, on the clean run: its gradient there is zero, so in the
noising direction the estimate is zero everywhere (the note says so); and being quadratic near
it, a denoising patch that restores the clean run is estimated at about twice its exact change,
however close the prompts.

Memory. A backward through the whole model at once would keep every layer's attention
probabilities, n_head x T^2 each. This one goes layer by layer from the saved residual streams:
block l is run forward again with autograd recording from the patched run's resid_pre of l, and
its backward takes the gradient arriving at its output, so only one layer's attention is held
at a time. `estimate_bytes` says what that holds, and `max_estimate_tokens` how long a prompt
fits a memory budget (GPT-2-small's shape: about 3,500 tokens in the 4 GiB default; SmolLM2-135M's
30 layers x 9 heads: about 4,000).
"""

from __future__ import annotations

import numpy as np
import torch

from transformer_viewer.model.analysis.patching.grid import PatchGrid
from transformer_viewer.model.analysis.patching.metric import PatchMetric
from transformer_viewer.model.analysis.patching.run_pair import (
    RunHooks,
    RunPair,
    clean_logprobs,
    mask_hooks,
    metric_logits,
    plain_run,
    run_pair,
    session_hooks,
)
from transformer_viewer.model.capture.interventions import Intervention, as_intervention, requested
from transformer_viewer.model.capture.memory_budget import (
    DEFAULT_MEMORY_BUDGET,
    check_budget,
    max_tokens,
)
from transformer_viewer.model.decoder.hooks import caching, hooks
from transformer_viewer.model.errors import ModelError, stop_if_cancelled

# What attribution patching estimates. "heads-by-pos" is one layer's heads by position, as the
# exact grid has it, or every layer's heads at once (one backward gives them all).
ESTIMATE_HELP = {
    "resid": "the residual stream entering each layer and the final one, by layer x position",
    "attn": "each layer's attention output, by layer x position",
    "mlp": "each layer's MLP output, by layer x position",
    "heads": "each head's output (hook_z) over all positions, by layer x head",
    "heads-by-pos": "each head's output by position, for one layer or every layer's heads at once",
}
ESTIMATE_WHATS = tuple(ESTIMATE_HELP)

# The hook point whose activation each kind patches ("resid" reads the blocks' inputs directly),
# and its name among the session's patch sources.
_POINT = {"attn": "hook_attn_out", "mlp": "hook_mlp_out", "heads": "attn.hook_z", "heads-by-pos": "attn.hook_z"}
_SITE = {"attn": "attn_out", "mlp": "mlp_out", "heads": "z", "heads-by-pos": "z"}

# Shown under every estimated grid.
ESTIMATE_NOTE = ("attribution patching: a first-order estimate, (source - patched activation) . gradient "
                 "on the patched run, not exact patches; the head mask and feature clamps apply to both runs")
KL_NOISE_NOTE = ("; with the KL metric in the noising direction the gradient at the clean run is zero, "
                 "so the estimate is zero everywhere")


def estimate_bytes(config, T: int) -> int:
    """Bytes attribution patching of T tokens holds at its peak, in float32: both runs'
    residual streams, the source run's activations of one kind for every layer, and one block
    run with autograd recording plus its backward (the attention scores and probabilities and
    their gradients, about five (n_head, T, T) arrays, and the block's other activations)."""
    L, C, nh = config.n_layer, config.n_embd, config.n_head
    width = max(C, nh * config.head_size)
    resid = 2 * (L + 1) * T * C * 4
    source = L * T * width * 4
    attention = 5 * nh * T * T * 4
    block = 2 * T * (16 * width + 6 * config.n_mlp) * 4
    logits = 2 * config.vocab_size * 4
    return resid + source + attention + block + logits


def max_estimate_tokens(config, budget: int = DEFAULT_MEMORY_BUDGET) -> int:
    """The longest prompt attribution patching runs within `budget` bytes (0: not one token)."""
    return max_tokens(lambda t: estimate_bytes(config, t), budget, config.block_size)


def estimate_grid(session, what: str, metric: PatchMetric, direction: str = "denoise",
                  intervention: Intervention | None = None, layer: int | None = None, progress=None,
                  is_cancelled=None) -> PatchGrid:
    """The attribution-patching estimate of the grid of `what` (one of ESTIMATE_WHATS) for the
    session's clean and corrupted prompts (of one length), under `intervention`'s head mask and
    feature clamps in both runs (the gradient goes through the clamps' hooks). Both runs come from the session's cache of patch sources (`Session.patch_sources`,
    which the exact grid shares), so a grid costs one layer-by-layer backward; `estimate_grid_of`
    says what each grid holds."""
    config = session.config
    _check_what(config, what, layer)
    change = as_intervention(config, intervention).with_patches(())
    prompts = session.prompt_pair()
    if not prompts.same_length:
        raise ModelError(f"the prompts differ in length ({prompts.clean_tokens} and {prompts.corrupted_tokens} "
                         "tokens); attribution patching compares them position by position: make them tokenize "
                         "alike, or patch heads exactly")
    clean, corrupted = session._require_pair()
    pair = run_pair(clean, corrupted, metric, direction, change, "attribution patching")
    check_budget(lambda t: estimate_bytes(config, t), session.memory_budget, config.block_size, pair.clean.shape[1])
    runs = session.patch_sources(change, sites=(_SITE[what],) if what in _SITE else ()).runs
    source, patched = (runs["clean"], runs["corrupted"]) if direction == "denoise" else (runs["corrupted"], runs["clean"])
    labels = session.tokens.labels if direction == "noise" else session.corrupted.labels
    with torch.inference_mode(False):  # the backward needs tensors autograd may record
        est, clean_m, corrupted_m, patched_m = _estimate(session.model, pair, what, metric, session_hooks(session, change),
                                                         session.n_vocab, source, patched, progress, is_cancelled)
    return _grid(config, pair, what, metric.describe(session.tokenizer.label), metric.kind, est, clean_m,
                 corrupted_m, patched_m, tuple(f"{p} {labels[p]}" for p in range(pair.n_tokens)), layer)


def estimate_grid_of(model, clean_ids, corrupted_ids, what: str, metric: PatchMetric, direction: str = "denoise",
                     intervention: Intervention | None = None, layer: int | None = None, n_vocab: int | None = None,
                     memory_budget: int = DEFAULT_MEMORY_BUDGET, progress=None, is_cancelled=None) -> PatchGrid:
    """`estimate_grid` for a model and two prompts' ids, (T,) or (1, T) each, of equal length,
    without a session: both runs are made here, under `intervention`'s head mask (feature clamps
    need the session that holds their SAEs: an Intervention with clamps is refused).

    The grids, rows x columns: resid, (n_layer + 1) x T (the resid_pre of each layer, then the
    final resid_post); attn and mlp, n_layer x T; heads, n_layer x n_head (each head patched at
    every position at once); heads-by-pos, n_head x T for `layer` as the exact grid has it, or with
    layer None every layer's heads, (n_layer * n_head) x T, row l * n_head + h for head h of layer
    l (one backward gives them all). `progress(done, total)` hears of each layer's backward; once
    `is_cancelled()` is true it raises `Cancelled` before the next layer."""
    config = model.config
    _check_what(config, what, layer)
    n_vocab = config.vocab_size if n_vocab is None else n_vocab
    change = requested(config, intervention)
    run_hooks = mask_hooks(change)
    pair = run_pair(clean_ids, corrupted_ids, metric, direction, change, "attribution patching")
    check_budget(lambda t: estimate_bytes(config, t), memory_budget, config.block_size, pair.clean.shape[1])
    points = _points(config, what)
    with torch.inference_mode(False):  # the backward needs tensors autograd may record
        source = plain_run(model, pair.source, run_hooks, points)
        stop_if_cancelled(is_cancelled)
        patched = plain_run(model, pair.patched, run_hooks)
        est, clean_m, corrupted_m, patched_m = _estimate(model, pair, what, metric, run_hooks, n_vocab, source,
                                                         patched, progress, is_cancelled)
    return _grid(config, pair, what, metric.describe(), metric.kind, est, clean_m, corrupted_m, patched_m,
                 tuple(str(t) for t in range(pair.n_tokens)), layer)


def _check_what(config, what: str, layer: int | None) -> None:
    if what not in ESTIMATE_WHATS:
        raise ModelError(f"attribution patching estimates {', '.join(ESTIMATE_WHATS)}, not {what}: "
                         f"patch {what} exactly")
    if what == "heads-by-pos" and layer is not None and not 0 <= layer < config.n_layer:
        raise ModelError(f"layer {layer} does not exist; the model has layers 0..{config.n_layer - 1}")


def _points(config, what: str) -> list[str]:
    """The hook point of the activation `what` patches, in each layer ("resid": none, the
    blocks' inputs are the residual streams themselves)."""
    return [f"blocks.{layer}.{_POINT[what]}" for layer in range(config.n_layer)] if what in _POINT else []


def _estimate(model, pair: RunPair, what: str, metric: PatchMetric, run_hooks: RunHooks, n_vocab: int,
              source, patched, progress, is_cancelled):
    """The estimated change of the metric per cell, (rows, T') float64 (heads: (L, nh)), and
    the clean, corrupted and patched runs' metrics. `source` and `patched` are the two runs
    (`.resid`, every layer's resid_pre and the final resid_post; `.acts`, activations by hook
    name), each (1, T, ...) with T >= T'."""
    L, p, keep = model.config.n_layer, pair.position, pair.clean.shape[1]
    points = _points(model.config, what)
    source_resid = [r[:, :keep] for r in source.resid]  # (1, T', C) each
    patched_resid = [r[:, :keep] for r in patched.resid]
    source_acts = {name: source.acts[name][:, :keep] for name in points}
    clean_final = source_resid[L] if pair.direction == "denoise" else patched_resid[L]
    clean_lp = clean_logprobs(model, clean_final, metric, p, n_vocab)
    with torch.no_grad():
        source_m = float(metric(metric_logits(model, source_resid[L], p, n_vocab), clean_lp)[0])

    # The top: the metric's gradient at the final residual stream of the patched run.
    final = patched_resid[L].clone().requires_grad_()
    with torch.enable_grad():
        m = metric(metric_logits(model, final, p, n_vocab), clean_lp)
        (grad,) = torch.autograd.grad(m.sum(), final)  # (1, T', C)
    patched_m = float(m.detach()[0])
    rows = []  # one entry per layer from the top, reversed at the end
    final_row = _dot(source_resid[L] - patched_resid[L], grad) if what == "resid" else None
    if progress is not None:
        progress(0, L)

    for layer in reversed(range(L)):
        stop_if_cancelled(is_cancelled)
        x = patched_resid[layer].clone().requires_grad_()
        point = points[layer] if points else None
        # The activation after the head mask's and the clamps' hooks: the value the layer passes on.
        # A clamp at the block's output (an SAE of the next block's input) is in the output too.
        named = run_hooks(layer, keep)
        with torch.enable_grad(), hooks(model, named), caching(model, [point] if point else []) as kept:
            out = model.blocks[layer](x)  # (1, T', C)
            inputs = [x, kept[point]] if point else [x]
            grads = torch.autograd.grad(out, inputs, grad_outputs=grad)
        if what == "resid":
            rows.append(_dot(source_resid[layer] - patched_resid[layer], grads[0]))
        elif what in ("attn", "mlp"):
            rows.append(_dot(source_acts[point] - kept[point].detach(), grads[1]))
        else:  # hook_z, (1, T', nh, hs): per head and position
            per_pos = ((source_acts[point] - kept[point].detach()) * grads[1]).sum(-1)[0].T  # (nh, T')
            rows.append(per_pos.sum(-1, keepdim=True) if what == "heads" else per_pos)
        grad = grads[0]
        if progress is not None:
            progress(L - layer, L)

    rows.reverse()
    if what == "resid":
        rows.append(final_row)
    est = torch.cat([r.reshape(-1, r.shape[-1]) for r in rows]).double().cpu().numpy()  # (rows, T') or (L*nh, 1)
    if what == "heads":
        est = est.reshape(L, -1)  # (L, nh)
    clean_m, corrupted_m = (source_m, patched_m) if pair.direction == "denoise" else (patched_m, source_m)
    return est, clean_m, corrupted_m, patched_m


def _dot(diff: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """(1, T', C) . (1, T', C) over C -> (1, T')."""
    return (diff.to(grad.dtype) * grad).sum(-1)


def _grid(config, pair: RunPair, what: str, metric_line: str, metric_kind: str, est: np.ndarray, clean_m: float,
          corrupted_m: float, patched_m: float, positions: tuple[str, ...], layer: int | None) -> PatchGrid:
    L, nh, T = config.n_layer, config.n_head, pair.n_tokens
    shown = range(L) if layer is None else (layer,)  # heads-by-pos: the layers whose heads are rows
    if what == "heads-by-pos" and layer is not None:
        est = est[layer * nh: (layer + 1) * nh]
    if what == "heads":
        raw = patched_m + est
    else:
        # Positions the runs did not compute come after the metric's: patching them changes nothing.
        raw = np.full((est.shape[0], T), patched_m, dtype=np.float64)
        raw[:, : est.shape[1]] += est
    layers = tuple(str(layer) for layer in range(L))
    rows, cols, row_axis, col_axis = {
        "resid": ((*(f"{layer} resid_pre" for layer in range(L)), "final resid_post"), positions, "layer", "position"),
        "attn": (layers, positions, "layer", "position"),
        "mlp": (layers, positions, "layer", "position"),
        "heads": (layers, tuple(str(h) for h in range(nh)), "layer", "head"),
        "heads-by-pos": (tuple(f"{la}.{h}" for la in shown for h in range(nh)), positions, "head", "position"),
    }[what]
    note = ESTIMATE_NOTE + (KL_NOISE_NOTE if metric_kind == "kl" and pair.direction == "noise" else "")
    return PatchGrid(what=what, direction=pair.direction, metric=metric_line, raw=raw.astype(np.float32),
                     clean=clean_m, corrupted=corrupted_m, row_axis=row_axis, col_axis=col_axis, rows=rows,
                     cols=cols, estimate=True, note=note)
