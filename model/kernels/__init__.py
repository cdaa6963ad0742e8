"""Speed paths for inference beside the readable decoder: blocked attention, the fused MLP, GEMMs on packed weights, logits by blocks of the vocabulary."""
