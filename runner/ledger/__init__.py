"""The ledger: one SQLite file per campaign (`.campaign/ledger.sqlite`), the record of every run,
attempt, event and decision. Only the runner process writes it; everything else reads it.
"""
