"""Saved sessions: what a user was looking at, as a `.tvsession` file of named, versioned parts."""
