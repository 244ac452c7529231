"""`campaign up | down | status | start | abort | resume`: the runner's commands.

Each is a thin request to the runner (runner.daemon.client); `status` also works while the runner is down,
from the ledger read-only, and says so. `start`, `abort` and `resume` start the runner first when
it is not running, as the console does. Exit 0 on success, 2 on bad input, 1 on any other failure.
"""

from __future__ import annotations

import argparse
import datetime as dt
import getpass
import math
import socket
import sys
import time

import msgspec

from runner.campaign.durations import format_duration, format_span
from runner.campaign.errors import CampaignError, RunnerUnavailable
from runner.campaign.host_view import as_host, record_host
from runner.campaign.model import load_campaign, resolve_campaign_path
from runner.campaign.objects import Campaign
from runner.campaign.statedir import StatePaths, paths_for
from runner.cli import file_arg, fleet_cmds
from runner.daemon import client, control
from runner.daemon.status_json import status_ready
from runner.ledger import queries
from runner.ledger.states import RunState


def _campaign(ns: argparse.Namespace) -> Campaign:
    return load_campaign(file_arg(ns))


def _campaign_or_runner(ns: argparse.Namespace) -> Campaign | StatePaths:
    """The campaign; or, when its file no longer parses but its runner answers, the folder.

    The runner keeps the file it loaded, so a half-edited campaign.toml must not stop the user
    from seeing or stopping what runs: the error is shown as a warning and the request goes on.
    """
    try:
        return load_campaign(file_arg(ns))
    except CampaignError as exc:
        paths = paths_for(resolve_campaign_path(file_arg(ns)))
        if not paths.socket.exists() or client.ping(paths) is None:
            raise
        print(
            f"campaign: warning: {exc}\ncampaign: warning: the runner goes on with the file as it "
            f"loaded it; fix the file before `campaign start` or `campaign up`",
            file=sys.stderr,
        )
        return paths


def _who() -> str:
    try:
        return f"{getpass.getuser()}@{socket.gethostname()}"
    except Exception:
        return "cli"


def _ensure(campaign: Campaign) -> None:
    if not control.is_running(campaign):
        res = control.up(campaign)
        print(f"campaign: {res.message}", file=sys.stderr)
        if res.warning:
            print(f"campaign: warning: {res.warning}", file=sys.stderr)


def _ensure_for_run(campaign: Campaign, run_id: str) -> None:
    """Start the runner for `abort`/`resume` of a run the ledger holds; an unknown id is refused
    first, since starting the runner launches the plan (a typo must not do that)."""
    if control.is_running(campaign):
        return
    from runner.ledger import store as L

    path = paths_for(campaign).ledger
    known = False
    if path.exists():
        conn = L.connect(path, readonly=True)
        try:
            known = queries.run_exists(conn, run_id)
        finally:
            conn.close()
    if not known:
        raise CampaignError(f"no run {run_id!r} in this campaign (see `campaign status`)", file=campaign.path)
    _ensure(campaign)


def _in_or_ago(seconds: float | None) -> str:
    """ "in 2h 05m" ahead, "passed 1m 06s ago" once gone (never "in -1m 06s")."""
    if isinstance(seconds, int | float) and seconds < 0:
        return f"passed {format_span(-seconds)} ago"
    return f"in {format_span(seconds)}"


def _request(campaign: Campaign | StatePaths, op: str, **args) -> dict | None:
    try:
        return client.request(campaign, op, **args)
    except client.RequestFailed as exc:
        print(f"campaign: {exc}", file=sys.stderr)
        return None


def cmd_up(ns: argparse.Namespace) -> int:
    if (several := fleet_cmds.user_side(ns)) is not None:
        return fleet_cmds.cmd_up(several, ns)
    campaign = _campaign(ns)
    if getattr(ns, "host", None):
        record_host(campaign, ns.host)
    as_host(campaign)  # a file with [[host]] tables needs to know which host this folder is
    res = control.up(campaign)
    print(res.message)
    if res.warning:
        print(f"campaign: warning: {res.warning}", file=sys.stderr)
    return 0


def cmd_down(ns: argparse.Namespace) -> int:
    if (several := fleet_cmds.user_side(ns)) is not None:
        return fleet_cmds.cmd_down(several, ns)
    campaign = _campaign_or_runner(ns)
    res = control.down(campaign, abort_runs=bool(getattr(ns, "abort_runs", False)))
    print(res.message)
    return 0


def cmd_status(ns: argparse.Namespace) -> int:
    if (several := fleet_cmds.user_side(ns)) is not None:
        return fleet_cmds.cmd_status(several, ns)
    campaign = _campaign_or_runner(ns)
    try:
        snap = client.request(campaign, "status")
    except RunnerUnavailable as exc:
        if isinstance(campaign, StatePaths):
            raise  # the file is broken and the runner just went away
        from runner.daemon.status import offline_snapshot  # the ledger read here: only when no runner answers

        snap = offline_snapshot(campaign, runner_error=str(exc))
    if getattr(ns, "json", False):
        # msgspec writes the same text as json.dumps(indent=1), ten times faster (10,000 runs: ~9 MB)
        print(msgspec.json.format(msgspec.json.encode(status_ready(snap)), indent=1).decode())
    else:
        print(render_status(snap))
    return 0


def cmd_start(ns: argparse.Namespace) -> int:
    if (several := fleet_cmds.user_side(ns)) is not None:
        return fleet_cmds.cmd_start(several, ns)
    campaign = _campaign(ns)
    try:
        campaign.variant(ns.variant)
    except KeyError:
        # refused before `_ensure`: a typo must not start the runner (which launches the plan)
        names = ", ".join(v.name for v in campaign.variants)
        raise CampaignError(
            f"variant {ns.variant!r} is not declared in the campaign file (declared: {names})", file=campaign.path
        ) from None
    _ensure(campaign)
    out = _request(campaign, "start", variant=ns.variant)
    if out is None:
        return 1
    if out.get("state") == RunState.REFUSED:
        print(f"campaign: run {out['run']} refused: {out.get('reason')}", file=sys.stderr)
        return 1
    note = f" ({out['note']})" if out.get("note") else ""
    print(f"{out['run']}: {out['state']}{note}")
    return 0


def cmd_abort(ns: argparse.Namespace) -> int:
    if (several := fleet_cmds.user_side(ns)) is not None:
        return fleet_cmds.cmd_run_op(several, ns, "abort", reason=getattr(ns, "reason", None), by=_who())
    campaign = _campaign_or_runner(ns)
    if not isinstance(campaign, StatePaths):
        _ensure_for_run(campaign, ns.run)
    out = _request(campaign, "abort", run=ns.run, reason=getattr(ns, "reason", None), by=_who())
    if out is None:
        return 1
    print(f"{out['run']}: {out['state']}")
    return 0


def cmd_resume(ns: argparse.Namespace) -> int:
    if (several := fleet_cmds.user_side(ns)) is not None:
        return fleet_cmds.cmd_run_op(several, ns, "resume")
    campaign = _campaign(ns)
    _ensure_for_run(campaign, ns.run)
    try:
        out = client.request(campaign, "resume", run=ns.run)
    except client.RequestFailed as exc:
        raise CampaignError(str(exc), file=campaign.path) from None  # a refusal: exit 2, like bad input
    if out.get("state") == RunState.REFUSED:
        print(f"campaign: run {out['run']} refused: {out.get('reason')}", file=sys.stderr)
        return 2
    note = f" ({out['note']})" if out.get("note") else ""
    print(f"{out['run']}: {out['state']}{note}")
    return 0


# ---------------------------------------------------------------------------------------------


def _fmt_num(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if isinstance(v, float) and (not math.isfinite(v) or abs(v) >= 1e5 or (v != 0 and abs(v) < 1e-3)):
        return f"{v:.3g}"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _utc(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%H:%M UTC")


def render_status(snap: dict) -> str:
    """The snapshot for a person: the runner, the window, the GPUs, one line per run."""
    lines = []
    c, b = snap["campaign"], snap["bundle"]
    r = snap.get("runner")
    slots = snap.get("slots") or {}
    if r:
        lines.append(
            f"{c['name']}: runner pid {r['pid']}, slots {slots.get('busy')}/{slots.get('total')}"
            + (f" ({slots['note']})" if slots.get("note") else "")
        )
        if r.get("storage") and r["storage"] != "everything in the campaign folder":
            lines.append(f"storage: {r['storage']}")  # what the folder's file system could not hold
    else:
        lines.append(f"{c['name']}: {snap.get('runner_error') or 'the runner is not running'}")
    lines.append(
        f"bundle: {b['provider']} {b['gpu']} {b['plan']}, expires {b['expires_at']} "
        f"({_in_or_ago(b['remaining_seconds'])}), retrieve by {b['retrieve_by']} "
        f"({_in_or_ago(b['retrieve_seconds'])}) [{b['warning']}]"
    )
    if b.get("warning") == "not_open":
        lines.append(f"the rental window opens at {b['started_at']}: nothing launches before then")
    if snap.get("gpus"):
        for g in snap["gpus"]:
            mem = (
                f"{(g['memory_used_bytes'] or 0) / 2**30:.1f}/{(g['memory_total_bytes'] or 0) / 2**30:.1f} GiB"
                if g.get("memory_total_bytes")
                else "N/A"
            )
            lines.append(
                f"gpu {g['index']}: {g.get('name') or 'N/A'} util {_fmt_num(g.get('utilization_percent'))}% mem {mem}"
            )
    else:
        lines.append(f"gpus: none ({snap.get('nvml_error') or 'no GPU'})")
    runs = snap.get("runs") or []
    if runs:
        lines.append(f"{'RUN':<24} {'STATE':<9} {'STEP':>8} {'LOSS':>9} {'CKPT':>10} {'NEXT':>8}  REASON")
        for run in runs:
            ck = "-"
            if run.get("checkpoint_step") is not None:
                mark = {True: "ok", False: "bad", None: "?"}[run.get("checkpoint_verified")]
                ck = f"{run['checkpoint_step']}:{mark}"
            nxt = (
                format_duration(run["next_checkpoint_seconds"])
                if run.get("next_checkpoint_seconds") is not None
                else "-"
            )
            lines.append(
                f"{run['id']:<24} {run['state']:<9} {_fmt_num(run.get('step')):>8} "
                f"{_fmt_num(run.get('loss')):>9} {ck:>10} {nxt:>8}  {run.get('stop_reason') or ''}"
            )
            if run.get("metrics_warning"):  # the regex/format follows nothing
                lines.append(f"  warning: {run['metrics_warning']}")
            if (run.get("verify_waiting") or 0) > 1:  # verification falling behind saving
                lines.append(
                    f"  {run['verify_waiting']} checkpoints wait for verification, the oldest for "
                    f"{format_span(run.get('verify_lag_seconds'))}"
                )
    else:
        lines.append("no runs yet")
    if snap.get("queue"):
        lines.append("queue: " + ", ".join(snap["queue"]))
    pilot = snap.get("pilot") or {}
    if pilot.get("state") == "awaiting_decision":
        until = pilot.get("continues_at")
        when = f" until {_utc(until)} ({_in_or_ago(until - time.time())})" if isinstance(until, float | int) else ""
        lines.append(
            f"pilot over ({pilot.get('basis')}): launches held for the decision{when}, then the runner "
            "continues by itself; decide: campaign decide continue | cut VARIANT... | revisit"
        )
    elif pilot.get("state") == "decided" and pilot.get("decision"):
        from runner.closing.report import decision_words

        d = pilot["decision"]
        lines.append(f"pilot decided by {d.get('who')}: {decision_words(d)}")
    from runner.cli.wrapup_cmd import leaving_lines

    lines += leaving_lines(snap)
    return "\n".join(lines)
