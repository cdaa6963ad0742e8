"""File > Export > "Current head's full pattern": one head's (T, T) float32 pattern at any prompt
length (.npy, or .csv with 9 significant digits, which read back as the same float32),
recomputed and streamed to the file by the worker (PatternExportRequest), never whole in
memory. The status bar shows its progress and a Cancel button like every long task; a
cancelled or failed export leaves no file behind. A new file gets the mode of any ordinary
file (0666 less the umask); a replaced one keeps its own. Written, it gets FILE.manifest.json
beside it when the export options say so (the window's last choice), as every export does."""

from __future__ import annotations

import os

from transformer_viewer.viewer.export import ExportError, check_writable
from transformer_viewer.viewer.worker.patterns import PatternExportRequest

NOTHING_YET = "nothing to export yet: load a model and run a prompt first"


def pattern_request(state, path: str) -> PatternExportRequest:
    """The request for the selected head of the shown trace; one ExportError line when it cannot be."""
    if state.trace is None:
        raise ExportError(NOTHING_YET)
    if os.path.splitext(os.fspath(path))[1].lower() not in (".npy", ".csv"):
        raise ExportError(f"cannot write {os.fspath(path)!r}: a head's full pattern is written as .npy or .csv; "
                          "use a file name ending in .npy or .csv")
    return PatternExportRequest(run_id=state.trace.run_id, layer=state.layer, head=state.head,
                                path=check_writable(path))


def export_pattern(window, path: str):
    """Start writing the selected head's pattern to `path`; returns the request's handle, or
    None after showing the one-line error."""
    try:
        request = pattern_request(window.state, path)
    except ExportError as e:
        window.show_error(str(e))
        return None

    layer, head = request.layer, request.head

    def done(answer) -> None:
        from transformer_viewer.viewer.window.figure_records import record_export

        options = window.figure_options
        try:
            record_export(window, "attention", window.attention, answer.value, 1.0, options.theme, None,
                          options.manifest, options.private, pooled=False, mode="head", layer=layer, head=head)
        except OSError as e:
            window.show_error(f"cannot write {answer.value}.manifest.json: {e.strerror or e}; check the disk and "
                              "the folder")
            return
        window.status.showMessage(f"exported {answer.value}", 5000)

    def failed(failure) -> None:
        if failure.cancelled:
            window.status.showMessage("pattern export cancelled; no file was written", 5000)
        else:
            window.show_error(failure.message)

    return window.worker.submit(request, on_result=done, on_failure=failed)
