"""Triggers for the messages of the direct-effect, routes and rollout analyses that the command
line cannot reach (its own checks answer first): the library called as a script would."""

from __future__ import annotations

from tests.hardening.message_case import Case, raised
from transformer_viewer.model.capture.session import Session


def session(ctx) -> Session:
    s = ctx.session()
    s.set_prompt("The cat sat on the mat")
    return s


def dla(**kw):
    from transformer_viewer.model.analysis.logit_attribution import head_sources, logit_attribution

    fn = head_sources if "layer" in kw else logit_attribution
    return lambda ctx: raised(lambda: fn(session(ctx), **kw))


def rollout(*args, **kw):
    from transformer_viewer.model.analysis.rollout import rollout_rows

    return lambda ctx: raised(lambda: rollout_rows(session(ctx), *args, **kw))


def too_many_rows(ctx):
    from transformer_viewer.model.analysis import rollout as module

    ctx.mp.setattr(module, "MAX_ROWS", 2)  # a block is 512 rows; the tiny model's context is shorter
    return raised(lambda: module.rollout_rows(session(ctx), 0, 5))


def routes_below_zero(ctx):
    from transformer_viewer.model.analysis.routes import information_routes

    return raised(lambda: information_routes(session(ctx), threshold=-0.1))


def every_row_too_large(ctx):
    from transformer_viewer.viewer.cli import rollout as command

    ctx.mp.setattr(command, "MAX_FULL_BYTES", 16)  # a real case needs an 8k-token prompt
    return cli("rollout")(ctx)


def difference_without_its_token(ctx):
    from transformer_viewer.viewer.views.attribution_view import token_pair

    s = session(ctx)
    return raised(lambda: token_pair(None, "42", s.tokenizer, s.n_vocab))


def cli(*argv):
    return lambda ctx: ctx.cli(argv[0], ctx.ckpt, "--prompt", "The cat sat on the mat", *argv[1:])


CASES = [
    Case("the attribution view's difference without its first token", difference_without_its_token,
         "choose the token A as well: the difference is logit(A) - logit(B)"),
    Case("direct effects of three tokens", dla(tokens=(1, 2, 3)), "give one token or a pair of tokens, not 3"),
    Case("a head's sources for a head the model lacks", dla(layer=9, head=0), "head 9.0 is not in this model's"),
    Case("a rollout over no head", rollout(0, 1, heads=[]), "choose at least one head for the rollout"),
    Case("rollout rows past the prompt", rollout(0, 99), "query rows 0..98 are outside the prompt's"),
    Case("too many rollout rows at once", too_many_rows, "5 rollout rows at once; ask for at most 2"),
    Case("rollout heads by a name it does not know", rollout(0, 1, heads="avg"), "use mean, max, or a list of"),
    Case("rollout layers that are no range", cli("rollout", "--layers", "2:2"), "layers 2:2 are not a range"),
    Case("rollout without the residual over a layer with no chosen head",
         cli("rollout", "--heads", "0.1", "--no-residual"), "every layer of the range needs a chosen head"),
    Case("scan with --tokens and --target", cli("scan", "--tokens", "1", "--target", "2"),
         "give --tokens A [B], or --target and --distractor, not both"),
    Case("attribute with four tokens", cli("attribute", "--tokens", "1", "2", "3", "4"),
         "--tokens takes one token or two"),
    Case("attribute to an image", cli("attribute", "--out", "terms.png"), "the terms are written as .json or .csv"),
    Case("routes at threshold 2", cli("routes", "--threshold", "2"), "give a contribution from 0 up to"),
    Case("routes to a text file", cli("routes", "--out", "routes.txt"),
         "the routes are written as .json, or drawn as .svg, .pdf or .png"),
    Case("rollout layers not A:B", cli("rollout", "--layers", "all"), "write A:B, the layers"),
    Case("rollout heads not L.H", cli("rollout", "--heads", "first"), "use mean, max, or heads L.H,L.H"),
    Case("every rollout row of a long prompt", every_row_too_large, "rollout is 0.0 GiB; ask for one row with --query"),
    Case("rollout rows to an image", cli("rollout", "--out", "r.png"), "the rows are written as .npy, .csv or .json"),
    Case("direct effects at a position past the prompt", dla(position=40), "position 40 is outside the prompt's"),
    Case("routes at a threshold below 0", routes_below_zero, "threshold -0.1 must be at least 0 and below 1"),
]
