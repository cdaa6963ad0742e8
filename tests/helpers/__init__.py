"""Helpers shared by every test folder: tiny models and checkpoints (models.py), a loaded main
window (window.py), the command line run in-process (cli.py)."""
