"""`campaign wrap-up [FILE] [--cancel | --at TIME]`: see, move or cancel the wrap-up."""

from __future__ import annotations

import argparse
import json
import time

from runner.campaign.errors import CampaignError


def parse_when(text: str, now: float | None = None) -> float:
    """`--at`: "now", "+20m" (from now), or a date and time with a zone."""
    from runner.campaign.durations import parse_when as parse

    try:
        return parse(text, time.time() if now is None else now)
    except ValueError as exc:
        raise CampaignError(f"--at {exc}") from None


def cmd_wrap_up(ns: argparse.Namespace) -> int:
    from runner.campaign.model import load_campaign
    from runner.cli import file_arg
    from runner.daemon.client import request

    campaign = load_campaign(file_arg(ns))
    if ns.cancel and ns.at:
        raise CampaignError("give --cancel or --at, not both")
    args: dict = {"who": "cli"}
    if ns.cancel:
        args["cancel"] = True
    elif ns.at:
        args["at"] = parse_when(ns.at)
    state = request(campaign, "wrap_up", **args)
    if ns.json:
        print(json.dumps(state, indent=2))
        return 0
    print(describe(state))
    return 0


def describe(state: dict) -> str:
    phase = state.get("phase")
    if phase == "none":
        return 'no wrap-up set: add `wrap_up = "45m"` to [bundle], or `campaign wrap-up --at TIME`'
    if phase == "cancelled":
        return "wrap-up cancelled: runs go on until the retrieval deadline (set one again with --at)"
    if phase == "scheduled":
        secs = state.get("seconds") or 0.0
        from runner.campaign.durations import format_span

        return (
            f"wrap-up at {state.get('at')} (in {format_span(max(secs, 0.0))}); retrieval deadline "
            f"{state.get('retrieve_by')}"
        )
    runs = state.get("runs") or {}
    lines = [f"wrap-up {phase} (started {state.get('started_at')})"]
    lines += [f"  {rid}: {how}" for rid, how in runs.items()]
    return "\n".join(lines)


def leaving_lines(snap: dict) -> list[str]:
    """`campaign status`'s lines on leaving the host: retrieval, wrap-up, notifications."""
    import datetime as dt

    lines = []
    got = snap.get("retrieval")
    if got:
        when = dt.datetime.fromtimestamp(float(got["t"]), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        lines.append(
            f"retrieved and verified {when}: {got.get('files')} files, {got.get('bytes')} bytes to {got.get('to')}"
        )
    runner = snap.get("runner") or {}
    wrap = runner.get("wrap_up")
    if isinstance(wrap, dict) and wrap.get("phase") not in (None, "none"):
        lines.append(describe(wrap))
    notify = runner.get("notify")
    if isinstance(notify, dict) and notify.get("urls"):
        failing = notify.get("failing") or []
        lines.append(
            f"notifications: {len(notify['urls'])} URL(s), {notify.get('sent', 0)} sent"
            + "".join(f"; FAILING {f.get('url')}: {f.get('error')}" for f in failing)
        )
    return lines
