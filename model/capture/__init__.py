"""A prompt's runs and what they keep: the Session and its caches, the Trace, interventions, the memory budget, what is recomputed on demand."""
