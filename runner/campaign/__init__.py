"""The campaign file and planning: the file model, durations, the catalog of prices, the plan against the window."""
