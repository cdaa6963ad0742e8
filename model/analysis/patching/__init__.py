"""Activation patching: a clean and a corrupted prompt, one activation of one written into the
other, and how much of the clean answer comes back (`metric.py` says how that is measured,
`grid.py` what a patching experiment returns)."""
