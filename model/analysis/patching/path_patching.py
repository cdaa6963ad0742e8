"""Path patching: how much of the difference between the prompts one head passes to another
through one input, and through nothing else.

For a receiver head (layer R, head r) and one of its inputs (q, k or v), each sender head (layer
s < R, head h) is patched along the path sender -> receiver's input alone. In the patched run
(the corrupted run when denoising, the clean run when noising):

- the receiver's chosen input is computed from its own copy of the residual stream entering
  layer R, in which the sender's write is the source run's: that copy is the patched run's
  resid_pre of R plus the change in layer s's attention output when head h's output (hook_z) is
  the source run's and every other head's is the patched run's;
- every other path, the MLPs, the other heads, the receiver's other inputs, the other heads'
  inputs in layer R and between, keeps the patched run's values (the sender's change reaches
  nothing else);
- the receiver's output then flows forward: layer R and every layer after it are recomputed.

Feature clamps apply to both runs alike, as the head mask does: the senders' outputs and the
receiver's copy of its resid_pre are the clamped runs', and layers R.. are recomputed under the
clamps of those layers. A sender's path into the receiver is direct: its change does not pass
through a clamp's hook point between the two (a clamp's edit is a function of the run's own
activation there, which the path leaves as it was).

The grid is layers x heads of senders; `raw[s, h]` is the metric of that patched run. A sender in
layer R or above has no path into the receiver: its cell is the unpatched run's metric.

The reference is TransformerLens 4.3's direct path patching (`patching.get_act_patch_direct_path`:
the source head's clean-minus-corrupted write z W_O added at every position to the receiver's
own pre-ln1 copy of the residual, the rest of the forward run as usual). Ours computes the same
runs, and differs only where TransformerLens refuses:

- the sender's change is the change in its layer's attention output, so on blocks that normalise
  the attention output before the residual add (Gemma 2/3's sandwich norms, OLMo 2's post-norms)
  it goes through that norm with the other heads' outputs as they were; where a head's write is
  z W_O (every other family, and parallel blocks, whose attention output is added as it is) that
  is exactly TransformerLens's z W_O;
- on grouped-query and multi-query models a key/value head serves a group of query heads, and the
  receiver's k or v input is its key/value head's: patching it patches the keys or values that
  every query head of the group reads (the grid's note says which). TransformerLens refuses k and v
  on such models;
- noising (the corrupted run's sender values patched into the clean run) is the same construction
  with the runs' roles swapped.

Sender runs go as batches, sized to the memory budget; each starts from the patched run's cached
resid_pre of R and, as the metric reads one position, computes no position after it.
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
from transformer_viewer.model.capture.memory_budget import DEFAULT_MEMORY_BUDGET
from transformer_viewer.model.decoder.hooks import caching, hooks
from transformer_viewer.model.errors import ModelError, stop_if_cancelled
from transformer_viewer.model.kernels.attention_kernels import LARGEST_BLOCK

RECEIVER_INPUTS = ("q", "k", "v")
# Sender runs in one batch at most: past this a batch is no faster per run on a CPU.
MAX_BATCH = 64


def path_run_bytes(config, T: int) -> int:
    """Bytes one sender's run holds at once, in float32: its residual stream, its fork of the
    receiver's input, one block's activations and one block of attention rows."""
    C, nh = config.n_embd, config.n_head
    width = max(C, nh * config.head_size)
    return T * (4 * C + 8 * width + 3 * config.n_mlp) * 4 + 2 * nh * min(T, LARGEST_BLOCK) * T * 4


def path_batch(config, T: int, budget: int) -> int:
    """Sender runs per batch within half of `budget` (the other half: the two runs kept)."""
    return int(max(1, min(MAX_BATCH, budget // 2 // max(1, path_run_bytes(config, T)))))


def path_patch_grid(session, receiver: tuple[int, int], input: str, metric: PatchMetric,  # noqa: A002 (the issue's name)
                    direction: str = "denoise", intervention: Intervention | None = None, progress=None,
                    is_cancelled=None) -> PatchGrid:
    """Path patching of every sender head into `receiver` (layer, head)'s `input` (q, k or v)
    for the session's clean and corrupted prompts (of one length), under `intervention`'s head
    mask and feature clamps in both runs, read from the session's cache of patch sources; see
    the module docstring."""
    config = session.config
    change = as_intervention(config, intervention).with_patches(())
    receiver_slot(config, receiver, input)  # a bad receiver is refused before any run
    prompts = session.prompt_pair()
    if not prompts.same_length:
        raise ModelError(f"the prompts differ in length ({prompts.clean_tokens} and {prompts.corrupted_tokens} "
                         "tokens); path patching adds a sender's change at every position: make them tokenize alike")
    clean, corrupted = session._require_pair()
    pair = run_pair(clean, corrupted, metric, direction, change, "path patching")
    runs = session.patch_sources(change, sites=("z",)).runs
    source, patched = (runs["clean"], runs["corrupted"]) if direction == "denoise" else (runs["corrupted"], runs["clean"])
    with torch.inference_mode():
        return _path_grid(session.model, pair, receiver, input, metric, session_hooks(session, change),
                          session.n_vocab, session.memory_budget, source, patched,
                          metric.describe(session.tokenizer.label), progress, is_cancelled)


def receiver_slot(config, receiver: tuple[int, int], input: str) -> tuple[int, int, str]:  # noqa: A002
    """(layer, index into hook_{input}'s head axis, a note): the receiver's query head for q, its
    key/value head for k and v. Refuses a receiver or input this model does not have."""
    if input not in RECEIVER_INPUTS:
        raise ModelError(f"the receiver's input must be one of {', '.join(RECEIVER_INPUTS)}, got {input!r}")
    layer, head = (int(x) for x in receiver)
    L, nh, nkv = config.n_layer, config.n_head, config.kv_heads
    if not 0 <= layer < L:
        raise ModelError(f"receiver layer {layer} does not exist; the model has layers 0..{L - 1}")
    if not 0 <= head < nh:
        raise ModelError(f"receiver head {head} does not exist; layers have heads 0..{nh - 1}")
    if input == "q" or nkv == nh:
        return layer, head, ""
    group = nh // nkv
    g = head // group
    first, last = g * group, g * group + group - 1
    return layer, g, (f"head {layer}.{head} reads its {input} from key/value head {g}, shared by query heads "
                      f"{layer}.{first}-{layer}.{last}: the path patches the {input} of all {group}")


def path_patch_grid_of(model, clean_ids, corrupted_ids, receiver: tuple[int, int], input: str,  # noqa: A002
                       metric: PatchMetric, direction: str = "denoise", intervention: Intervention | None = None,
                       n_vocab: int | None = None, memory_budget: int = DEFAULT_MEMORY_BUDGET, progress=None,
                       is_cancelled=None) -> PatchGrid:
    """`path_patch_grid` for a model and two prompts' ids, (T,) or (1, T) each, of equal length,
    under `intervention`'s head mask (feature clamps need the session that holds their SAEs: an
    Intervention with clamps is refused). `progress(done, total)` counts sender runs; once `is_cancelled()` is true it raises
    `Cancelled` before the next batch."""
    config = model.config
    n_vocab = config.vocab_size if n_vocab is None else n_vocab
    receiver_slot(config, receiver, input)
    change = requested(config, intervention)
    run_hooks = mask_hooks(change)
    pair = run_pair(clean_ids, corrupted_ids, metric, direction, change, "path patching")
    z_names = [f"blocks.{s}.attn.hook_z" for s in range(int(receiver[0]))]
    with torch.no_grad():
        source = plain_run(model, pair.source, run_hooks, z_names)
        patched = plain_run(model, pair.patched, run_hooks, z_names)
        return _path_grid(model, pair, receiver, input, metric, run_hooks, n_vocab, memory_budget, source, patched,
                          metric.describe(), progress, is_cancelled)


def _path_grid(model, pair: RunPair, receiver, input: str, metric: PatchMetric, run_hooks: RunHooks,  # noqa: A002
               n_vocab: int, memory_budget: int, source, patched, metric_line: str, progress,
               is_cancelled) -> PatchGrid:
    """The grid from the two runs (`.resid`, every layer's resid_pre and the final resid_post;
    `.acts`, with every layer's hook_z below the receiver's), each (1, T, ...) with T >= T'."""
    config = model.config
    R, slot, note = receiver_slot(config, receiver, input)
    L, nh, p, keep = config.n_layer, config.n_head, pair.position, pair.clean.shape[1]
    z_names = [f"blocks.{s}.attn.hook_z" for s in range(R)]
    source_z = {n: source.acts[n][:, :keep] for n in z_names}  # (1, T', nh, hs) each
    patched_z = {n: patched.acts[n][:, :keep] for n in z_names}
    x = patched.resid[R][:, :keep]  # (1, T', C)
    clean_final = (source if pair.direction == "denoise" else patched).resid[L][:, :keep]
    clean_lp = clean_logprobs(model, clean_final, metric, p, n_vocab)
    source_m, patched_m = (float(metric(metric_logits(model, run.resid[L][:, :keep], p, n_vocab), clean_lp)[0])
                           for run in (source, patched))
    raw = np.full((L, nh), patched_m, dtype=np.float64)
    senders = [(s, h) for s in range(R) for h in range(nh)]
    batch = path_batch(config, keep, memory_budget)
    if progress is not None:
        progress(0, len(senders))
    for i in range(0, len(senders), batch):
        stop_if_cancelled(is_cancelled)
        chunk = senders[i: i + batch]
        forks = _receiver_inputs(model, chunk, source_z, patched_z, x, R, input, slot)
        values = _run_from_receiver(model, pair, x, R, input, slot, forks, run_hooks, metric, clean_lp, n_vocab)
        for (s, h), value in zip(chunk, values.tolist(), strict=True):
            raw[s, h] = value
        if progress is not None:
            progress(i + len(chunk), len(senders))
    clean_m, corrupted_m = (source_m, patched_m) if pair.direction == "denoise" else (patched_m, source_m)
    why = (f"path patching into {R}.{receiver[1]}'s {input}: each sender's output reaches that input alone; "
           f"senders in layer {R} and above have no path into it")
    return PatchGrid(what="path", direction=pair.direction, metric=metric_line, raw=raw.astype(np.float32),
                     clean=clean_m, corrupted=corrupted_m, row_axis="layer", col_axis="head",
                     rows=tuple(str(s) for s in range(L)), cols=tuple(str(h) for h in range(nh)),
                     note=why + (f"; {note}" if note else ""))


def _receiver_inputs(model, senders, source_z: dict, patched_z: dict, x: torch.Tensor, R: int,
                     input: str, slot: int) -> torch.Tensor:  # noqa: A002
    """The receiver's chosen input for each sender, (S, T, hs): computed by layer R's own
    projection from the receiver's copy of its resid_pre x (1, T, C), in which the sender's
    layer writes the attention output it has with that sender's output (hook_z) alone taken
    from the source run."""
    deltas = []
    for s, h in senders:
        block = model.blocks[s]
        z = patched_z[f"blocks.{s}.attn.hook_z"]  # (1, T, nh, hs)
        swapped = z.clone()
        swapped[:, :, h] = source_z[f"blocks.{s}.attn.hook_z"][:, :, h]
        both = torch.cat([swapped, z])  # (2, T, nh, hs): with the sender's source output, and as it was
        out = block.ln_post_attn(block.attn.c_proj(both.flatten(2)))  # (2, T, C)
        deltas.append(out[0] - out[1])
    forks = x + torch.stack(deltas)  # (S, T, C)
    block = model.blocks[R]
    name = f"blocks.{R}.attn.hook_{input}"
    with caching(model, [name]) as kept:
        block.attn.heads_qkv(block.ln_1(forks))
    return kept[name][:, :, slot]  # (S, T, hs)


def _run_from_receiver(model, pair: RunPair, x: torch.Tensor, R: int, input: str, slot: int,  # noqa: A002
                       forks: torch.Tensor, run_hooks: RunHooks, metric: PatchMetric, clean_lp, n_vocab: int):
    """The metric of each sender's run, (S,): layers R.. of the patched run with the receiver's
    input replaced by that sender's fork."""
    S = forks.shape[0]

    def patch(_module, _inputs, act):
        out = act.expand(S, *act.shape[1:]).clone()  # (S, T, n, hs); a new tensor, never an edit
        out[:, :, slot] = forks
        return out

    # The last layer computes the metric's row alone, unless a head's mean over positions needs them all.
    last_only = pair.causal and pair.position == x.shape[1] - 1
    # The clamps count positions from the end: the last layer may compute the last row alone.
    named = [(f"blocks.{R}.attn.hook_{input}", patch), *run_hooks(R, x.shape[1])]
    with hooks(model, named):
        final = model.run_blocks(x.expand(S, -1, -1), R, last_only=last_only)  # (S, T or 1, C)
    at = final.shape[1] - 1 if last_only else pair.position
    return metric(metric_logits(model, final, at, n_vocab), clean_lp)
