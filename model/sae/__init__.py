"""Sparse autoencoders read from disk beside the model: their config, the module, and the readers."""
