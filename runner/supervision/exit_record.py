"""How an attempt ended, as the runner reads it: `exit.json`, and `output.log`'s last line.

Apart from the supervisor's loop because these are written (or read back) outside it too: when
the command cannot even start, and when the reason a run failed is looked up in its output.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from campaign_train.atomic import write_json_atomic

OUTPUT_LOG = "output.log"


def fail_before_start(run_dir: Path, attempt: int, message: str, returncode: int) -> None:
    """The command could not start: say why in output.log and write exit.json so the run reads
    as failed instead of 'supervisor lost'."""
    try:
        with open(run_dir / OUTPUT_LOG, "ab") as f:
            f.write(f"--- supervisor could not start the run: {message}\n".encode())
        write_json_atomic(
            run_dir / "exit.json",
            {
                "attempt": attempt,
                "returncode": returncode,
                "signal": None,
                "ended_at": time.time(),
                "pid": None,
                "killed_by": None,
                "error": message,
            },
        )
    except OSError:
        pass


def last_output_line(log: Path, tail_bytes: int = 8192) -> str | None:
    """The run's last line of output (a traceback's last line names the error), the
    supervisor's own `---` lines left out; for a failed run's reason."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - tail_bytes))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        text = line.strip()
        if text and not text.startswith("--- "):
            return text[:300]
    return None
