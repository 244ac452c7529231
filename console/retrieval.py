"""What must leave the host before the window ends, and a command to paste on your own machine.

The list: every file of the output folder (the deliverables and their manifest), each run's latest
verified checkpoint (the resume point worth keeping), and each run's small records (run.toml,
metrics, logs, predictions: everything in its folder but the checkpoints). The command is an
`rsync` pulling exactly those paths, keeping their layout under a folder named for the campaign.
"""

from __future__ import annotations

import getpass
import ipaddress
import os
import shlex
import socket
from dataclasses import dataclass
from pathlib import Path

MAX_LISTED = 200


def verified_text(retrieval: dict | None, tz=None, *, short: bool = True) -> str | None:
    """ "retrieved and verified ..." from the snapshot's `retrieval` (None: not yet)."""
    if not retrieval or retrieval.get("t") is None:
        return None
    import datetime as dt

    from console.fmt import fmt_bytes, fmt_iso_local

    when = fmt_iso_local(dt.datetime.fromtimestamp(float(retrieval["t"]), dt.UTC).isoformat(), tz, short=short)
    return (
        f"retrieved and verified {when}: {retrieval.get('files', '?')} files, "
        f"{fmt_bytes(retrieval.get('bytes'))} to {retrieval.get('to') or '?'}"
    )


@dataclass(frozen=True)
class Item:
    kind: str  # "deliverable", "checkpoint", "records"
    path: Path  # absolute
    bytes: int
    note: str = ""
    files: tuple[Path, ...] = ()  # "records": the run folder's files (checkpoints left out)


def _size(path: Path) -> int:
    try:
        if path.is_dir():
            return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        return path.stat().st_size
    except OSError:
        return 0


def retrieval_items(snapshot: dict, output_dir: str = "deliverables") -> list[Item]:
    root = Path((snapshot.get("campaign") or {}).get("root") or ".")
    items: list[Item] = []
    out = root / output_dir
    if out.is_dir():
        files = sorted(p for p in out.rglob("*") if p.is_file())
        for p in files[:MAX_LISTED]:
            items.append(Item("deliverable", p, _size(p)))
        if len(files) > MAX_LISTED:
            rest = files[MAX_LISTED:]
            items.append(Item("deliverable", out, sum(_size(p) for p in rest), f"and {len(rest)} more files"))
    for run in snapshot.get("runs") or []:
        ck = run.get("checkpoint_path")
        if ck and run.get("checkpoint_verified"):
            p = Path(ck)
            if not p.is_absolute():
                p = root / p
            items.append(Item("checkpoint", p, _size(p), f"{run.get('id')} step {run.get('checkpoint_step')}"))
        elif ck:
            items.append(
                Item(
                    "checkpoint",
                    Path(ck),
                    0,
                    f"{run.get('id')}: latest checkpoint NOT verified — "
                    f"{run.get('checkpoint_problem') or 'not checked yet'}",
                )
            )
        run_dir = run.get("run_dir")
        if run_dir and Path(run_dir).is_dir():
            records = [p for p in Path(run_dir).iterdir() if p.is_file()]
            items.append(
                Item(
                    "records",
                    Path(run_dir),
                    sum(_size(p) for p in records),
                    f"{run.get('id')} ({len(records)} file{'' if len(records) == 1 else 's'}, checkpoints excluded)",
                    tuple(sorted(records)),
                )
            )
    return items


def ssh_target(user: str | None = None, host: str | None = None, port: int | None = None) -> tuple[str, int | None]:
    """`user@host` as the user reaches this machine: `$CAMPAIGN_SSH_HOST` (and `$CAMPAIGN_SSH_PORT`)
    when set, else the address of the current SSH connection (SSH_CONNECTION's server side), else
    this host's name."""
    user = user or getpass.getuser()
    if host is None and os.environ.get("CAMPAIGN_SSH_HOST"):
        host = os.environ["CAMPAIGN_SSH_HOST"]
        port_env = os.environ.get("CAMPAIGN_SSH_PORT", "")
        port = port or (int(port_env) if port_env.isdigit() and port_env != "22" else None)
    if host is None:
        conn = os.environ.get("SSH_CONNECTION", "").split()
        if len(conn) == 4:
            host = conn[2]
            port = port or (int(conn[3]) if conn[3].isdigit() and conn[3] != "22" else None)
        else:
            host = socket.getfqdn()
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{user}@{host}", port


def address_note(target: str) -> str | None:
    """A warning when the address is one the user's machine probably cannot reach: a private or
    loopback address is what the SSH server sees behind a provider's NAT or proxy."""
    host = target.rsplit("@", 1)[-1].strip("[]")
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return None
    if addr.is_private or addr.is_loopback:
        return (
            f"{host} is a private address (behind the provider's NAT or proxy?): replace it with the "
            "address you ssh to, or set CAMPAIGN_SSH_HOST (and CAMPAIGN_SSH_PORT) before opening the console"
        )
    return None


def copy_command(
    snapshot: dict, items: list[Item], *, user: str | None = None, host: str | None = None, port: int | None = None
) -> str:
    """An `rsync` to run on your own machine, pulling the listed paths (relative to the campaign
    folder, layout kept) into ./<campaign folder name>/. The paths go in a here-document, one a
    line, so that the command stays paste-able however many there are."""
    root = Path((snapshot.get("campaign") or {}).get("root") or ".")
    target, port = ssh_target(user, host, port)
    paths: list[str] = []

    def add(path: Path) -> None:
        try:
            rel = str(path.relative_to(root))
        except ValueError:
            return  # outside the campaign folder: not ours to pull
        if rel not in paths:
            paths.append(rel)

    for item in items:
        if item.kind == "checkpoint" and item.bytes == 0:
            continue  # not verified: not worth the transfer
        if item.kind == "deliverable" and item.path.is_relative_to(root) and item.path != root:
            add(root / item.path.relative_to(root).parts[0])  # the output folder once, whole
        elif item.kind == "records":
            for f in item.files:
                add(f)
        else:
            add(item.path)
            sidecar = item.path.with_suffix(".json")  # the checkpoint's sidecar (sha256, holds)
            if item.kind == "checkpoint" and sidecar.exists():
                add(sidecar)
    head = "rsync -avrP --files-from=-" + (f" -e {shlex.quote(f'ssh -p {port}')}" if port else "")
    lines = [head, shlex.quote(f"{target}:{root}/"), shlex.quote(f"./{root.name}/") + " <<'END'"]
    # one argument a line, joined by backslash-newline: a narrow terminal wraps nothing mid-word
    return " \\\n  ".join(lines) + "\n" + "\n".join(paths) + "\nEND"
