"""Triggers for the first-run messages: the launch check for Qt's system libraries, the command
line's argument checks (before any model loads), text files that are not text, a GEMM path the
environment names that does not exist."""

from __future__ import annotations

import argparse

from tests.hardening.message_case import Case, raised
from transformer_viewer.viewer import platform_check
from transformer_viewer.viewer.cli import common
from transformer_viewer.viewer.export import export_pdf


def missing_xcb(ctx):
    return raised(lambda: platform_check.check_qt_platform(
        {"QT_QPA_PLATFORM": "xcb"}, "linux", lambda soname: soname != "libxcb-cursor.so.0"))


def two_checkpoints(ctx):
    args = argparse.Namespace(checkpoint_positional="a.safetensors", checkpoint="b.safetensors")
    return raised(lambda: common.checkpoint_from_args(args))


def text_file(ctx, data: bytes):
    path = ctx.tmp / "passages.txt"
    path.write_bytes(data)
    return ctx.cli("heads", ctx.ckpt, "--device", "cpu", "--text", str(path))


def huge_text_file(ctx):
    path = ctx.tmp / "huge.txt"
    with open(path, "wb") as f:
        f.truncate(17 * 2**20)  # sparse: the size is judged before a byte is read
    return ctx.cli("heads", ctx.ckpt, "--device", "cpu", "--text", str(path))


def export(ctx, *extra):
    out = [] if "--out" in extra else ["--out", str(ctx.tmp / "x.png")]
    return ctx.cli("export", ctx.ckpt, "--prompt", "x", *out, *extra)


def painter_refuses(ctx, ext):
    from PySide6 import QtGui

    ctx.mp.setattr(QtGui.QPainter, "begin", lambda self, device: False)
    return export(ctx, "--out", str(ctx.tmp / f"figure{ext}"))


def unknown_gemm(ctx):
    ctx.mp.setenv("TV_GEMM", "mkl")
    return ctx.cli("predict", ctx.ckpt, "--device", "cpu", "--prompt", "hello")


CASES = [
    Case("TV_GEMM=mkl in the environment", unknown_gemm, "TV_GEMM='mkl' is not a GEMM path; use one of onednn, torch"),
    Case("launch without Qt's xcb libraries", missing_xcb, "sudo apt install libxcb-cursor0"),
    Case("launch without a display", lambda ctx: raised(lambda: platform_check.check_display({}, "linux")),
         "no display to open the window on"),
    Case("a mistyped subcommand", lambda ctx: ctx.cli("inof"), "did you mean info?"),
    Case("two different checkpoints", two_checkpoints, "two checkpoints given"),
    Case("heads --text with binary bytes", lambda ctx: text_file(ctx, bytes(range(256)) * 8), "not a text file"),
    Case("heads --text in Latin-1", lambda ctx: text_file(ctx, "caf\u00e9 ".encode("latin-1") * 40), "not UTF-8 text"),
    Case("heads --text of 17 MB", huge_text_file, "more text than head scores need"),
    Case("export --scale 0", lambda ctx: export(ctx, "--scale", "0"), "--scale 0 is out of range"),
    Case("export SVG when Qt cannot paint", lambda ctx: painter_refuses(ctx, ".svg"), "as SVG; export a PNG instead"),
    Case("export PDF when Qt cannot paint", lambda ctx: painter_refuses(ctx, ".pdf"), "as PDF; export a PNG instead"),
    Case("export_pdf to a .png name", lambda ctx: raised(lambda: export_pdf(None, ctx.tmp / "x.png")),
         "export_pdf writes .pdf files"),
    Case("export --head -1", lambda ctx: export(ctx, "--head", "-1"), "--head -1: counts from 0"),
]
