"""Grading and verification of artifacts: does a checkpoint reload, and how fully."""
