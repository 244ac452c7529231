"""Talking to another machine through the system's OpenSSH: one shared connection per host."""
