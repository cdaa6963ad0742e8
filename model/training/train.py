"""Training loop for small models on plain text: AdamW, warm-up then cosine decay, periodic
evaluation on held-out text, atomic checkpoints with the training record in their metadata.

Reproducible on the CPU: batches come from a seeded generator, so the same data, seed and
flags give the same loss curve.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import torch
from safetensors.torch import save

from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint, save_checkpoint
from transformer_viewer.model.checkpoints.formats import native
from transformer_viewer.model.checkpoints.formats.schema import check_resumable, check_training
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.decoder.gpt import GPT
from transformer_viewer.model.errors import CheckpointError, ModelError
from transformer_viewer.model.training.data import Corpus, unigram_loss
from transformer_viewer.model.training.train_batches import repeat_passages


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 2000
    batch_size: int = 16
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup: int = 100
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_every: int = 200
    eval_batches: int = 20
    seed: int = 1337
    save_dtype: str = "float32"  # "float16" / "bfloat16" to ship a small file
    active_vocab: bool = True  # train the output layer only on tokens the data contains
    pos_init: str = "normal"  # "sinusoidal": learned positions start from a scaled sin/cos table
    pos_init_std: float = 0.1  # std of that table (pos_init="sinusoidal" only)
    embed_init_std: float = 0.02  # std of the token embedding at the start (GPT-2: 0.02)
    freeze_unseen: bool = False  # the first active-vocab version: unseen rows pinned at zero
    repeat_fraction: float = 0.0  # training windows that repeat a passage of themselves (train_batches.py)


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C during training, after the model so far was saved; `record` is what was saved."""

    def __init__(self, record: dict):
        super().__init__("training interrupted; the model so far was saved")
        self.record = record


def lr_at(step: int, tc: TrainConfig) -> float:
    if step < tc.warmup:
        return tc.lr * (step + 1) / tc.warmup
    progress = min(1.0, (step - tc.warmup) / max(1, tc.steps - tc.warmup))
    floor = tc.lr * tc.min_lr_ratio
    return floor + 0.5 * (tc.lr - floor) * (1.0 + math.cos(math.pi * progress))


def batch(data: np.ndarray, block: int, n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    starts = torch.randint(0, len(data) - block - 1, (n,), generator=gen).numpy()
    x = np.stack([data[s : s + block] for s in starts]).astype(np.int64)  # (B, T)
    y = np.stack([data[s + 1 : s + 1 + block] for s in starts]).astype(np.int64)  # (B, T)
    return torch.from_numpy(x), torch.from_numpy(y)


@torch.no_grad()
def evaluate(model: GPT, data: np.ndarray, tc: TrainConfig, device) -> float:
    """Mean loss on a fixed set of batches (the same every call, so curves are comparable)."""
    model.eval()
    gen = torch.Generator().manual_seed(tc.seed + 1)
    block = model.config.block_size
    losses = []
    for _ in range(tc.eval_batches):
        x, y = batch(data, block, tc.batch_size, gen)
        losses.append(model(x.to(device), y.to(device))[1].item())
    model.train()
    return float(np.mean(losses))


class ActiveVocabLoss:
    """Exact full-vocabulary cross-entropy, and its exact gradient, at a fraction of the cost,
    for tied models.

    Tokens that never occur in the training data never appear as inputs, so their embedding
    rows get gradient only through the softmax, and rows that start equal get the same gradient
    at every step and stay equal (AdamW is elementwise). So they are set equal (to zero) once,
    and the n_unseen identical logits h.u collapse into one logit h.u + log(n_unseen). The head
    multiplies only by the rows of seen tokens (a third of GPT-2's vocabulary on our corpus) and
    by u, the mean of the unseen rows: its gradient hands each unseen row its 1/n share, exactly
    what the full loss gives it. Loss, gradients and therefore training equal full-vocabulary
    training from that initialisation; evaluation runs the full model to show it.

    `freeze_unseen=True` is the first version: the unseen rows stay at zero for good (their
    logit a constant log(n_unseen)). The loss is still the full model's, but the model is
    constrained: it can only out-weigh 30k zero logits by growing a component shared by every
    seen embedding, which the tied input embeddings then carry too.

    `zero_unseen=False` (a resumed or pre-trained model) changes no weight: only unseen rows
    that are already equal to each other (zero, when frozen) are collapsed; any other row stays
    active, so no learned embedding is wiped and the loss is still exact.
    """

    def __init__(self, model: GPT, train: np.ndarray, zero_unseen: bool = True, freeze_unseen: bool = False):
        V = model.config.vocab_size
        seen = np.zeros(V, dtype=bool)
        seen[np.unique(train)] = True
        unseen = np.flatnonzero(~seen)
        wte = model.wte.weight
        with torch.no_grad():
            if zero_unseen:
                wte[torch.from_numpy(unseen).to(wte.device)] = 0.0
            rows = wte.detach()[torch.from_numpy(unseen).to(wte.device)]  # (n_unseen, C)
            ref = torch.zeros_like(rows[:1]) if freeze_unseen or not len(rows) else rows[:1]
            same = (rows == ref).all(dim=1).cpu().numpy()  # (n_unseen,)
        active = np.ones(V, dtype=bool)
        active[unseen[same]] = False
        self.freeze_unseen = freeze_unseen
        self.active = torch.from_numpy(np.flatnonzero(active))
        self.inactive = torch.from_numpy(np.flatnonzero(~active))
        self.remap = torch.full((V,), -1, dtype=torch.long)
        self.remap[self.active] = torch.arange(len(self.active))
        n_unseen = len(self.inactive)
        self.unseen_logit = math.log(n_unseen) if n_unseen else float("-inf")

    def __call__(self, model: GPT, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = model.hook_final(model.ln_f(model.run_blocks(model.embed(x))))  # (B, T, C)
        w = model.lm_head.weight[self.active.to(h.device)]  # (S, C)
        logits = h @ w.T  # (B, T, S)
        rest = torch.full((*logits.shape[:2], 1), self.unseen_logit, device=h.device, dtype=logits.dtype)
        if not self.freeze_unseen and len(self.inactive):
            u = model.lm_head.weight[self.inactive.to(h.device)].mean(dim=0)  # (C,), every unseen row
            rest = rest + (h @ u).unsqueeze(-1)  # (B, T, 1)
        logits = torch.cat([logits, rest], dim=-1)  # (B, T, S + 1)
        target = self.remap.to(y.device)[y]  # a target is always seen: it comes from the training data
        return torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), target.view(-1))


def init_positions_sinusoidal(model: GPT, std: float = 0.1) -> None:
    """Start learned positions from the sin/cos table, scaled to `std`.

    With GPT-2's N(0, 0.02) start, a small model on a few million tokens leaves its position
    rows near their random start (they end at std ~0.02 beside token rows of ~0.14), and no
    head learns to attend by relative position. The sin/cos table makes "the previous token" a
    fixed linear map of the position code from the first step; the rows stay trainable.
    """
    if model.wpe is None:
        return
    from transformer_viewer.model.decoder.gpt import sinusoidal_positions

    table = sinusoidal_positions(model.config.block_size, model.config.n_embd)  # (block_size, C)
    with torch.no_grad():
        model.wpe.weight.copy_(table * (std / table.std()))


def init_token_embedding(model: GPT, std: float) -> None:
    """Draw the token embedding (and so the tied head) from N(0, std^2).

    GPT-2's 0.02 leaves token rows far smaller than a sin/cos position table of std 0.1-0.2,
    and after ln_1 the first layers then see mostly position: the loss sits near the unigram
    for hundreds of steps. Token and position rows of the same size (0.15 both, for the
    bundled model) learn as fast as GPT-2's start and let positional heads form early.
    """
    with torch.no_grad():
        model.wte.weight.normal_(0.0, std)


def make_optimizer(model: GPT, tc: TrainConfig) -> torch.optim.AdamW:
    params = {id(p): p for p in model.parameters()}.values()
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": tc.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=tc.lr, betas=(0.9, 0.95), eps=1e-8)


def _optim_path(out: str) -> str:
    return out + ".optim"


def save_state(model, opt, out, record, tc: TrainConfig, final_dtype=None) -> None:
    save_checkpoint(model, out, training=record, dtype=final_dtype)
    # Optimizer moments go beside the checkpoint, only so --resume continues exactly. Their
    # step is checked on resume: a crash between the two writes must not pair mismatched ones.
    tensors, meta = {}, {"step": str(record["steps"])}
    for i, p in enumerate(p for g in opt.param_groups for p in g["params"]):
        st = opt.state.get(p)
        if st:
            tensors[f"{i}.exp_avg"] = st["exp_avg"].contiguous()
            tensors[f"{i}.exp_avg_sq"] = st["exp_avg_sq"].contiguous()
            meta[f"{i}.step"] = str(float(st["step"]))
    native.write_checkpoint_bytes(_optim_path(out), save(tensors, metadata=meta))


def restore_optimizer(opt, out: str, step: int) -> bool:
    """Load the AdamW moments saved beside `out` at `step`; False (fresh moments) if there are
    none, they belong to another step, or the file is damaged (it is only an optimisation of
    the resume, so a bad one is set aside, never a reason to stop)."""
    path = _optim_path(out)
    if not os.path.exists(path):
        return False
    from transformer_viewer.model.checkpoints.formats import safetensors_file

    restored = {}
    try:
        meta = safetensors_file.read_metadata(path)
        if meta.get("step") != str(step):
            return False
        tensors = safetensors_file.read_tensors(path)
        for i, p in enumerate(p for g in opt.param_groups for p in g["params"]):
            if f"{i}.exp_avg" not in tensors:
                continue
            avg, sq, count = tensors[f"{i}.exp_avg"], tensors[f"{i}.exp_avg_sq"], float(meta[f"{i}.step"])
            if avg.shape != p.shape or sq.shape != p.shape or not (math.isfinite(count) and count >= 0):
                return False
            restored[p] = {"step": torch.tensor(count), "exp_avg": avg.to(p.device, p.dtype),
                           "exp_avg_sq": sq.to(p.device, p.dtype)}
    except (CheckpointError, OSError, KeyError, ValueError, RuntimeError):
        return False
    opt.state.update(restored)
    return True


def check_data(corpus: Corpus, block: int) -> None:
    """Each split must hold at least one window of block_size + 1 tokens (and one spare)."""
    need = block + 2
    for name, data in (("training", corpus.train), ("validation", corpus.val)):
        if len(data) < need:
            raise ModelError(f"the {name} split has {len(data)} tokens, fewer than block_size + 2 = {need}; "
                             f"give more text, a smaller --block-size or a larger --val-fraction")


def train(corpus: Corpus, config: GPTConfig, tc: TrainConfig, out: str, device="cpu", resume: bool = False,
          on_step: Callable[[dict], None] | None = None, argv: list[str] | None = None) -> dict:
    """Train and save to `out`; returns the training record. Ctrl-C (a KeyboardInterrupt, also
    one raised by `on_step`) saves and raises TrainingInterrupted, itself a KeyboardInterrupt."""
    torch.manual_seed(tc.seed)
    start_step, history, wall_before, before = 0, [], 0.0, {}
    if resume:
        if not os.path.exists(out):
            raise ModelError(f"{out}: no checkpoint to resume from; drop --resume to start a new run")
        loaded = load_checkpoint(out, device=device)
        model, config = loaded.model, loaded.config
        before = check_resumable(f"{out}: its training record", check_training(f"{out}: its training record",
                                                                                  loaded.training))
        start_step = int(before.get("steps", 0))
        history = list(before.get("history", []))
        wall_before = float(before.get("wall_time_s", 0.0))
    else:
        model = GPT(config).to(device)
        if tc.embed_init_std != 0.02:
            init_token_embedding(model, tc.embed_init_std)
        if tc.pos_init == "sinusoidal":
            init_positions_sinusoidal(model, tc.pos_init_std)
    check_data(corpus, config.block_size)
    model.train()
    opt = make_optimizer(model, tc)
    active_loss = (ActiveVocabLoss(model, corpus.train, zero_unseen=not resume, freeze_unseen=tc.freeze_unseen)
                   if tc.active_vocab and config.tie_embeddings and not config.logit_softcap else None)
    restored = restore_optimizer(opt, out, start_step) if resume else False
    # One generator per step index keeps the batch sequence identical across a resume.
    block = config.block_size
    t0 = time.perf_counter()
    record = {
        "data": list(corpus.files), "seed": tc.seed, "train_config": asdict(tc), "model_config": config.to_dict(),
        "train_tokens": int(len(corpus.train)), "val_tokens": int(len(corpus.val)),
        "unigram_val_loss": unigram_loss(corpus.train, corpus.val, config.vocab_size),
        "command": before.get("command") or argv or [],
    }
    if resume:
        # The first command stays the record of how the run began; each resume is added.
        record["resumed"] = [*before.get("resumed", []),
                             {"from_step": start_step, "optimizer_restored": restored, "command": argv or []}]
    step = start_step
    train_loss = float(before.get("final_train_loss", float("nan")))
    final_dtype = {"float32": None, "float16": torch.float16, "bfloat16": torch.bfloat16}[tc.save_dtype]

    def snapshot(final: bool):
        record.update(steps=step, history=history, final_train_loss=train_loss,
                      wall_time_s=round(wall_before + time.perf_counter() - t0, 1))
        if history:
            record["final_val_loss"] = history[-1]["val_loss"]
        save_state(model, opt, out, record, tc, final_dtype if final else None)

    try:
        while step < tc.steps:
            gen = torch.Generator().manual_seed(tc.seed * 1_000_003 + step)
            x, y = repeat_passages(*batch(corpus.train, block, tc.batch_size, gen), tc.repeat_fraction, gen)
            lr = lr_at(step, tc)
            for g in opt.param_groups:
                g["lr"] = lr
            ts = time.perf_counter()
            x, y = x.to(device), y.to(device)
            loss = active_loss(model, x, y) if active_loss else model(x, y)[1]
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
            opt.step()
            step += 1
            train_loss = loss.item()
            info = {"step": step, "loss": train_loss, "lr": lr, "tokens_per_s": x.numel() / (time.perf_counter() - ts)}
            if step % tc.eval_every == 0 or step == tc.steps:
                info["val_loss"] = evaluate(model, corpus.val, tc, device)
                history.append({"step": step, "train_loss": train_loss, "val_loss": info["val_loss"]})
                snapshot(final=False)
            if on_step:
                on_step(info)
    except KeyboardInterrupt:
        record["interrupted"] = True  # before the save, so the checkpoint says so too
        snapshot(final=False)
        raise TrainingInterrupted(record) from None
    snapshot(final=True)
    return record
