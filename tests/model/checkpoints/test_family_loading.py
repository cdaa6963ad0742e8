"""Loading family checkpoints the way they are published: sharded safetensors with their index,
bfloat16/float16 weights computed in float32, a model found by name in the local Hugging Face
cache (never downloaded), and the source tensors released as they are converted."""

from __future__ import annotations

import os

import pytest
import torch

from tests.helpers.families import load_folder
from tests.helpers.hf_family_models import COMMON, build, published_form, save, vocab
from transformer_viewer.model.checkpoints.checkpoint import build_model
from transformer_viewer.model.checkpoints.formats import detect, hf_families, huggingface

T = 12


def _ids(hf):
    return torch.randint(3, vocab(hf), (1, T), generator=torch.Generator().manual_seed(5))


def test_sharded_safetensors_with_index(tmp_path):
    hf = build("qwen2")
    hf.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").exists() and len(list(tmp_path.glob("*-of-*"))) > 2
    loaded = load_folder(tmp_path)
    ids = _ids(hf)
    with torch.no_grad():
        assert (loaded.model(ids)[0] - hf(ids).logits).abs().max().item() <= 1e-4


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_weights_compute_in_float32(tmp_path, dtype):
    hf = build("gemma2")
    hf.to(dtype).save_pretrained(tmp_path)
    loaded = load_folder(tmp_path)
    assert all(p.dtype == torch.float32 for p in loaded.model.parameters())
    reference = hf.to(torch.float32)  # the same rounded weights, computed in float32
    ids = _ids(hf)
    with torch.no_grad():
        assert (loaded.model(ids)[0] - reference(ids).logits).abs().max().item() <= 1e-4


def test_source_tensors_are_released_as_they_are_converted(tmp_path):
    hf = build("phi3")
    save(hf, str(tmp_path))
    raw = huggingface.load_weights(str(tmp_path / "model.safetensors"))
    n = len(raw)
    config, state, _info = huggingface.read_folder(str(tmp_path), raw=raw)
    assert n > 10 and raw == {}  # every tensor was taken out of the file's dict: no second copy stays
    assert all(t.dtype == torch.float32 for t in state.values())
    build_model(config, state, str(tmp_path))


def test_a_cached_model_opens_by_name_offline(tmp_path, monkeypatch):
    hf = build("qwen3")
    snapshot = tmp_path / "hub" / "models--Qwen--Qwen2.5-0.5B" / "snapshots" / "0123abcd"
    blobs = tmp_path / "hub" / "models--Qwen--Qwen2.5-0.5B" / "blobs"
    save(hf, str(blobs))
    snapshot.mkdir(parents=True)
    for name in os.listdir(blobs):  # the hub's layout: snapshot files are links into blobs/
        os.symlink(os.path.join("..", "..", "blobs", name), snapshot / name)
    (tmp_path / "hub" / "models--Qwen--Qwen2.5-0.5B" / "refs").mkdir()
    (tmp_path / "hub" / "models--Qwen--Qwen2.5-0.5B" / "refs" / "main").write_text("0123abcd")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    fmt, reader = detect.find_reader("Qwen/Qwen2.5-0.5B")
    config, state, info = reader("Qwen/Qwen2.5-0.5B")
    assert fmt == "huggingface" and info["name"] == "Qwen/Qwen2.5-0.5B" and info["training"]["family"] == "Qwen3"
    assert info["tokenizer"] == str(snapshot)  # the folder whose tokenizer.json the model uses
    model = build_model(config, state, "Qwen/Qwen2.5-0.5B")
    ids = _ids(hf)
    with torch.no_grad():
        assert (model(ids)[0] - hf(ids).logits).abs().max().item() <= 1e-4


def test_saved_rotary_tables_are_ignored(tmp_path):
    """Older Llama saves carry each layer's rotary_emb.inv_freq buffer; we compute our own."""
    from safetensors.torch import load_file, save_file

    hf = build("llama")
    save(hf, str(tmp_path))
    path = str(tmp_path / "model.safetensors")
    state = load_file(path)
    state["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(4)
    save_file(state, path, metadata={"format": "pt"})
    ids = _ids(hf)
    with torch.no_grad():
        assert (load_folder(tmp_path).model(ids)[0] - hf(ids).logits).abs().max().item() <= 1e-4


def _gemma3_published(folder) -> None:
    """Rewrite a saved multimodal Gemma 3's text_config as Google's files have it: rope_theta,
    rope_scaling and rope_local_base_freq instead of rope_parameters, no layer_types, and no
    value that equals Gemma3TextConfig's default."""
    import json

    import transformers

    path = os.path.join(folder, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    text = cfg["text_config"]
    rope = text.pop("rope_parameters")
    full = dict(rope["full_attention"])
    text.update(rope_theta=full.pop("rope_theta"), rope_local_base_freq=rope["sliding_attention"]["rope_theta"],
                rope_scaling=None if full["rope_type"] == "default" else full,
                sliding_window_pattern=text.pop("_sliding_window_pattern"))
    text.pop("layer_types")
    defaults = transformers.Gemma3TextConfig().to_dict()
    defaults.update(rope_theta=1e6, rope_local_base_freq=1e4, sliding_window_pattern=6)
    cfg["text_config"] = {k: v for k, v in text.items() if k == "model_type" or defaults.get(k, object()) != v}
    with open(path, "w") as f:
        json.dump(cfg, f)


def _rename_keys(weights: str, old: str, new: str) -> None:
    from safetensors.torch import load_file, save_file

    state = load_file(weights)
    save_file({(new + k[len(old):] if k.startswith(old) else k): v for k, v in state.items()}, weights,
              metadata={"format": "pt"})


@pytest.mark.parametrize("layout", ["published", "model.language_model"])
def test_a_multimodal_gemma3_opens_as_its_text_decoder(tmp_path, layout):
    """Gemma 3 4B and up are saved as Gemma3ForConditionalGeneration: the text decoder opens and
    gives the multimodal model's logits for a text prompt; the vision tower is never read."""
    hf = build("gemma3_multimodal")
    save(hf, str(tmp_path))
    weights = str(tmp_path / "model.safetensors")
    if layout == "published":
        _gemma3_published(str(tmp_path))
    else:  # the names transformers keeps in memory, as a checkpoint saved without its conversion has them
        _rename_keys(weights, "language_model.model.", "model.language_model.")
        _rename_keys(weights, "vision_tower.", "model.vision_tower.")
        _rename_keys(weights, "multi_modal_projector.", "model.multi_modal_projector.")
    family = hf_families.FAMILIES["Gemma3ForConditionalGeneration"]
    kept = huggingface.load_weights(weights, skip=family.skip)
    assert kept and not any("vision_tower" in k or "multi_modal_projector" in k for k in kept)
    loaded = load_folder(tmp_path)
    assert loaded.training["family"] == "Gemma 3 text decoder"
    assert loaded.config.rope_scaling == "linear" and loaded.config.rope_local_base == 1e4
    assert loaded.config.layer_types == ("sliding", "full", "sliding", "full")
    ids = _ids(hf)
    with torch.no_grad():
        assert (loaded.model(ids)[0] - hf(ids).logits).abs().max().item() <= 1e-4


@pytest.mark.parametrize("layout", ["published", "model.language_model"])
def test_a_qwen2_5_vl_opens_as_its_text_decoder(tmp_path, layout):
    """Qwen2.5-VL's published files (flat config, mrope, "model.layers" and "visual." tensors)
    and the names transformers keeps in memory both open as the text decoder of the nested
    config, with the multimodal model's logits for a text prompt; the vision tower is never read."""
    hf = build("qwen2_5_vl")
    save(hf, str(tmp_path))
    nested = load_folder(tmp_path).config
    weights = str(tmp_path / "model.safetensors")
    if layout == "published":
        published_form(str(tmp_path))  # Qwen's flat file, mrope and all
    else:
        _rename_keys(weights, "model.", "model.language_model.")
        _rename_keys(weights, "visual.", "model.visual.")
    family = hf_families.FAMILIES["Qwen2_5_VLForConditionalGeneration"]
    kept = huggingface.load_weights(weights, skip=family.skip)
    assert kept and not any("visual" in k for k in kept)
    loaded = load_folder(tmp_path)
    assert loaded.training["family"] == "Qwen2.5-VL text decoder"
    assert loaded.config == nested and loaded.config.tie_embeddings and loaded.config.sliding_window == 6
    ids = _ids(hf)
    with torch.no_grad():
        assert (loaded.model(ids)[0] - hf(ids).logits).abs().max().item() <= 1e-4


MULTIMODAL = {"Qwen2_5_VLForConditionalGeneration": ("Qwen2_5_VLConfig", "qwen2_5_vl_text"),
              "Qwen3VLForConditionalGeneration": ("Qwen3VLConfig", "qwen3_vl_text"),
              "Gemma3ForConditionalGeneration": ("Gemma3Config", "gemma3_text")}


@pytest.mark.parametrize("arch", sorted(MULTIMODAL))
@pytest.mark.parametrize("top, text", [(None, None), (True, None), (False, None), (False, True), (True, False),
                                       (None, True), (None, False)])
def test_a_multimodal_model_ties_its_head_as_transformers_does(arch, top, text):
    """The head is tied where transformers' own config class says so, whichever of the top
    level and text_config holds the flag."""
    import transformers

    config_cls = getattr(transformers, MULTIMODAL[arch][0])
    text_config = dict(COMMON, rope_parameters={"rope_type": "default", "rope_theta": 1e4},
                       **({} if text is None else {"tie_word_embeddings": text}))
    if arch.startswith("Gemma3"):
        text_config["rope_parameters"] = {t: {"rope_type": "default", "rope_theta": 1e4}
                                          for t in ("full_attention", "sliding_attention")}
    hf = {"architectures": [arch], "text_config": dict(text_config, model_type=MULTIMODAL[arch][1]),
          **({} if top is None else {"tie_word_embeddings": top})}
    ref = config_cls(**{k: v for k, v in hf.items() if k != "architectures"})
    ours = hf_families.config_for(hf, "folder", arch, hf_families.FAMILIES[arch])
    assert ours.tie_embeddings == ref.tie_word_embeddings


def test_gemma3_text_config_defaults_are_transformers_own():
    """A text_config that leaves everything to the defaults reads as Gemma3TextConfig() does."""
    import transformers

    ref = transformers.Gemma3TextConfig()
    c = hf_families.config_for({"model_type": "gemma3", "text_config": {"model_type": "gemma3_text"}}, "folder",
                               "Gemma3ForConditionalGeneration", hf_families.FAMILIES["Gemma3ForConditionalGeneration"])
    assert (c.vocab_size, c.n_embd, c.n_mlp, c.n_layer, c.n_head, c.kv_heads, c.head_size, c.block_size) == (
        ref.vocab_size, ref.hidden_size, ref.intermediate_size, ref.num_hidden_layers, ref.num_attention_heads,
        ref.num_key_value_heads, ref.head_dim, ref.max_position_embeddings)
    assert c.layer_types == tuple("sliding" if t == "sliding_attention" else "full" for t in ref.layer_types)
    assert (c.sliding_window, c.rope_base, c.rope_local_base, c.layer_norm_eps) == (
        ref.sliding_window, ref.rope_parameters["full_attention"]["rope_theta"],
        ref.rope_parameters["sliding_attention"]["rope_theta"], ref.rms_norm_eps)
    assert c.attn_scale == ref.query_pre_attn_scalar ** -0.5 and c.tie_embeddings == ref.tie_word_embeddings


def test_the_parameter_bound_follows_the_machines_memory(monkeypatch):
    """Weights are float32 on the CPU and may take three quarters of the machine's memory:
    Gemma 2 2B (2.6 billion parameters) opens on a 24 GiB machine, not on an 8 GiB one."""
    from transformer_viewer.model.checkpoints.formats import tensor_bounds
    from transformer_viewer.model.errors import CheckpointError

    monkeypatch.setattr(tensor_bounds, "physical_memory", lambda: 24 << 30)
    tensor_bounds.check_param_count("gemma-2-2b", 2_614_341_888)
    assert tensor_bounds.max_params() == (24 << 30) * 3 // 16
    monkeypatch.setattr(tensor_bounds, "physical_memory", lambda: 8 << 30)
    with pytest.raises(CheckpointError, match=r"2,614,341,888 parameters, 9.7 GiB as float32, more than fits in this "
                                              r"machine's memory \(8 GiB: up to 1,610,612,736 parameters\)"):
        tensor_bounds.check_param_count("gemma-2-2b", 2_614_341_888)


def test_a_model_too_large_for_the_machine_is_refused_before_its_weights_are_read(tmp_path, monkeypatch):
    from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
    from transformer_viewer.model.checkpoints.formats import tensor_bounds
    from transformer_viewer.model.errors import CheckpointError

    save(build("qwen2"), str(tmp_path))
    monkeypatch.setattr(tensor_bounds, "physical_memory", lambda: 64 << 10)  # 64 KiB: the tiny model does not fit
    monkeypatch.setattr(huggingface, "load_weights", lambda *a, **k: pytest.fail("the weights were read"))
    with pytest.raises(CheckpointError, match="more than fits in this machine's memory"):
        load_checkpoint(str(tmp_path))


def test_a_tied_config_keeps_a_head_of_its_own_as_transformers_does(tmp_path):
    """Mistral 3's config ties by default, while Mistral Small's files hold a head of their own:
    transformers then keeps the file's head (it ties only equal tensors), and so do we."""
    import json

    import transformers

    hf = build("mistral3_small")
    save(hf, str(tmp_path))
    path = tmp_path / "config.json"
    cfg = json.loads(path.read_text())
    cfg.pop("tie_word_embeddings")  # Mistral3Config's default: true
    path.write_text(json.dumps(cfg))
    reference = transformers.Mistral3ForConditionalGeneration.from_pretrained(tmp_path).eval()
    assert reference.config.tie_word_embeddings
    loaded = load_folder(tmp_path)
    assert not loaded.config.tie_embeddings and "lm_head.weight" in dict(loaded.model.named_parameters())
    ids = _ids(hf)
    with torch.no_grad():
        assert (loaded.model(ids)[0] - reference(ids).logits).abs().max().item() <= 1e-4


def test_a_tied_file_with_an_equal_copy_of_its_head_stays_tied(tmp_path):
    from safetensors.torch import load_file, save_file

    hf = build("smollm_tied")
    save(hf, str(tmp_path))
    weights = str(tmp_path / "model.safetensors")
    state = load_file(weights)
    state["lm_head.weight"] = state["model.embed_tokens.weight"].clone()
    save_file(state, weights, metadata={"format": "pt"})
    loaded = load_folder(tmp_path)
    assert loaded.config.tie_embeddings and loaded.model.lm_head.weight is loaded.model.wte.weight


def test_ministral3_context_stops_where_its_query_scaling_starts():
    """Llama 4's query scaling, 1 + beta * log(1 + floor(position / original)), is exactly 1
    below the original context: the context is capped there (32 in the tiny config, 16,384 in
    the published models), and a scaling with no original context is refused."""
    from transformer_viewer.model.checkpoints.formats.hf_families.mistral3 import MINISTRAL3_ROPE
    from transformer_viewer.model.errors import CheckpointError

    family = hf_families.FAMILIES["Ministral3ForCausalLM"]
    hf = {"architectures": ["Ministral3ForCausalLM"], **COMMON, "head_dim": 8}
    tiny = hf_families.config_for({**hf, "rope_parameters": dict(MINISTRAL3_ROPE, original_max_position_embeddings=32)},
                                  "folder", "Ministral3ForCausalLM", family)
    assert tiny.block_size == 32 and tiny.rope_scaling == "yarn"
    published = hf_families.config_for(dict(hf, max_position_embeddings=262144), "folder", "Ministral3ForCausalLM", family)
    assert published.block_size == 16384 and published.rope_factor == 16.0 and published.rope_base == 1e6
    unscaled = dict(MINISTRAL3_ROPE, llama_4_scaling_beta=0.0)
    assert hf_families.config_for({**hf, "rope_parameters": unscaled}, "folder", "Ministral3ForCausalLM",
                                  family).block_size == COMMON["max_position_embeddings"]
    no_original = {"rope_type": "default", "rope_theta": 1e4, "llama_4_scaling_beta": 0.1}
    with pytest.raises(CheckpointError, match="llama_4_scaling_beta needs an integer original_max_position_embeddings"):
        hf_families.config_for({**hf, "rope_parameters": no_original}, "folder", "Ministral3ForCausalLM", family)


@pytest.mark.parametrize("head", ["its own", "an equal copy"])
def test_a_gpt2_file_with_a_head_ties_as_transformers_does(tmp_path, head):
    """GPT-2's config ties the head; a file that also holds lm_head.weight keeps it where it
    differs from the embedding (transformers then does not tie) and stays tied where it is equal."""
    import transformers
    from safetensors.torch import load_file, save_file

    from tests.helpers.models import hf_config, hf_model

    hf_model(hf_config(vocab_size=96)).save_pretrained(tmp_path)
    weights = str(tmp_path / "model.safetensors")
    state = load_file(weights)
    wte = state["transformer.wte.weight"]
    state["lm_head.weight"] = torch.randn_like(wte) if head == "its own" else wte.clone()
    save_file(state, weights, metadata={"format": "pt"})
    reference = transformers.GPT2LMHeadModel.from_pretrained(tmp_path).eval()
    loaded = load_folder(tmp_path)
    assert loaded.config.tie_embeddings == (head == "an equal copy")
    ids = torch.randint(0, 96, (1, T), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        assert (loaded.model(ids)[0] - reference(ids).logits).abs().max().item() <= 1e-4
