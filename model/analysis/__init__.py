"""Analyses that take a Session: logit lens, head scan, head scores, diffs, direct logit attribution, information-flow routes, attention rollout, generation."""
