"""Triggers for the messages of sparse autoencoders: every hostile file of corpus_saes.py through
`load_sae`, and the clamps, analyses, labels and command-line options around them."""

from __future__ import annotations

import os

from tests.hardening import corpus_saes
from tests.hardening.message_case import Case, raised
from tests.helpers.hardening import TINY
from tests.helpers.saes import random_weights, saelens_cfg, write_saelens

PROMPT = "The cat sat on the mat"


def hostile(name):
    def trigger(ctx):
        from transformer_viewer.model.sae.loading import load_sae

        entry = next(h for h in corpus_saes.build(str(ctx.tmp)) if h.name == name)
        return raised(lambda: load_sae(entry.spec, TINY))
    return trigger


def good_sae(ctx, hook="blocks.1.hook_resid_post", **cfg):
    from transformer_viewer.model.sae.loading import load_sae

    folder = write_saelens(ctx.tmp / f"sae_{hook}", saelens_cfg("standard", 16, 24, hook, **cfg),
                           random_weights("standard", 16, 24))
    return load_sae(folder, TINY)


def session_with_sae(ctx, hook="blocks.1.hook_resid_post"):
    s = ctx.session()
    s.set_prompt(PROMPT)
    index = s.attach_sae(good_sae(ctx, hook))
    return s, index


def clamp_run(*clamp, hook="blocks.1.hook_resid_post"):
    def trigger(ctx):
        from transformer_viewer.model.capture.interventions import FeatureClamp, Intervention

        s, _ = session_with_sae(ctx, hook)
        return raised(lambda: s.predict(Intervention.make(TINY, clamps=(FeatureClamp(*clamp),))))
    return trigger


def make(*clamps):
    def trigger(ctx):
        from transformer_viewer.model.capture.interventions import Intervention

        return raised(lambda: Intervention.make(TINY, clamps=clamps))
    return trigger


def clamp(*args):
    from transformer_viewer.model.capture.interventions import FeatureClamp

    return FeatureClamp(*args)


def hooks_without_session(ctx):
    from transformer_viewer.model.capture.interventions import Intervention

    return raised(lambda: Intervention.make(TINY, clamps=(clamp(0, 1, "set", 1.0),)).hooks())


def analysis(fn_name, *args, hook="blocks.1.hook_resid_post", **kw):
    def trigger(ctx):
        from transformer_viewer.model.analysis import sae_features

        s, index = session_with_sae(ctx, hook)
        return raised(lambda: getattr(sae_features, fn_name)(s, index, *args, **kw))
    return trigger


def not_open(ctx):
    s, _ = session_with_sae(ctx)
    return raised(lambda: s.sae(5))


def logit_effect_after_a_norm(ctx):
    from transformer_viewer.model.analysis.sae_features import feature_logit_effect
    from transformer_viewer.model.capture.session import Session
    from transformer_viewer.model.checkpoints.checkpoint import LoadedModel
    from transformer_viewer.model.decoder.config import GPTConfig
    from transformer_viewer.model.decoder.gpt import GPT
    from transformer_viewer.model.sae.loading import load_sae

    config = GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=16, norm="rmsnorm", norm_placement="sandwich")
    s = Session(LoadedModel(model=GPT(config).eval(), config=config, format="native", source="<sandwich>",
                            name="sandwich"))
    s.set_prompt("a b")
    folder = write_saelens(ctx.tmp / "z", saelens_cfg("standard", 16, 24, "blocks.0.attn.hook_z"),
                           random_weights("standard", 16, 24))
    index = s.attach_sae(load_sae(folder, config))
    return raised(lambda: feature_logit_effect(s, index, 0))


def attached_to_another_model(ctx):
    from tests.helpers.models import TINY as WIDER
    from transformer_viewer.model.sae.loading import load_sae

    folder = write_saelens(ctx.tmp / "wide", saelens_cfg("standard", 32, 24, "blocks.1.hook_resid_post"),
                           random_weights("standard", 32, 24))
    s = ctx.session()
    return raised(lambda: s.attach_sae(load_sae(folder, WIDER)))


def bad_factor(ctx):
    from transformer_viewer.model.sae.loading import load_sae

    folder = write_saelens(ctx.tmp / "avg", saelens_cfg("standard", 16, 24, "blocks.1.hook_resid_post",
                                                          normalize_activations="expected_average_only_in"),
                           random_weights("standard", 16, 24))
    return raised(lambda: load_sae(folder, TINY, norm_scaling_factor=-1.0))


def missing(ctx):
    from transformer_viewer.model.sae.loading import load_sae

    ctx.mp.setenv("HF_HUB_CACHE", str(ctx.tmp / "hub"))
    return raised(lambda: load_sae("org/repo/layer_3", TINY))


def budget_env(ctx):
    from transformer_viewer.model.sae.loading import load_sae

    ctx.mp.setenv("TV_SAE_MEMORY_MB", "lots")
    return raised(lambda: load_sae("anything", TINY))


def labels(text, name="labels.csv", d_sae=24):
    def trigger(ctx):
        from transformer_viewer.model.sae.labels import read_feature_labels

        path = os.path.join(ctx.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return raised(lambda: read_feature_labels(path, d_sae))
    return trigger


def cli(*argv):
    def trigger(ctx):
        folder = write_saelens(ctx.tmp / "cli_sae", saelens_cfg("standard", 16, 24, "blocks.1.hook_resid_post",
                                                                        model_from_pretrained_kwargs={}),
                               random_weights("standard", 16, 24))
        argv_ = [a.replace("{sae}", str(folder)) for a in argv]
        return ctx.cli(argv_[0], ctx.ckpt, "--prompt", PROMPT, *argv_[1:])
    return trigger


CASES = [Case(f"sae file: {name}", hostile(name), expect) for name, expect in corpus_saes.entries()] + [
    Case("sae: the normalisation factor given is no positive number", bad_factor, "must be a positive number"),
    Case("sae: attached to a model it was not opened for", attached_to_another_model,
         "reads 32-wide activations, and blocks.1.hook_resid_post of this model is 16 wide"),
    Case("sae: a memory budget that is no number", budget_env, "TV_SAE_MEMORY_MB='lots' is not a whole number"),
    Case("sae: neither a file nor a cached SAE", missing, "no such file or folder, and no such REPO_ID/SUBFOLDER"),
    Case("clamp: an SAE that is not open", clamp_run(3, 1, "set", 1.0), "names SAE 3, which is not open"),
    Case("clamp: a feature past the SAE's width", clamp_run(0, 24, "set", 1.0), "SAE 0 has features 0..23"),
    Case("clamp: an SAE of the embedding", clamp_run(0, 1, "set", 1.0, hook="blocks.0.hook_resid_pre"),
         "is the embedding itself"),
    Case("clamp: hooks without the session", hooks_without_session, "applied by the session that holds their SAEs"),
    Case("clamp: too many", make(*[clamp(0, i, "set", 1.0) for i in range(300)]), "more than the 256 one run"),
    Case("clamp: not a FeatureClamp", make((0, 1, "set", 1.0)), "must be a FeatureClamp"),
    Case("clamp: a negative feature", make(clamp(0, -1, "set", 1.0)), "are numbers from 0"),
    Case("clamp: an unknown kind", make(clamp(0, 1, "add", 1.0)), "kind must be one of set, scale"),
    Case("clamp: an infinite value", make(clamp(0, 1, "set", float("inf"))), "its value must be a number"),
    Case("clamp: a position past the context", make(clamp(0, 1, "set", 1.0, 64)), "is not a token position"),
    Case("sae analysis: an SAE that is not open", not_open, "SAE 5 is not open"),
    Case("sae analysis: top past the width", analysis("token_features", top=25), "--top must be from 1 to"),
    Case("sae analysis: a feature past the width", analysis("feature_row", 99), "feature 99 does not exist"),
    Case("sae analysis: a logit effect through a norm after the layer", logit_effect_after_a_norm,
         "would pass through this model's norm"),
    Case("labels: a feature past the width", labels("id,label\n30,big\n"), "labels feature 30"),
    Case("labels: a row without an id", labels("1,a\nfoo,b\n"), "line 2 starts with 'foo'"),
    Case("labels: JSON that is no list", labels('{"x": 1}', "l.json"), "not a list of explanations"),
    Case("labels: an explanation that is no object", labels("[1]", "l.json"), "an explanation is not an object"),
    Case("labels: an explanation without its index", labels('[{"description": "x"}]', "l.json"),
         "without an index and a description"),
    Case("cli: --clamp syntax", cli("predict", "--sae", "{sae}", "--clamp", "x=1"), "--clamp 'x=1': write"),
    Case("cli: --clamp of an SAE not given", cli("predict", "--clamp", "1:2=1"), "names SAE 1, but no --sae"),
    Case("cli: --clamp position", cli("predict", "--sae", "{sae}", "--clamp", "2=1@-40"), "position -40 is outside"),
    Case("cli: features --top", cli("features", "--sae", "{sae}", "--top", "0"), "--top must be at least 1"),
    Case("cli: features --out", cli("features", "--sae", "{sae}", "--out", "f.txt"), "written as .csv or .npy"),
]
