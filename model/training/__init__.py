"""Training a small model on text: the loop, its batches, the data it reads."""
