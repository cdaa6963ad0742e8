"""`load_sae`: an SAE from a folder, a `params.npz` or the local Hugging Face cache, checked
against the model it will read before a weight is allocated.

`spec` is an SAELens folder (`cfg.json` + `sae_weights.safetensors`, model/sae/saelens_config.py
reads both layouts), its `cfg.json`, a Gemma Scope `params.npz` (weights only: the hook point is
the user's, `PATH@blocks.12.hook_resid_post`), a folder holding one, or `REPO_ID/SUBFOLDER`
found in the local Hugging Face cache, never downloaded (model/sae/sources.py finds it). Every file is untrusted: cfg.json is
bounded JSON, the safetensors header and the npz member headers are checked against the config
(names, shapes, dtypes) and the config against the model (hook point, width) and the memory
budget, whose size is said before anything is read; the weights must be finite.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from transformer_viewer.model.checkpoints.formats import safetensors_file
from transformer_viewer.model.errors import ModelError, stop_if_cancelled
from transformer_viewer.model.files import folder_files, regular_file, untrusted_json
from transformer_viewer.model.files.file_errors import read_errors
from transformer_viewer.model.sae import npz_weights, processing, saelens_config
from transformer_viewer.model.sae.config import SaeConfig, size_text
from transformer_viewer.model.sae.hook_points import hook_point, our_name, width
from transformer_viewer.model.sae.module import SparseAutoencoder
from transformer_viewer.model.sae.sources import CFG, WEIGHTS, locate, parse_sae_spec

MAX_CFG_BYTES = 1 << 20  # a cfg.json is a few KB
DEFAULT_SAE_BUDGET = 8 << 30  # bytes of float32 weights one SAE may take
SAE_BUDGET_ENV = "TV_SAE_MEMORY_MB"  # MiB, to allow a wider SAE than the default


@dataclass(frozen=True)
class LoadedSae:
    """An SAE ready to attach to a session: its checked config and module, one `info` line for
    the window and the `warnings` to show beside it."""

    name: str
    config: SaeConfig
    module: SparseAutoencoder
    info: str
    warnings: tuple[str, ...] = ()


def past_context(config: SaeConfig, n_tokens: int) -> str | None:
    """A warning when a prompt is longer than the contexts the SAE was trained on."""
    if config.context_size is not None and n_tokens > config.context_size:
        return (f"the prompt's {n_tokens:,} tokens run past the {config.context_size:,} the SAE was trained on; "
                "its features there may read poorly")
    return None


def sae_memory_budget() -> int:
    """Bytes of float32 weights one SAE may take: $TV_SAE_MEMORY_MB, else DEFAULT_SAE_BUDGET."""
    raw = os.environ.get(SAE_BUDGET_ENV, "").strip()
    if not raw:
        return DEFAULT_SAE_BUDGET
    if not (raw.isascii() and raw.isdigit() and 0 < int(raw) < 1 << 40):
        raise ModelError(f"{SAE_BUDGET_ENV}={raw[:20]!r} is not a whole number of MiB; set it to one (e.g. 16384) or "
                         "unset it")
    return int(raw) << 20


def load_sae(spec: str, model_config, hook: str | None = None, memory_budget: int | None = None,
             model_name: str | None = None, norm_scaling_factor: float | None = None, progress=None,
             is_cancelled=None) -> LoadedSae:
    """The SAE `spec` names (`PATH[@HOOK]`, see the module's docstring), for a model of
    `model_config` (called `model_name`, for the warning when the SAE names another). `hook`
    overrides the spec's; `memory_budget` bounds its float32 weights (None: `sae_memory_budget()`);
    `norm_scaling_factor` is the constant of an expected_average_only_in
    SAE, which its cfg.json does not hold. `progress(done, total, text)` hears the size before
    the weights are read and each tensor read; once `is_cancelled()` is true the load stops at
    the next tensor with `Cancelled`."""
    path, spec_hook = parse_sae_spec(spec)
    hook = hook or spec_hook
    memory_budget = sae_memory_budget() if memory_budget is None else memory_budget
    where, kind, root = locate(path)
    watch = _Watch(path, progress, is_cancelled)
    if kind == "npz":
        return _load_npz(where, model_config, hook, memory_budget, path, watch)
    return _load_saelens(where, root, model_config, hook, memory_budget, model_name, norm_scaling_factor, path,
                         watch)


class _Watch:
    """A load's progress and cancel: the size said before reading, a check at each tensor."""

    def __init__(self, name: str, progress, is_cancelled):
        self.name, self.progress, self.is_cancelled = name, progress, is_cancelled
        self.total = 0

    def start(self, config: SaeConfig, n_tensors: int) -> None:
        self.total = n_tensors
        if self.progress is not None:
            self.progress(0, n_tensors, f"reading the SAE {self.name}: {size_text(config.n_bytes)} in float32…")
        stop_if_cancelled(self.is_cancelled)

    def step(self, done: int) -> None:
        stop_if_cancelled(self.is_cancelled)
        if self.progress is not None:
            self.progress(done, self.total, f"reading the SAE {self.name}…")


# -- SAELens folders ----------------------------------------------------------------------------
def _expected(arch: str, d_in: int, d_sae: int) -> dict[str, tuple[int, ...]]:
    shapes = {"W_enc": (d_in, d_sae), "W_dec": (d_sae, d_in), "b_dec": (d_in,)}
    if arch == "gated":
        shapes.update(b_gate=(d_sae,), r_mag=(d_sae,), b_mag=(d_sae,))
    else:
        shapes["b_enc"] = (d_sae,)
    if arch == "jumprelu":
        shapes["threshold"] = (d_sae,)
    return shapes


def _load_saelens(folder: str, root: str, model_config, hook, budget, model_name, norm_scaling_factor,
                  spec, watch: _Watch) -> LoadedSae:
    cfg_path = folder_files.check_inside(root, os.path.join(folder, CFG))
    raw = untrusted_json.read_object(cfg_path, saelens_config.FIX, max_bytes=MAX_CFG_BYTES)
    read = saelens_config.read(raw, cfg_path)
    if hook and read.hook_name and _ours(read.hook_name) != _ours(hook):
        raise ModelError(f"{spec}: its cfg.json reads {read.hook_name}, not {hook}; drop the @hook or give the SAE "
                         f"of {hook}")
    hook = hook or read.hook_name
    if not hook:
        raise ModelError(f"{cfg_path}: names no hook point; give it as {spec}@blocks.L.hook_resid_post")
    where = f"{spec} ({read.hook_name or hook})"
    point = hook_point(hook, model_config)
    steps, warnings = processing.resolve(read.model_from_pretrained_kwargs, read.model_class_name, point,
                                         model_config, cfg_path)
    warnings = list(warnings)
    if (read.model_class_name in (None, processing.TRANSFORMER_LENS) and read.model_from_pretrained_kwargs is None
            and point.is_residual and model_config.norm in ("layernorm", "layernorm_plain")):
        warnings.append("its cfg.json does not say how TransformerLens processed the model, so it is read as "
                        "unprocessed (centred residuals need model_from_pretrained_kwargs.center_writing_weights)")
    if read.normalize_activations == "expected_average_only_in" and norm_scaling_factor is None:
        raise ModelError(f"{spec}: normalize_activations is expected_average_only_in, whose scaling factor its "
                         "cfg.json does not hold; fold it into the weights (SAELens's "
                         "fold_activation_norm_scaling_factor) and re-save, or give the factor")
    config = SaeConfig(
        architecture=read.architecture, d_in=read.d_in, d_sae=read.d_sae, hook=point.name, k=read.k,
        apply_b_dec_to_input=read.apply_b_dec_to_input, normalize_activations=read.normalize_activations,
        rescale_acts_by_decoder_norm=read.rescale_acts_by_decoder_norm, model_name=read.model_name,
        context_size=read.context_size, processing=steps, source=folder, dtype=read.dtype)
    _check_fit(config, point, model_config, where, budget)
    weights_path = folder_files.check_inside(root, os.path.join(folder, WEIGHTS))
    tensors = _read_safetensors(weights_path, config, watch)
    module = _module(config, tensors, weights_path)
    if norm_scaling_factor is not None and read.normalize_activations == "expected_average_only_in":
        _fold_scaling(module, norm_scaling_factor, spec)
    if model_name and read.model_name and _short(read.model_name) != _short(model_name):
        warnings.append(f"trained on {read.model_name}, not {model_name}: its features may not mean the same here")
    return _loaded(config, module, spec, read.layout, tuple(warnings))


def _read_safetensors(path: str, config: SaeConfig, watch: _Watch) -> dict[str, torch.Tensor]:
    expected = _expected(config.architecture, config.d_in, config.d_sae)
    with read_errors(path, "put the safetensors file itself there", "check the path"):
        f = regular_file.open_regular(path, buffering=0)
    with f:
        header = safetensors_file.read_header(path, f)
        entries = dict(header.entries)
        if "log_threshold" in entries and "threshold" in expected and "threshold" not in entries:
            entries["threshold"] = entries.pop("log_threshold")
            log_threshold = True
        else:
            log_threshold = False
        scaling = entries.pop("scaling_factor", None)
        missing = sorted(set(expected) - set(entries))
        extra = sorted(set(entries) - set(expected))
        if missing or extra:
            said = "; ".join(s for s in (f"missing {', '.join(missing)}" if missing else "",
                                         f"unexpected {', '.join(n[:40] for n in extra[:5])}" if extra else "") if s)
            raise ModelError(f"{path}: its tensors do not match a {config.architecture} SAE ({said}); re-save it "
                             "with SAELens")
        for name, shape in expected.items():
            entry = entries[name]
            if entry.shape != shape or not entry.dtype.is_floating_point:
                raise ModelError(f"{path}: {name} is {entry.dtype} {list(entry.shape)}; its cfg.json "
                                 f"(d_in {config.d_in}, d_sae {config.d_sae}) needs float {list(shape)}")
        if scaling is not None and (scaling.shape not in ((), (1,), (config.d_sae,)) or not scaling.dtype.is_floating_point):
            raise ModelError(f"{path}: scaling_factor has shape {list(scaling.shape)}; re-save it with SAELens")
        watch.start(config, len(expected))
        tensors = {}
        for name in expected:
            tensors[name] = safetensors_file.read_tensor(path, f, entries[name]).float()
            watch.step(len(tensors))
        if scaling is not None and not bool((safetensors_file.read_tensor(path, f, scaling).float() == 1).all()):
            raise ModelError(f"{path}: a finetuning scaling factor is not supported; fold it into W_dec and re-save")
    if log_threshold:
        tensors["threshold"] = tensors["threshold"].exp()
    return tensors


# -- Gemma Scope params.npz ---------------------------------------------------------------------
def _load_npz(path: str, model_config, hook, budget, spec, watch: _Watch) -> LoadedSae:
    if not hook:
        raise ModelError(f"{path}: a params.npz holds weights only; say which hook point it reads, "
                         f"e.g. {spec}@blocks.12.hook_resid_post")
    point = hook_point(hook, model_config)
    f = npz_weights.opened(path)
    with f:
        shapes = npz_weights.read_shapes(path, f)
        if "W_enc" not in shapes or len(shapes["W_enc"][0]) != 2:
            raise ModelError(f"{path}: no two-dimensional W_enc; {npz_weights.FIX}")
        d_in, d_sae = shapes["W_enc"][0]
        if not (d_in and d_sae):
            raise ModelError(f"{path}: W_enc is empty ({d_in} x {d_sae}); {npz_weights.FIX}")
        arch = "jumprelu" if "threshold" in shapes else "standard"
        expected = _expected(arch, d_in, d_sae)
        for name, shape in expected.items():
            got = shapes.get(name, (None,))[0]
            if got != shape:
                raise ModelError(f"{path}: {name} has shape {list(got) if got else 'nothing'}, W_enc's "
                                 f"({d_in}, {d_sae}) needs {list(shape)}; {npz_weights.FIX}")
        config = SaeConfig(architecture=arch, d_in=d_in, d_sae=d_sae, hook=point.name,
                           apply_b_dec_to_input=False, source=path, dtype=str(shapes["W_enc"][1]))
        _check_fit(config, point, model_config, f"{spec} ({point.name})", budget)
        watch.start(config, len(expected))
        tensors = npz_weights.read_arrays(path, f)
        watch.step(len(expected))
    module = _module(config, tensors, path)
    return _loaded(config, module, spec, "Gemma Scope params.npz", ())


# -- shared checks -----------------------------------------------------------------------------
def _check_fit(config: SaeConfig, point, model_config, where: str, budget: int) -> None:
    need = width(point, model_config)
    if config.d_in != need:
        raise ModelError(f"{where}: the SAE reads {config.d_in:,}-wide activations, and {point.name} of this model "
                         f"is {need:,} wide; give the SAE trained on this model's {point.name}")
    if config.n_bytes > budget:
        raise ModelError(f"{where}: {config.d_sae:,} features on a {config.d_in:,}-wide layer need "
                         f"{size_text(config.n_bytes)} in float32, more than the {size_text(budget)} allowed; "
                         f"use a narrower SAE, or raise {SAE_BUDGET_ENV}")


def _module(config: SaeConfig, tensors: dict[str, torch.Tensor], path: str) -> SparseAutoencoder:
    module = SparseAutoencoder(config)
    for name, t in tensors.items():
        if not bool(torch.isfinite(t).all()):
            raise ModelError(f"{path}: {name} holds NaN or infinite values; re-download or re-train the SAE")
        getattr(module, name).data = t.contiguous()
    return module.eval()


def _fold_scaling(module: SparseAutoencoder, factor: float, spec: str) -> None:
    """SAELens's fold_activation_norm_scaling_factor: the inputs' constant folded into the weights."""
    if not (isinstance(factor, (int, float)) and 0 < factor < float("inf")):
        raise ModelError(f"{spec}: the normalisation scaling factor must be a positive number, got {factor!r}")
    module.W_enc.data *= factor
    module.W_dec.data /= factor
    module.b_dec.data /= factor


def _loaded(config: SaeConfig, module, spec: str, layout: str, warnings: tuple[str, ...]) -> LoadedSae:
    name = "/".join(os.path.normpath(spec).split(os.sep)[-2:])
    arch = config.architecture + (f" (k={config.k})" if config.k else "")
    norm = "" if config.normalize_activations == "none" else f", {config.normalize_activations}"
    info = (f"{name}: {arch}, {config.d_sae:,} features on {config.hook} (d_in {config.d_in:,}){norm}, "
            f"{processing.describe(config.processing)}, {size_text(config.n_bytes)}, {layout}")
    return LoadedSae(name, config, module, info, warnings)


def _ours(hook: str) -> str:
    return our_name(hook.strip())


# TransformerLens's names for models whose Hugging Face names differ.
_MODEL_ALIASES = {"gpt2-small": "gpt2"}


def _short(model_name: str) -> str:
    """A model's name without its organisation, folder or file extension, as TransformerLens
    and Hugging Face spell it alike: "openai-community/gpt2" and "gpt2-small" are "gpt2"."""
    name = os.path.basename(model_name.strip().rstrip("/\\")).lower()
    for ext in (".safetensors", ".pt", ".pth", ".bin", ".ckpt"):
        if name.endswith(ext):
            name = name[: -len(ext)]
    return _MODEL_ALIASES.get(name, name)

