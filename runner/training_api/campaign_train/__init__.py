"""What a training script imports: metric reporting, checkpoints, predictions.

Self-contained on purpose: it imports the standard library and torch, never the runner, so a
script run by another interpreter (its own virtualenv or conda env) can use it from this folder
alone. The runner reads the files it writes through the torch-free modules here.
"""
