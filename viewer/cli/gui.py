"""`transformer-viewer [CHECKPOINT] [--prompt TEXT] [--head L.H] [--sae PATH[@HOOK]]... [--device ...]
[--screenshot FILE.png]`: the window.

Qt is imported only inside `run`, torch only on the worker thread, so the window shows while
torch is still loading. `--screenshot` renders the whole window offscreen once the prompt has
run and every view has drawn, writes the PNG and exits.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

SCREENSHOT_SETTLE_MS = 400  # after the last answer: lets queued paints and layouts finish
SCREENSHOT_TIMEOUT_S = 120


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from transformer_viewer.viewer.cli.common import add_checkpoint_arguments

    add_checkpoint_arguments(parser)
    parser.add_argument("--prompt", default=None, help="text to run at start (default: an example prompt)")
    parser.add_argument("--head", metavar="LAYER.HEAD", default=None,
                        help="the head to show once the model has loaded, e.g. 0.3 (default: on the bundled model, the "
                        "head its first example names, whatever the prompt; otherwise 0.0)")
    parser.add_argument("--session", metavar="FILE.tvsession", default=None,
                        help="open a saved session: its checkpoint, prompt, masks, selection and views")
    parser.add_argument("--screenshot", metavar="FILE.png", default=None,
                        help="render the window offscreen once the prompt has run, save it as PNG, and exit")
    parser.add_argument("--sae", metavar="PATH[@HOOK]", action="append", default=[],
                        help="attach a sparse autoencoder once the model has loaded (repeatable, one per hook point): "
                        "an SAELens folder, a Gemma Scope params.npz with @HOOK (e.g. @blocks.12.hook_resid_post), "
                        "or REPO_ID/SUBFOLDER in the local Hugging Face cache")


def run(args) -> int:
    from transformer_viewer.model.errors import ModelError

    head = parse_head(args.head) if args.head is not None else None
    if args.session is not None:  # refused in one line before any window opens
        from transformer_viewer.model.sessions.registry import load as load_session

        load_session(args.session)
    if args.screenshot:
        if not args.screenshot.lower().endswith(".png"):
            raise ModelError(f"--screenshot {args.screenshot}: the screenshot is a PNG; give a name ending in .png")
        from transformer_viewer.viewer.export import check_writable

        check_writable(args.screenshot)
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before the QApplication exists
    from transformer_viewer.viewer.platform_check import check_display, check_qt_platform

    check_display()  # one line saying how to get a display, instead of Qt aborting the process
    check_qt_platform()  # one line naming the packages, likewise
    t0 = time.perf_counter()
    from PySide6.QtCore import QSettings, qInstallMessageHandler
    from PySide6.QtWidgets import QApplication

    if os.environ.get("QT_QPA_PLATFORM") == "offscreen" and QApplication.instance() is None:
        qInstallMessageHandler(quiet_offscreen_messages)
    app = QApplication.instance() or QApplication([sys.argv[0] if sys.argv else "transformer-viewer"])
    app.setApplicationName("transformer-viewer")
    # The worker starts importing torch and loading before the window is even built; its
    # answers wait in the event queue until the window is connected and the loop runs.
    from transformer_viewer.viewer.worker.client import WorkerClient
    from transformer_viewer.viewer.worker.requests import LoadRequest, ProbeRequest

    worker = WorkerClient()
    pending = (worker.submit(ProbeRequest()),)
    if args.session is None:  # a session loads its checkpoint (or the one given) itself
        pending += (worker.submit(LoadRequest(path=args.checkpoint, device=args.device, n_head=args.n_head)),)
    from transformer_viewer.viewer.window.actions import default_head, default_prompt
    from transformer_viewer.viewer.window.main_window import DEFAULT_SIZE, MainWindow

    settings = None
    if args.screenshot:
        import tempfile

        scratch = tempfile.mkdtemp(prefix="tv-shot-")
        settings = QSettings(os.path.join(scratch, "settings.ini"), QSettings.IniFormat)  # leave the user's alone
    window = MainWindow(settings=settings, worker=worker, pending=pending)
    window.sae_menu.open_when_loaded(getattr(args, "sae", None) or ())  # --sae: once the model is there
    window.device_choice = args.device
    window.empty_states.set_loading(args.checkpoint)  # the load it submitted above
    head_error: list[str] = []
    if args.session is not None:
        window.sessions.open(args.session, checkpoint=args.checkpoint, prompt=args.prompt)
    else:
        window.state.set_prompt(args.prompt if args.prompt is not None else default_prompt())
    if head is not None:
        select_head_when_loaded(window, *head, head_error)
    elif args.session is None and (example_head := default_head()) is not None:
        select_head_when_loaded(window, *example_head, [], quiet=True, bundled_only=True)  # the model's named head
    if args.screenshot:
        window.resize(*DEFAULT_SIZE)
    else:
        fit_to_screen(window, app)
    window.show()
    if os.environ.get("TV_TIMING"):
        window.state.trace_changed.connect(
            lambda _t: print(f"first trace drawn after {time.perf_counter() - t0:.2f} s", file=sys.stderr))
    if not args.screenshot:
        return app.exec()
    from PySide6.QtCore import QEventLoop

    shot = Screenshot(window, args.screenshot)
    loop = QEventLoop()  # a local loop: an application that outlives us (tests) is left usable
    shot.done = loop.quit
    loop.exec()
    if shot.error or head_error:
        print(f"error: {shot.error or head_error[0]}", file=sys.stderr)
        return 2
    print(f"wrote {os.path.abspath(args.screenshot)} ({shot.size[0]}x{shot.size[1]})")
    return 0


def quiet_offscreen_messages(_mode, _context, message: str) -> None:
    """Qt's messages on stderr, less the offscreen platform's note that it cannot pass window
    size hints on (every dock warns once per screenshot); nothing a user can act on."""
    if "propagateSizeHints" not in message:
        print(message, file=sys.stderr)


def parse_head(text: str) -> tuple[int, int]:
    from transformer_viewer.model.capture.prompts import parse_layer_head
    from transformer_viewer.model.errors import ModelError

    parsed = parse_layer_head(text)
    if parsed is None:
        raise ModelError(f"--head {text}: give a head as LAYER.HEAD, counting from 0, e.g. 0.3")
    return parsed


def select_head_when_loaded(window, layer: int, head: int, errors: list[str], quiet: bool = False,
                            bundled_only: bool = False) -> None:
    """Select (layer, head) when the first model arrives; a head the model lacks is an error
    (shown unless `quiet`, and appended to `errors`), the selection left where it was.
    `bundled_only`: only if that model is the bundled one (whose heads the examples name),
    whatever the prompt."""
    st = window.state

    def on_model(info) -> None:
        if info is None:
            return
        st.model_changed.disconnect(on_model)
        if bundled_only:
            from transformer_viewer.model.checkpoints.bundled import is_bundled

            if not is_bundled(info.source):
                return
        if layer < info.n_layer and head < info.n_head:
            st.set_selection(layer=layer, head=head)
            return
        errors.append(f"--head {layer}.{head}: this model's heads run from 0.0 to {info.n_layer - 1}.{info.n_head - 1}")
        if not quiet:
            window.show_error(errors[0])

    st.model_changed.connect(on_model)


def fit_to_screen(window, app) -> None:
    from transformer_viewer.viewer.window.main_window import DEFAULT_SIZE

    screen = app.primaryScreen()
    if screen is None:
        return
    avail = screen.availableGeometry()
    w, h = min(DEFAULT_SIZE[0], int(avail.width() * 0.95)), min(DEFAULT_SIZE[1], int(avail.height() * 0.92))
    window.resize(max(800, w), max(600, h))


class Screenshot:
    """Waits until the worker is idle with a trace drawn (or a failure shown), then grabs."""

    def __init__(self, window, path: str):
        from PySide6.QtCore import QTimer

        self.window, self.path = window, path
        self.error: str | None = None
        self.size = (0, 0)
        self._done = False
        self.done = lambda: None  # set by run(): ends its event loop
        window.idle.connect(self._maybe_shoot)
        self._timeout = QTimer(window)
        self._timeout.setSingleShot(True)
        self._timeout.timeout.connect(lambda: self._shoot(f"timed out after {SCREENSHOT_TIMEOUT_S} s waiting for the model"))
        self._timeout.start(SCREENSHOT_TIMEOUT_S * 1000)

    def _maybe_shoot(self) -> None:
        st = self.window.state
        loaded = st.model_info is not None
        if loaded and st.prompt and st.trace is None and self.window.last_error is None:
            return  # loaded, the trace is about to be asked for
        from PySide6.QtCore import QTimer

        QTimer.singleShot(SCREENSHOT_SETTLE_MS, self._shoot)

    def _shoot(self, error: str | None = None) -> None:
        if self._done:
            return
        if self.window.worker.busy and error is None:
            return  # something new was asked meanwhile; idle fires again
        self._done = True
        from PySide6.QtWidgets import QApplication

        from transformer_viewer.model.errors import ModelError
        from transformer_viewer.viewer.export import png_bytes, write_file

        QApplication.processEvents()
        st = self.window.state
        if error is None and st.trace is None:
            error = self.window.last_error or (
                "the prompt is empty; pass some text with --prompt" if not (st.prompt or "").strip()
                else "no trace was drawn")
        error = error or self.window.sae_menu.first_failure  # an --sae that did not open: no screenshot
        try:
            if error is None:  # a failed screenshot writes no file: a picture of an error is no screenshot
                image = self.window.grab().toImage()
                self.size = (image.width(), image.height())
                write_file(self.path, png_bytes(image))
        except (OSError, ModelError) as e:
            error = f"{self.path}: {e}"
        finally:
            self.error = error
            self.window.close()
            self.done()
