"""The readable decoder: its config, the model file, its norms, rotary embeddings, hook points and the families' switches; one plain path, which imports no kernel."""
