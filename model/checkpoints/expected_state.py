"""What a config's model holds, known before any weight is read: every parameter's name and
shape from a skeleton on the meta device, and whether the whole fits this machine. The format
readers check a file against it; `checkpoint.build_model` fills it."""

from __future__ import annotations

import torch

from transformer_viewer.model.checkpoints.formats import tensor_bounds
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.decoder.gpt import GPT


class SkipInit(torch.overrides.TorchFunctionMode):
    """Makes in-place initialisers no-ops while a skeleton is built on the meta device: there is
    nothing to fill there, and the first meta `normal_` in a process costs seconds of importing
    torch._dynamo. Modes are per thread, so other threads keep initialising normally."""

    INITIALISERS = frozenset({"normal_", "uniform_", "zero_", "fill_", "ones_", "zeros_", "kaiming_uniform_",
                              "trunc_normal_", "constant_", "xavier_uniform_", "xavier_normal_"})

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") in self.INITIALISERS:
            target = args[0] if args else kwargs.get("tensor", kwargs.get("self"))  # nn.init passes tensor=
            if isinstance(target, torch.Tensor) and target.is_meta:
                return target
        return func(*args, **kwargs)


def check_size(config: GPTConfig, source: str) -> None:
    """Refuse a config whose weights would not fit this machine, before any weight is read."""
    tensor_bounds.check_param_count(source, sum(ref.numel() for ref in expected_state(config).values()))


def expected_state(config: GPTConfig) -> dict[str, torch.Tensor]:
    """The model's parameters by name, on the meta device; a tied head counted once."""
    expected = skeleton(config).state_dict()
    if config.tie_embeddings:
        expected.pop("lm_head.weight", None)
    return expected


def skeleton(config: GPTConfig) -> GPT:
    """A GPT on the meta device, parameters shaped but never initialised."""
    with torch.device("meta"), SkipInit():
        model = GPT(config)
    if config.extra.get("head_bias"):
        head = model.lm_head
        head.bias = torch.nn.Parameter(torch.zeros(head.out_features, device=head.weight.device))
    return model
