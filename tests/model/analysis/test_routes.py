"""Information-flow routes: every edge's contribution equals a naive implementation of the
paper's formulas written here from hooked activations (the whole (T, T, heads, width)
decomposition, fine at a dozen tokens); threshold 0 keeps every edge; a higher threshold only
removes edges; parallel-block and post-norm families follow the module's definitions."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers.families import family_session
from tests.helpers.models import tiny_session
from transformer_viewer.model.analysis.routes import EDGE_KINDS, KINDS, information_routes
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.checkpoints.checkpoint import LoadedModel
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.decoder.gpt import GPT
from transformer_viewer.model.decoder.hooks import caching
from transformer_viewer.model.decoder.norms import RMSNorm
from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.tokenizers.tokenizer import Tokenized


def _contrib(parts: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """The paper's eq. 3-4, written out: max(||y||_1 - ||y - part||_1, 0) over the sum."""
    prox = np.maximum(np.abs(whole).sum() - np.abs(whole[None] - parts).sum(axis=-1), 0.0)
    return prox / prox.sum()


@torch.no_grad()
def _naive_contributions(s) -> dict:
    """Every node's parts' contributions, from one forward with every activation cached:
    {("attn", l, q): ((q+1, nh) pieces, residual[, mlp]), ("out", l, q): (residual, mlp)}."""
    model, c = s.model, s.config
    L, nh, hs = c.n_layer, c.n_head, c.head_size
    names = []
    for layer in range(L):
        names += [f"blocks.{layer}.{n}" for n in ("hook_resid_pre", "hook_resid_mid", "hook_resid_post",
                                                  "hook_mlp_out", "hook_attn_out", "attn.hook_pattern", "attn.hook_v")]
    with caching(model, names) as acts:
        model.run_blocks(model.embed(torch.tensor([s.tokens.ids])))
    out = {}
    T = len(s.tokens.ids)
    for layer in range(L):
        g = lambda n, layer=layer: acts[f"blocks.{layer}.{n}"][0].double().numpy()  # noqa: E731
        x, mid, post, mlp = g("hook_resid_pre"), g("hook_resid_mid"), g("hook_resid_post"), g("hook_mlp_out")
        pattern = g("attn.hook_pattern")  # (nh, T, T)
        v = g("attn.hook_v")  # (T, nkv, hs)
        v = np.repeat(v, nh // v.shape[1], axis=1)  # (T, nh, hs): each key/value head serves its group
        w_o = model.blocks[layer].attn.c_proj.weight.double().numpy()  # (C, nh * hs)
        vo = np.stack([v[:, h] @ w_o[:, h * hs:(h + 1) * hs].T for h in range(nh)], axis=1)  # (T, nh, C)
        parallel = c.block != "sequential"
        post_norm = model.blocks[layer].ln_post_attn
        bias = model.blocks[layer].attn.c_proj.bias
        for q in range(T):
            pieces = pattern[:, q, : q + 1].T[:, :, None] * vo[: q + 1]  # (q+1, nh, C)
            if isinstance(post_norm, RMSNorm):  # each piece through the norm, its scale frozen at q
                raw = pieces.sum(axis=(0, 1)) + (0.0 if bias is None else bias.double().numpy())
                w = post_norm.weight.double().numpy()
                gain = 1.0 + w if post_norm.offset else w
                pieces = pieces * gain / np.sqrt((raw ** 2).mean() + post_norm.eps)
            whole = post[q] if parallel else mid[q]
            extra = [x[q], mlp[q]] if parallel else [x[q]]
            flat = np.concatenate([pieces.reshape(-1, pieces.shape[-1]), np.stack(extra)])
            cc = _contrib(flat, whole)
            n = pieces.shape[0] * nh
            out[("attn", layer, q)] = (cc[:n].reshape(q + 1, nh), *cc[n:])
            if not parallel:
                out[("out", layer, q)] = tuple(_contrib(np.stack([mid[q], mlp[q]]), post[q]))
    return out


def _edges(r):
    """{(source name, target name, kind): (weight, heads)}."""
    return {(r.node_name(s), r.node_name(d), EDGE_KINDS[k]): (float(w), r.head_weight[e])
            for e, ((s, d), k, w) in enumerate(zip(r.edges, r.edge_kind, r.weight, strict=True))}


@pytest.mark.parametrize("build", ["gpt2", "llama", "pythia", "gptj", "gemma2", "olmo2"])
def test_every_edge_equals_the_naive_formulas(build, tmp_path):
    """GPT-2, a grouped-query Llama, parallel blocks (Pythia with two norms, GPT-J with one) and
    norms after the sublayers (Gemma 2, OLMo 2: each piece normed with the scale frozen at its
    query), threshold 0 without renormalising: every part with a positive contribution is an
    edge of exactly that width."""
    s = tiny_session() if build == "gpt2" else family_session(build, tmp_path, T=10)
    naive = _naive_contributions(s)
    r = information_routes(s, threshold=0.0, renormalize=False)
    edges = _edges(r)
    L, T = s.config.n_layer, len(s.tokens.ids)
    parallel = s.config.block != "sequential"
    checked = 0

    def src(layer, pos):
        return f"embed[{pos}]" if layer == 0 else f"out{layer - 1}[{pos}]"

    for (kind, layer, q), parts in naive.items():
        if kind == "out":
            resid, mlp = parts
            for name, want in ((f"attn{layer}[{q}]", resid), (f"mlp{layer}[{q}]", mlp)):
                key = (name, f"out{layer}[{q}]", "residual" if name.startswith("attn") else "mlp")
                if key in edges:
                    assert edges[key][0] == pytest.approx(want, abs=1e-5)
                    checked += 1
            continue
        target = f"out{layer}[{q}]" if parallel else f"attn{layer}[{q}]"
        if not any(k[1] == target for k in edges):
            continue  # this node is not on the route from the last position
        pieces, resid = parts[0], parts[1]
        for k in range(q + 1):
            want = pieces[k].sum()
            got = edges.get((src(layer, k), target, "attention"))
            if want > 1e-7:
                assert got is not None, (layer, q, k, want)
                assert got[0] == pytest.approx(want, abs=1e-5)
                np.testing.assert_allclose(got[1], pieces[k], atol=1e-5)
                checked += 1
            else:
                assert got is None or got[0] < 1e-6
        for key, want in [((src(layer, q), target, "residual"), resid)] + (
                [((f"mlp{layer}[{q}]", target, "mlp"), parts[2])] if parallel else []):
            assert edges.get(key, (0.0,))[0] == pytest.approx(want, abs=1e-5)
    assert checked > T * L  # the route from the last position reaches most of the graph at threshold 0
    np.testing.assert_allclose(r.token_share.sum(), 1.0, atol=1e-5)


@pytest.mark.parametrize("renormalize", [True, False])
def test_raising_the_threshold_only_removes_edges(renormalize):
    s = tiny_session()
    previous = None
    for threshold in (0.0, 0.02, 0.04, 0.1, 0.3):
        r = information_routes(s, threshold=threshold, renormalize=renormalize)
        edges = _edges(r)
        if previous is not None:
            assert set(edges) <= set(previous)
            if not renormalize:  # without rescaling a kept part keeps its width; an edge loses whole heads
                for key, (w, heads) in edges.items():
                    if key[2] == "attention":
                        kept = heads > 0
                        np.testing.assert_allclose(heads[kept], previous[key][1][kept], atol=1e-7)
                        assert (heads[kept] > threshold).all()
                    else:
                        assert w == pytest.approx(previous[key][0], abs=1e-7)
        assert all(w > threshold or renormalize for w, _ in edges.values())
        previous = edges


def test_renormalised_routes_conserve_the_flow_to_the_tokens():
    r = information_routes(tiny_session(), threshold=0.04)
    np.testing.assert_allclose(r.token_share.sum(), 1.0, atol=1e-5)
    assert r.token_share[-1] > 0  # the position itself, through the residual
    assert r.expanded >= r.n_layer  # at least the chosen position's node in each layer
    kinds = {KINDS[k] for k in r.nodes[:, 0]}
    assert {"embed", "out"} <= kinds


def _previous_token_session(T: int = 8) -> Session:
    """Two one-head layers that attend to the previous token by construction: position i is one
    dimension of its own, the queries read i as i - 1, and each layer writes +/- its value, so
    the mean a LayerNorm removes stays that of the positions alone, into dimensions of its own,
    large enough to outweigh the residual it lands on."""
    C = 6 * T
    config = GPTConfig(n_layer=2, n_head=1, n_embd=C, block_size=T, vocab_size=16, bias=False, tie_embeddings=False)
    model = GPT(config).eval()
    shift = torch.zeros(C, C)
    shift[torch.arange(T - 1), torch.arange(1, T)] = 1.0  # query i reads key i - 1
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.zero_()
        model.wpe.weight[:, :T] = torch.eye(T)  # the tokens embed to nothing: only positions count
        for layer, (gain, sharpness) in enumerate([(30.0, 200.0), (3e4, 2e5)]):
            w = torch.zeros(3 * C, C)
            w[:C] = sharpness * shift  # queries
            w[C:C + T, :T] = torch.eye(T)  # keys: the position dimensions
            w[2 * C:2 * C + T, :T] = torch.eye(T)  # values: the same
            out = torch.zeros(C, C)
            base = T + 2 * T * layer
            out[base:base + T, :T] = gain * torch.eye(T)
            out[base + T:base + 2 * T, :T] = -gain * torch.eye(T)
            model.blocks[layer].attn.c_attn.weight.copy_(w)
            model.blocks[layer].attn.c_proj.weight.copy_(out)
    s = Session(LoadedModel(model=model, config=config, format="native", source="<test>", name="previous-token"))
    s.set_tokens(Tokenized(ids=(1,) * T, labels=tuple(f"t{i}" for i in range(T)),
                           spans=tuple((i, i + 1) for i in range(T)), text="x" * T))
    return s


def test_heads_that_attend_to_the_previous_token_give_the_diagonal_route():
    s = _previous_token_session()
    r = information_routes(s)
    attention = [(int(r.nodes[src, 2]), int(r.nodes[dst, 2])) for (src, dst), k in zip(r.edges, r.edge_kind,
                                                                                        strict=True) if k == 0]
    assert attention and all(k == q - 1 for k, q in attention)
    assert (6, 7) in attention and (5, 6) in attention  # 7 <- 6 in layer 1, 6 <- 5 in layer 0
    assert int(np.argmax(r.token_share)) == 5 and r.token_share[5] > 0.5


def test_a_masked_head_sends_nothing(tmp_path):
    s = tiny_session()
    mask = np.ones((2, 4), dtype=bool)
    r = information_routes(s, threshold=0.0, mask=mask)
    assert not (r.edge_kind == 0).any()  # every head is off: only residual and MLP edges
    assert r.token_share[-1] == pytest.approx(1.0, abs=1e-6)


def test_bad_requests_are_one_line():
    s = tiny_session()
    with pytest.raises(ModelError, match="position 99 is outside"):
        information_routes(s, position=99)
    with pytest.raises(ModelError, match="threshold 1.5"):
        information_routes(s, threshold=1.5)


def test_the_json_lists_nodes_and_edges():
    r = information_routes(tiny_session(), threshold=0.04)
    j = r.to_json()
    assert len(j["nodes"]) == len(r.nodes) and len(j["edges"]) == len(r.edges)
    assert {e["kind"] for e in j["edges"]} <= set(EDGE_KINDS)
    assert all(0 < e["contribution"] <= 1 for e in j["edges"])
