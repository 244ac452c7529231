"""`campaign pull`, the side that runs on the user's own machine: list, copy, resume, verify.

It asks the host for the retrieval list (`campaign retrieval DIR --json`: every file with its
bytes and sha256), skips what is already here with the right sha256 (an interrupted pull resumes
where it stopped), copies the rest (rsync or sftp), then checks every file against the list and
says what is missing, changed or extra. Only when everything arrived intact does it tell the host,
which records the verified retrieval in its ledger through its runner. Needs only the standard
library and OpenSSH here: no torch, no GPU.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from campaign_train.formats import sha256_file
from runner.remote.ssh import Address, CopyTool, RemoteError, Session

STATE_FILE = ".campaign-pull.json"  # the last list and outcome, kept beside the files


class Outcome(StrEnum):
    OK = "ok"
    MISSING = "missing"
    CHANGED = "changed"  # arrived with another sha256 than the list's (changed on the host, or torn)
    LIVE = "live"  # a running run's file: arrived, still being written on the host


@dataclass
class PullResult:
    dest: Path
    tool: CopyTool | None
    listed: int = 0
    listed_bytes: int = 0
    skipped: list[str] = field(default_factory=list)  # already here with the right sha256
    copied: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    changed: list[tuple[str, str, str]] = field(default_factory=list)  # (path, expected, got)
    live: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    recorded: dict[str, Any] | None = None
    record_error: str | None = None
    copy_error: str | None = None  # the copy tool's failure; what arrived is verified all the same

    @property
    def ok(self) -> bool:
        return not self.missing and not self.changed

    @property
    def complete(self) -> bool:
        """Everything arrived intact and nothing is still being written: what the host records."""
        return self.ok and not self.live


def sha256_of(path: Path) -> str:
    """sha256 of a local file (campaign_train.formats: an unchanged file is read once)."""
    return sha256_file(path)


def this_machine() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()}"


def _check(local: Path, entry: dict) -> Outcome:
    if not local.is_file():
        return Outcome.MISSING
    if entry.get("live"):
        return Outcome.LIVE
    got = sha256_of(local)
    return Outcome.OK if got == entry["sha256"] else Outcome.CHANGED


def _safe_rel(path: str) -> str:
    """A listed path must stay inside the destination (a hostile or broken list is refused)."""
    p = Path(path)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        raise RemoteError(f"the host listed a path outside the campaign folder: {path!r}")
    return p.as_posix()


def pull(
    address: Address,
    dest: Path | None,
    session: Session,
    *,
    tool: CopyTool | None = None,
    say: Callable[[str], None] = print,
    record: bool = True,
) -> PullResult:
    """List, copy what is not here intact, verify everything; record on the host when all is well."""
    folder = address.path or "."
    raw = session.campaign(["retrieval", folder, "--json"], folder)
    try:
        listing = json.loads(raw)
        entries: list[dict] = list(listing["files"])
        root = str(listing["root"])
    except (ValueError, KeyError, TypeError):
        raise RemoteError(f"{address.host}: `campaign retrieval` did not answer with a retrieval list") from None
    dest = dest if dest is not None else Path(Path(root).name)
    result = PullResult(dest=dest, tool=None, listed=len(entries), listed_bytes=sum(int(e["bytes"]) for e in entries))
    result.notes = [str(n) for n in listing.get("notes") or []]
    say(f"{address.host}: {len(entries)} files, {_size(result.listed_bytes)} to retrieve from {root} into {dest}/")
    wanted: list[str] = []
    for e in entries:
        rel = _safe_rel(e["path"])
        if _check(dest / rel, e) is Outcome.OK:
            result.skipped.append(rel)
        else:
            wanted.append(rel)
    if result.skipped:
        say(f"already here and intact: {len(result.skipped)} files (not copied again)")
    if wanted:
        result.tool = tool or session.copy_tool()
        say(f"copying {len(wanted)} files with {result.tool.value} ...")
        started = time.monotonic()
        try:
            session.fetch(root, wanted, dest, tool=result.tool)
        except RemoteError as exc:
            # some files did not come (rsync exit 23, a name refused): what did is checked all the
            # same, and the report names what is missing
            result.copy_error = str(exc)
            say(f"the copy stopped: {exc}")
        result.copied = [rel for rel in wanted if (dest / rel).is_file()]
        say(f"copied in {time.monotonic() - started:.1f} s")
    listed = set()
    for e in entries:
        rel = _safe_rel(e["path"])
        listed.add(rel)
        outcome = _check(dest / rel, e)
        if outcome is Outcome.MISSING:
            result.missing.append(rel)
        elif outcome is Outcome.CHANGED:
            result.changed.append((rel, e["sha256"], sha256_of(dest / rel)))
        elif outcome is Outcome.LIVE:
            result.live.append(rel)
    for p in sorted(dest.rglob("*")):
        rel = p.relative_to(dest).as_posix()
        if p.is_file() and rel != STATE_FILE and rel not in listed:
            result.extra.append(rel)
    _save_state(dest, listing, result)
    if result.complete and record:
        try:
            out = session.campaign(
                [
                    "retrieval",
                    folder,
                    "--record-verified",
                    "--files",
                    str(result.listed),
                    "--bytes",
                    str(result.listed_bytes),
                    "--to",
                    this_machine(),
                    "--dest",
                    str(dest.resolve()),
                    "--json",
                ],
                folder,
                timeout=60,
            )
            result.recorded = json.loads(out)
        except (RemoteError, ValueError) as exc:
            result.record_error = str(exc)
    return result


def _save_state(dest: Path, listing: dict, result: PullResult) -> None:
    state = {
        "list": listing,
        "checked_at": time.time(),
        "ok": result.ok,
        "missing": result.missing,
        "changed": [p for p, _, _ in result.changed],
        "extra": result.extra,
    }
    tmp = dest / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(state, indent=1), encoding="utf-8")
    os.replace(tmp, dest / STATE_FILE)


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def report_lines(result: PullResult) -> list[str]:
    """What the user reads at the end: every problem by path, then the verdict."""
    lines: list[str] = []
    for path in result.missing:
        lines.append(f"MISSING  {path}")
    for path, expected, got in result.changed:
        lines.append(f"CHANGED  {path}  (the list says sha256 {expected[:12]}…, it arrived as {got[:12]}…)")
    for path in result.live:
        lines.append(f"live     {path}  (its run is still going: it may grow after this copy)")
    for path in result.extra:
        lines.append(f"extra    {path}  (here, but not in the host's list)")
    for note in result.notes:
        lines.append(f"note     {note}")
    if result.copy_error:
        lines.append(f"copy     {result.copy_error}")
    if result.ok and result.live:
        lines.append(
            f"arrived: {result.listed} files ({_size(result.listed_bytes)}) in {result.dest}/, but "
            f"{len(result.live)} belong to runs still going and may change: not a complete retrieval "
            "(the host does not record it); pull again once the runs have ended"
        )
    elif result.ok:
        lines.append(
            f"verified: all {result.listed} files ({_size(result.listed_bytes)}) arrived intact in {result.dest}/"
        )
        if result.recorded is not None:
            lines.append("the host recorded the retrieval as verified")
        elif result.record_error:
            lines.append(f"WARNING: the host could not record the retrieval: {result.record_error}")
    else:
        lines.append(
            f"NOT verified: {len(result.missing)} missing, {len(result.changed)} changed of {result.listed} files; "
            "run the same command again to retry (intact files are not copied again)"
        )
    return lines
