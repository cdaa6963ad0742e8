"""Training a sparse autoencoder (SAE) on a model's activations at one hook point.

Two architectures, as SAELens defines them for inference:
- TopK: f = scatter(topk(relu-free pre-activations, k) then ReLU), trained on the squared error
  plus SAELens's auxiliary loss, which asks the top d_in/2 dead features to reconstruct what the
  live ones left (so fewer features die);
- standard: f = ReLU(pre-activations), trained on the squared error plus `l1` times the sum of
  f times each feature's decoder norm.
Both with pre-activations (x - b_dec) W_enc + b_enc and the reconstruction f W_dec + b_dec.

The activations are scaled so their mean norm is sqrt(d_in) (SAELens's
"expected_average_only_in"), which makes one learning rate and one `l1` fit any layer; the scale
is folded into the weights at the end, so the saved SAE reads raw activations and gives the same
features. Decoder rows are kept at unit norm during training, which keeps TopK's choice a
choice among comparable directions and L1 a penalty on what each feature writes.

Seeded: the same activations, seed and flags give the same SAE on the CPU.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass

import torch
from torch import nn

from transformer_viewer.model.errors import ModelError

ARCHITECTURES = ("topk", "standard")
SCALE_SAMPLE_TOKENS = 8192  # activations the norm scale is estimated from


@dataclass(frozen=True)
class SaeTrainConfig:
    d_sae: int
    architecture: str = "topk"
    k: int = 32  # TopK: features active per token
    l1: float = 5.0  # standard: weight of the L1 penalty (on activations scaled to norm sqrt(d_in))
    aux_coefficient: float = 1.0  # TopK: weight of the auxiliary loss on dead features
    dead_after_tokens: int = 200_000  # a feature that fired on none of the last this-many tokens is dead
    steps: int = 1000
    batch_tokens: int = 4096
    lr: float = 1e-3
    warmup: int = 50
    min_lr_ratio: float = 0.1
    seed: int = 0

    def check(self, d_in: int) -> None:
        if self.architecture not in ARCHITECTURES:
            raise ModelError(f"--architecture must be one of {', '.join(ARCHITECTURES)}, got {self.architecture!r}")
        if self.d_sae < 1:
            raise ModelError(f"--d-sae must be at least 1, got {self.d_sae}")
        if self.architecture == "topk" and not 1 <= self.k <= self.d_sae:
            raise ModelError(f"--k must be between 1 and --d-sae ({self.d_sae}), got {self.k}")
        if self.architecture == "standard" and not (self.l1 >= 0 and math.isfinite(self.l1)):
            raise ModelError(f"--l1 must be a finite number of at least 0, got {self.l1}")
        for flag, value in (("--steps", self.steps), ("--batch-tokens", self.batch_tokens)):
            if value < 1:
                raise ModelError(f"{flag} must be at least 1, got {value}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ModelError(f"--lr must be positive, got {self.lr}")


class TrainingSae(nn.Module):
    """The SAE being trained, on scaled activations; `folded` gives the weights for raw ones."""

    def __init__(self, d_in: int, cfg: SaeTrainConfig, gen: torch.Generator):
        super().__init__()
        self.cfg = cfg
        w_dec = torch.randn(cfg.d_sae, d_in, generator=gen)
        w_dec /= w_dec.norm(dim=1, keepdim=True)
        self.W_dec = nn.Parameter(w_dec)  # (d_sae, d_in), rows of unit norm
        self.W_enc = nn.Parameter(w_dec.T.clone())  # (d_in, d_sae): starts as the decoder's transpose
        self.b_enc = nn.Parameter(torch.zeros(cfg.d_sae))
        self.b_dec = nn.Parameter(torch.zeros(d_in))

    def pre_activations(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.b_dec) @ self.W_enc + self.b_enc  # (N, d_sae)

    def activate(self, pre: torch.Tensor) -> torch.Tensor:
        if self.cfg.architecture == "standard":
            return torch.relu(pre)
        top = pre.topk(self.cfg.k, dim=-1, sorted=False)
        return torch.zeros_like(pre).scatter(-1, top.indices, top.values.relu())  # (N, d_sae)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.activate(self.pre_activations(x))

    def decode(self, f: torch.Tensor) -> torch.Tensor:
        return f @ self.W_dec + self.b_dec  # (N, d_in)

    @torch.no_grad()
    def normalize_decoder(self) -> None:
        self.W_dec /= self.W_dec.norm(dim=1, keepdim=True).clamp_min(1e-8)

    @torch.no_grad()
    def folded(self, scale: float) -> dict[str, torch.Tensor]:
        """Weights for raw activations x, trained on x * scale: the same features, the reconstruction
        divided back (SAELens's fold_activation_norm_scaling_factor)."""
        return {"W_enc": (self.W_enc * scale).contiguous(), "b_enc": self.b_enc.clone(),
                "W_dec": (self.W_dec / scale).contiguous(), "b_dec": self.b_dec / scale}


def topk_aux_loss(sae: TrainingSae, x: torch.Tensor, recon: torch.Tensor, pre: torch.Tensor,
                  dead: torch.Tensor) -> torch.Tensor:
    """SAELens's TopK auxiliary loss: the top min(d_in / 2, dead) dead features' pre-activations
    reconstruct the residual error (without the bias), scaled down while few features are dead."""
    n_dead = int(dead.sum())
    if n_dead == 0:
        return x.new_zeros(())
    k_aux = x.shape[-1] // 2
    scale = min(n_dead / k_aux, 1.0)
    k_aux = min(k_aux, n_dead)
    masked = torch.where(dead[None], pre, torch.full_like(pre, -math.inf))  # (N, d_sae)
    top = masked.topk(k_aux, dim=-1, sorted=False)
    acts = torch.zeros_like(pre).scatter(-1, top.indices, top.values)  # (N, d_sae)
    residual = (x - recon).detach()
    return scale * (acts @ sae.W_dec - residual).pow(2).sum(dim=-1).mean()


def lr_at(step: int, cfg: SaeTrainConfig) -> float:
    """Linear warm-up, then cosine decay to min_lr_ratio of the peak."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = min(1.0, (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup))
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + 0.5 * (cfg.lr - floor) * (1.0 + math.cos(math.pi * progress))


class Batches:
    """Fixed-size batches cut from a stream of activation chunks (each already shuffled)."""

    def __init__(self, chunks: Iterator[torch.Tensor], size: int):
        self.chunks, self.size = chunks, size
        self.pending = torch.empty(0)

    def next(self) -> torch.Tensor:
        parts, have = [], 0
        while have < self.size:
            if not len(self.pending):
                self.pending = next(self.chunks)
            take = self.pending[: self.size - have]
            self.pending = self.pending[len(take):]
            parts.append(take)
            have += len(take)
        return torch.cat(parts)  # (size, d_in)


def norm_scale(batches: Batches, d_in: int) -> float:
    """sqrt(d_in) over the mean activation norm of a sample of the stream."""
    seen, total = 0, 0.0
    while seen < SCALE_SAMPLE_TOKENS:
        x = batches.next()
        total += float(x.norm(dim=-1).sum())
        seen += len(x)
    mean = total / seen
    if not (math.isfinite(mean) and mean > 0):
        raise ModelError(f"the activations at this hook have mean norm {mean}: there is nothing to train an SAE on")
    return math.sqrt(d_in) / mean


@dataclass(frozen=True)
class SaeQuality:
    fvu: float  # fraction of variance unexplained: sum |x - x_hat|^2 / sum |x - mean x|^2
    l0: float  # features active per token, on average
    dead: int  # features active on none of the evaluation tokens
    tokens: int


@torch.no_grad()
def measure(encode: Callable[[torch.Tensor], torch.Tensor], decode: Callable[[torch.Tensor], torch.Tensor],
            chunks: list[torch.Tensor], d_sae: int) -> SaeQuality:
    """FVU, L0 and dead features of an SAE over evaluation activations (a list of (N, d_in) chunks)."""
    err = total = 0.0
    sums, sq, n = None, 0.0, 0
    active = torch.zeros(d_sae, dtype=torch.bool)
    l0 = 0.0
    for x in chunks:
        f = encode(x)
        err += float((decode(f) - x).double().pow(2).sum())
        sums = x.double().sum(0) if sums is None else sums + x.double().sum(0)
        sq += float(x.double().pow(2).sum())
        n += len(x)
        nz = f != 0
        l0 += float(nz.sum())
        active |= nz.any(0).cpu()
    total = sq - float(sums.pow(2).sum()) / n  # sum |x - mean|^2
    return SaeQuality(fvu=err / total, l0=l0 / n, dead=int((~active).sum()), tokens=n)


def train_sae(chunks: Iterator[torch.Tensor], d_in: int, cfg: SaeTrainConfig, eval_chunks: list[torch.Tensor],
              on_step: Callable[[dict], None] | None = None, eval_every: int = 100) -> tuple[dict, dict]:
    """Train on the stream of activation chunks; returns (weights for raw activations, record).
    A KeyboardInterrupt (also one raised by `on_step`) propagates: nothing is kept."""
    cfg.check(d_in)
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    batches = Batches(chunks, cfg.batch_tokens)
    scale = norm_scale(batches, d_in)
    sae = TrainingSae(d_in, cfg, gen)
    first = batches.next() * scale
    with torch.no_grad():
        sae.b_dec.copy_(first.mean(0))  # the decoder bias starts at the data's mean
    opt = torch.optim.Adam(sae.parameters(), lr=cfg.lr, betas=(0.9, 0.999))
    since_fired = torch.zeros(cfg.d_sae, dtype=torch.long)  # tokens since each feature last fired
    scaled_eval = [x * scale for x in eval_chunks]
    history: list[dict] = []
    t0, cpu0 = time.perf_counter(), time.process_time()
    for step in range(cfg.steps):
        x = first if step == 0 else batches.next() * scale
        for g in opt.param_groups:
            g["lr"] = lr_at(step, cfg)
        pre = sae.pre_activations(x)
        f = sae.activate(pre)
        recon = sae.decode(f)
        mse = (recon - x).pow(2).sum(dim=-1).mean()
        fired = (f != 0).any(0)
        since_fired = torch.where(fired, 0, since_fired + len(x))
        if cfg.architecture == "topk":
            aux = topk_aux_loss(sae, x, recon, pre, since_fired >= cfg.dead_after_tokens)
            loss = mse + cfg.aux_coefficient * aux
        else:
            aux = f.sum(dim=-1).mean()  # decoder rows have unit norm: f's L1 is what they write
            loss = mse + cfg.l1 * aux
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sae.normalize_decoder()
        info = {"step": step + 1, "loss": float(loss.detach()), "mse": float(mse.detach()) / d_in,
                "dead": int((since_fired >= cfg.dead_after_tokens).sum())}
        if (step + 1) % eval_every == 0 or step + 1 == cfg.steps:
            q = measure(sae.encode, sae.decode, scaled_eval, cfg.d_sae)
            info.update(val_fvu=q.fvu, val_l0=q.l0, val_dead=q.dead)
            history.append({"step": step + 1, "train_loss": info["loss"], "val_fvu": round(q.fvu, 5),
                            "val_l0": round(q.l0, 3), "val_dead": q.dead})
        if on_step:
            on_step(info)
    weights = sae.folded(scale)
    q = measure(lambda x: sae.encode(x * scale), lambda f: sae.decode(f) / scale, eval_chunks, cfg.d_sae)
    record = {"train_config": asdict(cfg), "activation_scale": scale, "history": history,
              "final_fvu": q.fvu, "final_l0": q.l0, "final_dead": q.dead, "eval_tokens": q.tokens,
              "train_tokens": cfg.steps * cfg.batch_tokens, "wall_time_s": round(time.perf_counter() - t0, 1),
              # CPU time of this process: on a shared machine the wall time counts others' work too
              "cpu_time_s": round(time.process_time() - cpu0, 1)}
    return weights, record
