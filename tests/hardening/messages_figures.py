"""Message triggers for figure and data exports: sizes, themes, head syntax, exact patterns, and
the SVG that Qt could write but every renderer would not draw alike."""

from __future__ import annotations

from tests.hardening.message_case import Case, raised


def _export(ctx, *extra, out="a.npy"):
    return ctx.cli("export", ctx.ckpt, "--prompt", "The cat sat", "--out", str(ctx.tmp / out), *extra)


def _full_disk_while_streaming(ctx):
    def full(*_a, **_k):
        raise OSError(28, "No space left on device")
    ctx.mp.setattr("transformer_viewer.model.capture.on_demand.save_head_pattern", full)
    return _export(ctx)


def _labels_for_another_prompt(ctx):
    from transformer_viewer.model.capture.on_demand import save_head_pattern

    s = ctx.session()
    s.set_prompt("The cat sat on the mat")
    trace = s.run()
    return raised(lambda: save_head_pattern(s, trace, 0, 0, str(ctx.tmp / "p.csv"), labels=("one", "two")))


def _svg(inner: str) -> bytes:
    return ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 10 10">' + inner + "</svg>").encode()


def _rotated_group(_ctx):
    from transformer_viewer.viewer.vector_export import finish_svg

    return raised(lambda: finish_svg(_svg('<g transform="rotate(30)"><rect vector-effect="non-scaling-stroke"/></g>')))


def _nested_scales(_ctx):
    from transformer_viewer.viewer.vector_export import finish_svg

    return raised(lambda: finish_svg(_svg('<g transform="matrix(2,0,0,2,0,0)"><g transform="matrix(3,0,0,3,0,0)">'
                                          '<rect vector-effect="non-scaling-stroke"/></g></g>')))


def _non_scaling_text(_ctx):
    from transformer_viewer.viewer.vector_export import finish_svg

    return raised(lambda: finish_svg(_svg('<g transform="matrix(2,0,0,2,0,0)">'
                                          '<text vector-effect="non-scaling-stroke">x</text></g>')))


CASES = [
    Case("export --region of a view without a heatmap", lambda c: _export(c, "--view", "grid", "--region", "0,1,0,1",
                                                                            out="g.png"),
         "--region: the grid view has no heatmap to zoom"),
    Case("export --region past the heatmap", lambda c: _export(c, "--region", "0,99,0,1", out="r.png"),
         "--region 0,99,0,1 is outside the heatmap's 3 columns and 3 rows"),
    Case("export --head L.H against another --layer", lambda c: _export(c, "--layer", "0", "--head", "1.2"),
         "--head 1.2 names layer 1 but --layer is 0"),
    Case("export --head that is no head", lambda c: _export(c, "--head", "two"), "give a head as LAYER.HEAD"),
    Case("export --dpi out of range", lambda c: _export(c, "--dpi", "5", out="a.png"), "--dpi 5 is out of range"),
    Case("export --width too small", lambda c: _export(c, "--width", "0.1in", out="a.png"), "--width 0.1in is out"),
    Case("export --width in an unknown unit", lambda c: _export(c, "--width", "3pt", out="a.png"),
         "write a length such as 3.5in, 8cm or 80mm"),
    Case("export --pooled of a figure", lambda c: _export(c, "--pooled", out="a.png"), "--pooled is for the attention"),
    Case("export a PNG over the memory budget", lambda c: _export(c, "--size", "16384x16384", out="a.png"),
         "1/8 of the memory budget"),
    Case("export the exact pattern on a full disk", _full_disk_while_streaming, "No space left on device"),
    Case("a streamed CSV pattern with labels of another prompt", _labels_for_another_prompt, "2 labels for a pattern"),
    Case("SVG with a rotated group of non-scaling strokes", _rotated_group, "unexpected SVG transform"),
    Case("SVG with nested scaled groups", _nested_scales, "nested scaled groups"),
    Case("SVG with non-scaling text", _non_scaling_text, "unexpected non-scaling <text>"),
]
