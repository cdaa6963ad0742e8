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
from safetensors.torch import load_file, save_file

from transformer_viewer.model.checkpoint import load_checkpoint, save_checkpoint
from transformer_viewer.model.config import GPTConfig
from transformer_viewer.model.data import Corpus, unigram_loss
from transformer_viewer.model.gpt import GPT


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
    """Exact full-vocabulary cross-entropy at a fraction of the cost, for tied models.

    Tokens that never occur in the training data have their embedding rows set to zero, so
    their logits are exactly 0 and they get no gradient; their share of the softmax is then
    exactly n_unseen * e^0, one constant logit log(n_unseen). The head multiplies only by the
    rows of seen tokens (a third of GPT-2's vocabulary on our corpus), and the loss equals the
    full model's loss: evaluation runs the full model to show it.
    """

    def __init__(self, model: GPT, train: np.ndarray):
        V = model.config.vocab_size
        seen = np.zeros(V, dtype=bool)
        seen[np.unique(train)] = True
        self.active = torch.from_numpy(np.flatnonzero(seen))
        self.remap = torch.full((V,), -1, dtype=torch.long)
        self.remap[self.active] = torch.arange(len(self.active))
        n_unseen = int(V - seen.sum())
        self.unseen_logit = math.log(n_unseen) if n_unseen else float("-inf")
        with torch.no_grad():
            model.wte.weight[torch.from_numpy(~seen)] = 0.0

    def __call__(self, model: GPT, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = model.hook_final(model.ln_f(model.run_blocks(model.embed(x))))  # (B, T, C)
        w = model.lm_head.weight[self.active.to(h.device)]  # (S, C)
        logits = h @ w.T  # (B, T, S)
        rest = torch.full((*logits.shape[:2], 1), self.unseen_logit, device=h.device, dtype=logits.dtype)
        logits = torch.cat([logits, rest], dim=-1)  # (B, T, S + 1)
        target = self.remap.to(y.device)[y]  # a target is always seen: it comes from the training data
        return torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), target.view(-1))


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
    # Optimizer moments go beside the checkpoint, only so --resume continues exactly.
    tensors, meta = {}, {"step": str(record["steps"])}
    for i, p in enumerate(p for g in opt.param_groups for p in g["params"]):
        st = opt.state.get(p)
        if st:
            tensors[f"{i}.exp_avg"] = st["exp_avg"].contiguous()
            tensors[f"{i}.exp_avg_sq"] = st["exp_avg_sq"].contiguous()
            meta[f"{i}.step"] = str(float(st["step"]))
    tmp = _optim_path(out) + ".tmp"
    save_file(tensors, tmp, metadata=meta)
    os.replace(tmp, _optim_path(out))


def restore_optimizer(opt, out: str) -> None:
    path = _optim_path(out)
    if not os.path.exists(path):
        return
    from safetensors import safe_open

    with safe_open(path, framework="pt") as f:
        meta = f.metadata()
    tensors = load_file(path)
    for i, p in enumerate(p for g in opt.param_groups for p in g["params"]):
        if f"{i}.exp_avg" in tensors:
            opt.state[p] = {"step": torch.tensor(float(meta[f"{i}.step"])),
                            "exp_avg": tensors[f"{i}.exp_avg"], "exp_avg_sq": tensors[f"{i}.exp_avg_sq"]}


def train(corpus: Corpus, config: GPTConfig, tc: TrainConfig, out: str, device="cpu", resume: bool = False,
          on_step: Callable[[dict], None] | None = None, argv: list[str] | None = None) -> dict:
    """Train and save to `out`; returns the training record. KeyboardInterrupt saves and re-raises."""
    torch.manual_seed(tc.seed)
    start_step, history, wall_before = 0, [], 0.0
    if resume:
        loaded = load_checkpoint(out, device=device)
        model, config = loaded.model, loaded.config
        start_step = int(loaded.training.get("steps", 0))
        history = list(loaded.training.get("history", []))
        wall_before = float(loaded.training.get("wall_time_s", 0.0))
    else:
        model = GPT(config).to(device)
    model.train()
    opt = make_optimizer(model, tc)
    active_loss = ActiveVocabLoss(model, corpus.train) if tc.active_vocab and config.tie_embeddings else None
    if resume:
        restore_optimizer(opt, out)
    # One generator per step index keeps the batch sequence identical across a resume.
    block = config.block_size
    t0 = time.perf_counter()
    record = {
        "data": list(corpus.files), "seed": tc.seed, "train_config": asdict(tc), "model_config": config.to_dict(),
        "train_tokens": int(len(corpus.train)), "val_tokens": int(len(corpus.val)),
        "unigram_val_loss": unigram_loss(corpus.train, corpus.val, config.vocab_size),
        "command": argv or [],
    }
    step = start_step
    train_loss = float("nan")
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
            x, y = batch(corpus.train, block, tc.batch_size, gen)
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
        snapshot(final=False)
        record["interrupted"] = True
        raise
    snapshot(final=True)
    return record
