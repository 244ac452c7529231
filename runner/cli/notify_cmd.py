"""`campaign notify-test [FILE]`: one test message to every `[notify]` URL, now, from this shell."""

from __future__ import annotations

import argparse
import socket

from runner.campaign.errors import CampaignError


def cmd_notify_test(ns: argparse.Namespace) -> int:
    from runner.campaign.model import load_campaign
    from runner.cli import file_arg
    from runner.daemon.notify import Event, Level, Message, send_once, shown_url

    campaign = load_campaign(file_arg(ns))
    if campaign.notify is None:
        raise CampaignError(
            f'{campaign.path}: no [notify] table: add `[notify]` with `urls = ["ntfy://your-topic"]` (Apprise URLs)'
        )
    message = Message(
        Event.TEST,
        f"[{campaign.name}] test message",
        f"campaign-console can reach you from {socket.gethostname()}; events: {', '.join(campaign.notify.events)}",
        Level.INFO,
    )
    failed = 0
    for url in campaign.notify.urls:
        error = send_once(url, message)
        if error is None:
            print(f"sent     {shown_url(url)}")
        else:
            failed += 1
            print(f"FAILED   {shown_url(url)}: {error}")
    return 1 if failed else 0
