"""Supervision of one run: the supervisor process, its stop rules, the metric stream, the process tree, checkpoints seen."""
