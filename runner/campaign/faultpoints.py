"""Named points where the fault-injection tests kill a process for real (SIGKILL, no clean-up).

`CAMPAIGN_FAULT_AT=<point>` in a runner's or a supervisor's environment makes that process kill
itself the moment it reaches the point: the write points of the end of a run (docs/INTERNALS.md,
"Containment"). Unset, a point costs one dictionary look-up. Nobody sets it outside the tests.
"""

from __future__ import annotations

import os
import signal

FAULT_ENV = "CAMPAIGN_FAULT_AT"

# the runner locked and probed its folder, the ledger not yet opened (a death at start, reported by up)
START_POINT = "runner:starting"

POINTS = (
    "supervisor:after_verdict_json",  # verdict.json written, the tree not yet stopped
    "supervisor:before_exit_json",  # the attempt over, exit.json not yet written
    "supervisor:after_exit_json",  # exit.json written, the supervisor not yet gone
    "runner:end_ingested",  # the run folder read to its end, the ledger not yet told
    "runner:end_recorded",  # the end and its event committed, the slots not yet freed
)


SIGNAL_ENV = "CAMPAIGN_FAULT_SIGNAL"  # another signal than SIGKILL (a number: 7 is SIGBUS)


def fault_point(name: str) -> None:
    """SIGKILL this process here when CAMPAIGN_FAULT_AT names `name` (see POINTS); or the signal
    CAMPAIGN_FAULT_SIGNAL names, which the runner's faulthandler reports in runner.log first."""
    if os.environ.get(FAULT_ENV) == name:
        try:
            sig = int(os.environ.get(SIGNAL_ENV) or signal.SIGKILL)
        except ValueError:
            sig = signal.SIGKILL
        os.kill(os.getpid(), sig)
        os.kill(os.getpid(), signal.SIGKILL)  # a signal that did not end it
