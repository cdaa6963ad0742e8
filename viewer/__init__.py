"""The PySide6 + pyqtgraph app and the command line. Importing this package imports no Qt."""

from transformer_viewer.viewer import none_guard as _none_guard

_none_guard.apply()  # PySide6 6.12 on Python 3.11 leaks references to None; see none_guard.py
