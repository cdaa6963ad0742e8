"""The rooms of model/ import in one direction, and nothing in the project imports in a circle
(a circle hidden by an import inside a function counts: grimp reads those too)."""

from __future__ import annotations

import grimp
import pytest

# From the top down: a room may import the rooms below it, never one above. Rooms in one tuple
# are independent of each other. errors, device and rust_calls serve them all.
LAYERS = ("sessions", "analysis", ("capture", "training"), "sae", "checkpoints", "tokenizers", "kernels", "decoder", "files")


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("transformer_viewer.model", "transformer_viewer.viewer", include_external_packages=False)


def test_the_rooms_import_downwards_only(graph):
    layers = [{f"transformer_viewer.model.{r}" for r in (layer if isinstance(layer, tuple) else (layer,))}
              for layer in LAYERS]
    illegal = graph.find_illegal_dependencies_for_layers(layers=layers)
    found = sorted(f"{d.importer} -> {d.imported}" for d in illegal)
    assert not found, "imports against the rooms' direction:\n" + "\n".join(found)


def test_the_model_never_imports_the_viewer(graph):
    chains = graph.find_shortest_chains(importer="transformer_viewer.model", imported="transformer_viewer.viewer")
    assert not chains, chains


def _circles(graph) -> list[list[str]]:
    adj = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components, iteratively deep enough for this graph
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in adj[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for m in sorted(adj):
        if m not in index:
            visit(m)
    return out


def test_no_module_imports_in_a_circle(graph):
    assert not _circles(graph), _circles(graph)
