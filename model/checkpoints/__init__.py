"""Opening and writing checkpoints: every format's reader (formats/), load progress, the bundled model."""
