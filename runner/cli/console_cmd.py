"""`campaign console [FILE]`: start the runner if it is not running, then open the console.

Quitting the console leaves the runner and its runs going (`campaign down` stops the runner)."""

from __future__ import annotations

import argparse
import sys


def cmd_console(ns: argparse.Namespace) -> int:
    from runner.campaign.model import load_campaign
    from runner.daemon.control import ensure_running

    campaign = load_campaign(getattr(ns, "file", None))
    from runner.cli import fleet_cmds

    if fleet_cmds.user_side(ns) is not None:  # [[host]] tables: every host's runner over SSH
        return open_console(campaign, several_hosts=True)
    ensure_running(campaign)
    return open_console(campaign)


def open_console(campaign, *, several_hosts: bool = False) -> int:
    """Run the console on an already running runner; says on exit that the runner goes on."""
    from console.app import make_app  # Textual is imported only for this command

    app = make_app(campaign=campaign)  # with [[host]] tables, on your side: every host's runner
    if several_hosts:
        app.run()
        print("console closed; every host's runner goes on (`campaign down` stops them)", file=sys.stderr)
        return int(app.return_code or 0)
    app.run()
    print(f"console closed; the runner goes on (stop it with `campaign down {campaign.root}`)", file=sys.stderr)
    return int(app.return_code or 0)
