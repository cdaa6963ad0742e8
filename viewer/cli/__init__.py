"""Command line: `transformer-viewer` and its subcommands."""
