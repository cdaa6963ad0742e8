"""Triggers for the messages of activation patching: the patch values, the session's corrupted
prompt, exact grids, the metric, prompt-pairs files, the estimate and path patching as the library
answers a script, and the `patch` command."""

from __future__ import annotations

import sys

import numpy as np

from tests.hardening.message_case import Case, raised

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPTED = "When Mary and John went to the store, Mary gave a drink to"


def pair(ctx, corrupted: str = CORRUPTED):
    s = ctx.session()
    s.set_prompt(CLEAN)
    s.set_corrupted(corrupted)
    return s


def kl():
    from transformer_viewer.model.analysis.patching.metric import PatchMetric

    return PatchMetric.make("kl")


def grid(what="heads", corrupted=CORRUPTED, metric=None, **kw):
    def trigger(ctx):
        from transformer_viewer.model.analysis.patching.exact import patch_grid

        return raised(lambda: patch_grid(pair(ctx, corrupted), what, metric or kl(), **kw))
    return trigger


def make_patch(*args, **kw):
    def trigger(ctx):
        from transformer_viewer.model.capture.interventions import Intervention, Patch

        patches = kw.pop("patches", None) or [Patch(*args)]
        return raised(lambda: Intervention.make(ctx.session().config, patches=patches))
    return trigger


def patch_in_hooks(ctx):
    from transformer_viewer.model.capture.interventions import Intervention, Patch

    iv = Intervention.make(ctx.session().config, patches=[Patch("clean", "z", 0)])
    return raised(lambda: iv.hooks())


def two_sources(ctx):
    from transformer_viewer.model.capture.interventions import Patch

    return make_patch(patches=[Patch("clean", "z", 0), Patch("corrupted", "z", 1)])(ctx)


def no_corrupted(ctx):
    s = ctx.session()
    s.set_prompt(CLEAN)
    return raised(s.prompt_pair)


def predict_without_patches(ctx):
    from transformer_viewer.model.capture.interventions import Intervention

    s = pair(ctx)
    return raised(lambda: s.predict_patched(Intervention.none(s.config)))


def predict_by_position_unequal(ctx):
    from transformer_viewer.model.capture.interventions import Intervention, Patch

    s = pair(ctx, CORRUPTED + " again")
    return raised(lambda: s.predict_patched(Intervention.make(s.config, patches=[Patch("clean", "z", 0, 0, (3,))])))


def measured_together(ctx):
    from transformer_viewer.model.analysis.patching.exact import patched_metrics
    from transformer_viewer.model.capture.interventions import Intervention, Patch

    s = pair(ctx)
    mask = np.zeros((s.config.n_layer, s.config.n_head), dtype=bool)
    mask[0, 0] = True
    runs = [Intervention.make(s.config, patches=[Patch("clean", "z", 0)]),
            Intervention.make(s.config, mask, patches=[Patch("clean", "z", 1)])]
    return raised(lambda: patched_metrics(s, runs, kl()))


def position_from_start(ctx):
    from transformer_viewer.model.analysis.patching.exact import patch_grid
    from transformer_viewer.model.analysis.patching.metric import PatchMetric

    s = pair(ctx, CORRUPTED + " again")
    return raised(lambda: patch_grid(s, "heads", PatchMetric.make("kl", position=2)))


def over_budget(ctx):
    s = pair(ctx)
    s.memory_budget = s.estimate_bytes(len(s.tokens.ids)) + 1
    return raised(lambda: s.patch_sources(sites={"z"}))


def metric(*args, resolve=None, **kw):
    def trigger(_ctx):
        from transformer_viewer.model.analysis.patching.metric import PatchMetric

        if resolve is not None:
            return raised(lambda: PatchMetric.make(*args, **kw).resolve_position(resolve))
        return raised(lambda: PatchMetric.make(*args, **kw))
    return trigger


def pairs_file(text: str, *extra):
    def trigger(ctx):
        path = ctx.tmp / "pairs.tsv"
        path.write_text(text, encoding="utf-8")
        return ctx.cli("patch", ctx.ckpt, "--pairs", str(path), "--metric", "kl", *extra)
    return trigger


def patch_cli(*argv, prompts=(CLEAN, CORRUPTED)):
    return lambda ctx: ctx.cli("patch", ctx.ckpt, "--clean", prompts[0], "--corrupted", prompts[1], *argv)


def export_patching(*argv, corrupted: str | None = CORRUPTED):
    given = () if corrupted is None else ("--corrupted", corrupted)
    return lambda ctx: ctx.cli("export", ctx.ckpt, "--view", "patching", "--prompt", CLEAN, *given, "--metric", "kl",
                               *argv, "--out", str(ctx.tmp / "patching.npy"))


def _patch_manifest(ctx, *extra) -> str:
    """The manifest `patch --out grid.npy --write-manifest` writes (a command that succeeds)."""
    import contextlib
    import io

    from transformer_viewer.viewer.cli.main import main

    out = ctx.tmp / "grid.npy"
    with contextlib.redirect_stderr(io.StringIO()):
        assert main(["patch", ctx.ckpt, "--clean", CLEAN, "--corrupted", CORRUPTED, "--metric", "kl", "--what",
                     "heads", "--out", str(out), "--write-manifest", *extra]) == 0
    return str(out) + ".manifest.json"


def private_manifest_without_prompts(ctx):
    manifest = _patch_manifest(ctx, "--manifest-private")
    return ctx.cli("export", "--from-manifest", manifest, "--prompt", CLEAN, "--checkpoint", ctx.ckpt, "--out",
                   str(ctx.tmp / "again.npy"))


def manifest_without_patching(ctx):
    import json

    manifest = _patch_manifest(ctx)
    with open(manifest, encoding="utf-8") as f:
        doc = json.load(f)
    del doc["parts"]["patching"]
    with open(manifest, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    return ctx.cli("export", "--from-manifest", manifest, "--out", str(ctx.tmp / "again.npy"))


def long_exact_patching_view(ctx):
    from transformer_viewer.model.analysis.patching import exact

    ctx.mp.setattr(exact, "EXACT_GRID_MAX_TOKENS", 4)  # the view asks only for the estimate past it
    return export_patching("--what", "heads")(ctx)


def long_exact_grid(ctx):
    from transformer_viewer.model.analysis.patching import exact

    ctx.mp.setattr(exact, "EXACT_GRID_MAX_TOKENS", 4)  # the tiny model's context holds 64 tokens
    return patch_cli("--what", "resid", "--metric", "kl")(ctx)


def figure_without_the_view(ctx):
    ctx.mp.setitem(sys.modules, "transformer_viewer.viewer.cli.patch_figure", None)  # a build without the window's view
    return patch_cli("--metric", "kl", "--out", str(ctx.tmp / "grid.png"))(ctx)


def estimate(what="heads", corrupted=CORRUPTED, of=False):
    def trigger(ctx):
        from transformer_viewer.model.analysis.patching.attribution_patching import (
            estimate_grid,
            estimate_grid_of,
        )

        s = pair(ctx, corrupted)
        if of:
            return raised(lambda: estimate_grid_of(s.model, [1, 2, 3], [1, 2, 4], what, kl()))
        return raised(lambda: estimate_grid(s, what, kl()))
    return trigger


def path(receiver=(1, 0), input="v", corrupted=CORRUPTED):  # noqa: A002 (the analysis's name)
    def trigger(ctx):
        from transformer_viewer.model.analysis.patching.path_patching import path_patch_grid

        return raised(lambda: path_patch_grid(pair(ctx, corrupted), receiver, input, kl()))
    return trigger


def run_pair_of(clean, corrupted, direction="denoise"):
    def trigger(ctx):
        from transformer_viewer.model.analysis.patching.run_pair import run_pair
        from transformer_viewer.model.capture.interventions import Intervention

        return raised(lambda: run_pair(clean, corrupted, kl(), direction, Intervention.none(ctx.session().config),
                                       "path patching"))
    return trigger


CASES = [
    # patch values
    Case("a patch that is no Patch", make_patch(patches=["z 0"]), "a patch must be a Patch, got str"),
    Case("a patch from a third run", make_patch("other", "z", 0), "a patch's source must be one of clean, corrupted"),
    Case("a patch of an unknown site", make_patch("clean", "zz", 0), "a patch's site must be one of"),
    Case("a patch past the last layer", make_patch("clean", "z", 9), "z can be patched in layers 0..1, not 9"),
    Case("a head of a site without heads", make_patch("clean", "mlp_out", 0, 1), "mlp_out has no heads"),
    Case("a key/value head the model lacks", make_patch("clean", "k", 0, 7), "key/value head 7 does not exist"),
    Case("patch positions out of order", make_patch("clean", "z", 0, 0, (3, 1)),
         "a patch's positions must be distinct sorted positions"),
    Case("patches from both runs at once", two_sources, "the patches of one run must all come from one source run"),
    Case("patches as plain hooks", patch_in_hooks, "an intervention with patches runs through Session.predict_patched"),
    # the session's pair of prompts
    Case("the prompt pair without a corrupted prompt", no_corrupted, "no corrupted prompt; type one beside"),
    Case("a patched prediction without patches", predict_without_patches, "this intervention has no patches"),
    Case("a patch by position into a prompt of another length", predict_by_position_unequal,
         "patching by position needs equal lengths: patch a head over all positions"),
    Case("a metric position from the start on prompts of two lengths", position_from_start,
         "give the metric's position from the end (-1 is the last)"),
    Case("patch sources past the memory budget", over_budget, "memory budget; shorten the prompts to"),
    # exact grids
    Case("a grid of an unknown kind", grid("nope"), "what to patch must be one of embed"),
    Case("a grid in no direction", grid("heads", direction="sideways"), "direction must be one of denoise, noise"),
    Case("path patching through patch_grid", grid("path"), "path patching needs a receiver head and input"),
    Case("heads by position without a layer", grid("heads-by-pos"), "heads-by-pos patches one layer's heads"),
    Case("a cell outside the grid", grid("attn", cells=[(9, 0)]), "cell (9, 0) is outside the 2 x"),
    Case("a grid by position on prompts of two lengths", grid("resid", CORRUPTED + " again"),
         "patching resid by position needs equal lengths"),
    Case("patched runs under two head masks", measured_together, "need one head mask and patches from one source"),
    # the metric
    Case("a metric of an unknown kind", metric("accuracy"), "metric must be one of logit-diff, logprob, kl"),
    Case("a logit difference of one token", metric("logit-diff", (1,)), "the logit-diff metric needs two tokens"),
    Case("a metric token past the vocabulary", metric("logprob", (500,), n_vocab=100),
         "token id 500 is outside this model's vocabulary (0..99)"),
    Case("a metric position past the prompt", metric("kl", position=9, resolve=5),
         "metric position 9 is outside the prompt (0..4)"),
    # prompt-pairs files
    Case("a pairs file of blank lines", pairs_file("\n\n"), "no prompt pairs; write one CLEAN<TAB>CORRUPTED"),
    Case("a pairs line too long", lambda ctx: pairs_file("a" * 9000 + "\tb\n")(ctx), "characters, over 8,192"),
    Case("a pairs line without a tab", pairs_file("just one prompt\n"), "separated by one tab (0 tabs)"),
    Case("too many pairs", pairs_file("a\tb\n" * 300), "more than 256 prompt pairs"),
    Case("pairs of two lengths averaged by position", pairs_file(f"{CLEAN}\t{CORRUPTED}\nA short one\tA short two\n",
                                                                 "--what", "attn"),
         "the prompt pairs tokenize to different lengths"),
    # the command
    Case("patch with prompts and a pairs file", patch_cli("--pairs", "p.tsv"), "give --clean and --corrupted, or"),
    Case("patch with one prompt", lambda ctx: ctx.cli("patch", ctx.ckpt, "--clean", CLEAN), "give the two prompts"),
    Case("patch heads by position without a layer", patch_cli("--what", "heads-by-pos"), "add --layer L"),
    Case("patch --layer for every layer's kind", patch_cli("--layer", "1"), "--layer chooses the layer of"),
    Case("patch kl with tokens", patch_cli("--metric", "kl", "--tokens", "1"), "takes no --tokens"),
    Case("patch logprob with two tokens", patch_cli("--metric", "logprob", "--tokens", "1", "2"),
         "--metric logprob takes 1 token in --tokens, got 2"),
    Case("patch where both runs predict alike", patch_cli(prompts=(CLEAN, CLEAN)),
         "so their logit difference says nothing"),
    Case("patch an exact grid of a long prompt", long_exact_grid, "shorten the prompts to 4 tokens or fewer, or add"),
    Case("patch to a text file", patch_cli("--out", "grid.txt"), "a patching grid is written as .npy or .csv"),
    Case("patch path without a receiver", patch_cli("--what", "path"), "--what path needs the receiver head"),
    Case("patch path with a receiver that is no head", patch_cli("--what", "path", "--receiver", "x", "--input", "q"),
         "write the receiver head as LAYER.HEAD"),
    Case("patch a receiver without path", patch_cli("--receiver", "1.1", "--input", "q"), "add --what path"),
    Case("patch an empty prompt", patch_cli("--metric", "kl", prompts=("", "x")), "a prompt is empty; give both"),
    Case("patch an estimate of a layer past the model",
         patch_cli("--what", "heads-by-pos", "--layer", "9", "--estimate", "--metric", "kl"),
         "layer 9 does not exist; the model has layers 0..1"),
    Case("patch an estimate of queries", patch_cli("--what", "q", "--estimate", "--metric", "kl"),
         "--what q is patched exactly only: leave out --estimate"),
    Case("patch a figure without the window's view", figure_without_the_view,
         "figures come from the window's patching view"),
    # attribution and path patching, called as a script would
    Case("an estimate of queries", estimate("q"), "attribution patching estimates resid"),
    Case("an estimate from ids of queries", estimate("q", of=True), "attribution patching estimates resid"),
    Case("an estimate of prompts of two lengths", estimate("heads", CORRUPTED + " again"),
         "attribution patching compares them position by position"),
    Case("path patching of prompts of two lengths", path(corrupted=CORRUPTED + " again"),
         "path patching adds a sender's change at every position"),
    Case("path patching into an input that is none", path(input="x"), "the receiver's input must be one of"),
    Case("path patching into a layer past the model", path(receiver=(9, 0)), "receiver layer 9 does not exist"),
    Case("path patching into a head past the layer", path(receiver=(1, 9)), "receiver head 9 does not exist"),
    Case("a run pair in no direction", run_pair_of([1, 2], [1, 3], "sideways"), "direction must be one of denoise"),
    Case("a run pair with an empty prompt", run_pair_of([], [1]), "a prompt is empty; type a clean and a corrupted"),
    Case("a run pair of two lengths", run_pair_of([1, 2], [1, 2, 3]),
         "path patching needs the clean and corrupted prompts to have the same number of tokens"),
    # the patching view's exports and manifests
    Case("export the patching view without a corrupted prompt", export_patching(corrupted=None),
         "--view patching compares two prompts: give the corrupted one with --corrupted"),
    Case("export another view with a corrupted prompt", lambda ctx: ctx.cli(
        "export", ctx.ckpt, "--prompt", CLEAN, "--corrupted", CORRUPTED, "--what", "mlp", "--out",
        str(ctx.tmp / "a.png")), "--what --corrupted: the patching experiment's options are for --view patching"),
    Case("export the patching view of an empty corrupted prompt", export_patching(corrupted=""),
         "the corrupted prompt is empty"),
    Case("export a patching position past the prompt", export_patching("--position", "-99"),
         "--position -99 is outside the clean prompt's 14 tokens"),
    Case("export a by-position grid of prompts of two lengths",
         export_patching("--what", "resid", corrupted=CORRUPTED + " again"),
         "no patching grid: the clean prompt is 14 tokens and the corrupted one 15"),
    Case("export an estimate of prompts of two lengths",
         export_patching("--what", "heads", "--estimate", corrupted=CORRUPTED + " again"),
         "no estimate: attribution patching does not estimate --what heads here"),
    Case("export the patching view's exact grid of a long prompt", long_exact_patching_view,
         "the prompt's 14 tokens are more than the patching view computes exactly (4); add --estimate"),
    Case("a private patching manifest regenerated without the prompts", private_manifest_without_prompts,
         "a private manifest leaves both prompts out; give them again with --prompt CLEAN --corrupted"),
    Case("a patching manifest without its patching part", manifest_without_patching,
         "a patching figure's manifest without its `patching` part"),
    Case("patch --write-manifest without --out", patch_cli("--metric", "kl", "--write-manifest"),
         "describe the file --out writes; add --out FILE"),
    Case("patch --embed-manifest in a PNG", patch_cli("--metric", "kl", "--embed-manifest", "--out", "g.png"),
         "--embed-manifest is for .svg and .pdf figures"),
    Case("patch a pairs file with a manifest", pairs_file(f"{CLEAN}\t{CORRUPTED}\n", "--write-manifest", "--out",
                                                          "g.npy"),
         "a manifest regenerates one prompt pair's grid"),
]
