"""GUI monkey test: thousands of seeded random actions against the real offscreen window (typing,
pasting hostile text, clicking tokens and heads, masks, layer/head/colormap changes, opening bad
files, exporting to bad paths, closing and floating docks, resizing). A sys.excepthook and a
threading.excepthook record anything that escapes; none may, no message may be multi-line or an
"internal error" (a bug the worker caught), and the window must still answer at the end."""

from __future__ import annotations

import os
import random
import time

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from tests.helpers.hardening import TINY, UncaughtExceptions, new_window, save_tiny
from tests.helpers.monkey import Monkey

SEED = int(os.environ.get("TV_MONKEY_SEED", "20240607"))  # override to explore other sequences
N_ACTIONS = 2400
SETTLE_EVERY = 150  # actions between waits for the worker to catch up


def test_monkey(qtbot, tmp_path, tiny_ckpt, corpus, dialogs, no_cuda):
    bad, marker = corpus
    other = save_tiny(tmp_path / "other.safetensors", seed=3, config=TINY.replace(n_layer=3, n_head=4))
    out = tmp_path / "exports"
    out.mkdir()
    rng = random.Random(SEED)
    bad_paths = [b.path for b in bad]
    window = new_window(qtbot, tmp_path, tiny_ckpt)
    monkey = Monkey(qtbot, window, rng, bad_paths, [tiny_ckpt, other], str(out))
    messages, traces = monkey.listen()
    app = QApplication.instance()
    t0 = time.perf_counter()
    with UncaughtExceptions() as uncaught:
        # The hook sees what escapes a slot (proof that the zero at the end means something).
        QTimer.singleShot(0, lambda: 1 / 0)
        qtbot.wait(20)
        assert len(uncaught.errors) == 1 and "ZeroDivisionError" in uncaught.errors[0]
        uncaught.errors.clear()
        settled = monkey.run(N_ACTIONS, SETTLE_EVERY, uncaught)
        monkey.wind_down(tiny_ckpt, "The final prompt of the monkey test")
        app.processEvents()
    monkey.report(time.perf_counter() - t0, traces, dialogs.shown, messages)
    assert not uncaught.errors, uncaught.errors[0]
    # It really ran the model between the actions (a trace at every settle point and more from
    # the typing itself) and really hit the errors.
    assert settled == N_ACTIONS // SETTLE_EVERY and len(traces) > settled
    assert len(dialogs.shown) > 50
    assert sum(monkey.counts.values()) == N_ACTIONS >= 2000
    assert not os.path.exists(marker)
    monkey.check_end(messages + dialogs.shown)
