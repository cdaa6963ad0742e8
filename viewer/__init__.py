"""The PySide6 + pyqtgraph app and the command line. Importing this package imports no Qt."""
