"""CUDA, where a GPU is present (skipped everywhere else): a model loaded onto the GPU gives
what it gives on the CPU (captures, masks, predictions, patterns and activations recomputed on
demand, the analyses), in float32 within float32 rounding, in bfloat16 and float16 close to it;
a session moves to the GPU with its prompt, and a long prompt's capture stays in bounded GPU
memory."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers.hf_family_models import save_with_tokenizer
from tests.helpers.models import save_tiny
from transformer_viewer.model.analysis.attribution import head_attribution
from transformer_viewer.model.analysis.generate import generate
from transformer_viewer.model.analysis.lens import logit_lens
from transformer_viewer.model.analysis.scan import head_scan
from transformer_viewer.model.capture.on_demand import head_pattern, mlp_activations, pattern_tile
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.checkpoints.checkpoint import LoadedModel, load_checkpoint
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.decoder.gpt import GPT
from transformer_viewer.model.tokenizers.tokenizer import Tokenized

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

PROMPT = "The cat sat on the mat because the cat was tired, and the dog barked at the cat all night long"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    gpt2 = tmp_path_factory.mktemp("gpt2") / "tiny.safetensors"
    save_tiny(gpt2, seed=5)
    llama = tmp_path_factory.mktemp("llama")
    save_with_tokenizer("llama", str(llama))  # rotary, RMSNorm, gated MLP, grouped key/value heads
    return {"gpt2": str(gpt2), "llama": str(llama)}


def pair(path: str, **kw) -> tuple[Session, Session]:
    cpu, gpu = Session(load_checkpoint(path, device="cpu")), Session(load_checkpoint(path, device="cuda", **kw))
    for s in (cpu, gpu):
        s.set_prompt(PROMPT)
    return cpu, gpu


def assert_same_trace(a, b, atol: float = 2e-5) -> None:
    np.testing.assert_allclose(a.overview_max.astype(np.float32), b.overview_max.astype(np.float32), atol=2e-3)
    np.testing.assert_allclose(a.resid_norms, b.resid_norms, rtol=1e-4, atol=atol)
    np.testing.assert_allclose(a.head_norms, b.head_norms, rtol=1e-4, atol=atol)
    np.testing.assert_allclose(a.mlp_max, b.mlp_max, rtol=1e-4, atol=atol)
    np.testing.assert_allclose(a.mlp_mean, b.mlp_mean, rtol=1e-4, atol=atol)
    np.testing.assert_allclose(a.token_logprobs[1:], b.token_logprobs[1:], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(a.next.probs, b.next.probs, atol=1e-5)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_a_capture_on_cuda_gives_the_cpu_capture(checkpoints, name):
    cpu, gpu = pair(checkpoints[name])
    assert next(gpu.model.parameters()).device.type == "cuda"
    assert_same_trace(cpu.run(), gpu.run())


def test_masks_predictions_and_on_demand_arrays_on_cuda(checkpoints):
    cpu, gpu = pair(checkpoints["llama"])
    mask = np.zeros((cpu.config.n_layer, cpu.config.n_head), dtype=bool)
    mask[1, 0] = mask[2, 3] = True
    for s in (cpu, gpu):
        s.run()
    np.testing.assert_allclose(cpu.predict(mask, update_cache=False).probs, gpu.predict(mask, update_cache=False).probs,
                               atol=1e-5)
    for ablation in ("zero", "mean"):
        a, b = cpu.run(mask, ablation=ablation), gpu.run(mask, ablation=ablation)
        assert_same_trace(a, b)
    T = len(cpu.tokens.ids)
    np.testing.assert_allclose(head_pattern(cpu, a, 2, 1), head_pattern(gpu, b, 2, 1), atol=1e-5)
    np.testing.assert_allclose(pattern_tile(cpu, a, 1, 2, (3, T), (0, T - 4)), pattern_tile(gpu, b, 1, 2, (3, T), (0, T - 4)),
                               atol=1e-5)
    np.testing.assert_allclose(mlp_activations(cpu, a, 1), mlp_activations(gpu, b, 1), rtol=1e-4, atol=2e-5)


def test_the_analyses_on_cuda(checkpoints):
    cpu, gpu = pair(checkpoints["llama"])
    for s in (cpu, gpu):
        s.run()
    lens = [logit_lens(s) for s in (cpu, gpu)]
    np.testing.assert_allclose(lens[0].final_probs, lens[1].final_probs, atol=1e-5)
    attribution = [head_attribution(s) for s in (cpu, gpu)]
    assert attribution[0].token_id == attribution[1].token_id
    np.testing.assert_allclose(attribution[0].direct, attribution[1].direct, rtol=1e-4, atol=1e-5)
    scans = [head_scan(s) for s in (cpu, gpu)]
    np.testing.assert_allclose(scans[0].effect, scans[1].effect, rtol=1e-3, atol=1e-5)
    runs = [generate(s, 6) for s in (cpu, gpu)]
    assert runs[0].new_ids.tolist() == runs[1].new_ids.tolist()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_on_cuda(checkpoints, dtype):
    cpu, gpu = pair(checkpoints["llama"], dtype=dtype)
    assert next(gpu.model.parameters()).dtype == dtype
    a, b = cpu.run(), gpu.run()
    assert np.isfinite(b.token_logprobs[1:]).all() and np.isfinite(b.resid_norms).all()
    np.testing.assert_allclose(a.next.probs, b.next.probs, atol=0.05)
    np.testing.assert_allclose(a.token_logprobs[1:], b.token_logprobs[1:], atol=0.25)


def test_a_session_moves_to_cuda_with_its_prompt(checkpoints):
    cpu, _ = pair(checkpoints["gpt2"])
    moved = Session(load_checkpoint(checkpoints["gpt2"], device="cpu"))
    moved.set_prompt(PROMPT)
    moved.run()
    moved.model.to("cuda")
    moved.set_tokens(moved.tokens)  # what the worker does after a device move: the ids follow the model
    assert_same_trace(cpu.run(), moved.run())


def test_a_long_prompt_on_cuda_stays_in_bounded_gpu_memory():
    T, config = 8192, GPTConfig(n_layer=2, n_head=4, n_kv_head=2, n_embd=64, n_mlp=128, vocab_size=512,
                                block_size=8192, positional="rotary", norm="rmsnorm", mlp="gated",
                                activation="silu", bias=False)
    torch.manual_seed(0)
    model = GPT(config).to("cuda").eval()
    s = Session(LoadedModel(model=model, config=config, format="native", source="<tiny>", name="tiny"))
    ids = tuple(int(i) for i in np.random.default_rng(0).integers(0, 512, T))
    s.set_tokens(Tokenized(ids, tuple("t" for _ in ids), tuple((i, i + 1) for i in range(T)), "t" * T))
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    trace = s.run()
    torch.cuda.synchronize()
    whole_patterns = config.n_layer * config.n_head * T * T * 4  # what keeping every pattern would take: 2.1 GB
    assert torch.cuda.max_memory_allocated() - base < whole_patterns / 8
    assert np.isfinite(trace.token_logprobs[1:]).all()
    np.testing.assert_allclose(head_pattern(s, trace, 1, 3)[-1].sum(), 1.0, rtol=1e-5)
