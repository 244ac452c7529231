"""The runner process: its ledger (the only writer), the socket, launching and watching runs, the status snapshot."""
