"""What must leave the host, with sizes, and the command to paste on your own machine."""

from __future__ import annotations

import shlex

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from console.fmt import fmt_bytes, fmt_iso_local, fmt_span
from console.retrieval import address_note, copy_command, retrieval_items, ssh_target, verified_text


class RetrievalScreen(Screen):
    BINDINGS = [
        Binding("escape,q", "app.pop_screen", "back", id="retrieval.back"),
        Binding("y", "copy", "copy command", id="retrieval.copy"),
    ]
    DEFAULT_CSS = """
    RetrievalScreen Static { padding: 0 1; }
    RetrievalScreen #command { background: $boost; margin: 0 0 1 0; }
    """

    def __init__(self, snapshot: dict, output_dir: str, *, now: float, tz=None, ssh: dict | None = None) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.output_dir = output_dir
        self.now = now
        self.tz = tz
        self.ssh = ssh or {}

    def compose(self) -> ComposeResult:
        items = retrieval_items(self.snapshot, self.output_dir)
        bundle = self.snapshot.get("bundle") or {}
        head = Text()
        head.append("Retrieval", style="bold")
        head.append(f" — files must be off the host by {fmt_iso_local(bundle.get('retrieve_by'), self.tz)}")
        from console.fmt import parse_iso

        when = parse_iso(bundle.get("retrieve_by"))
        if when is not None:
            left = when.timestamp() - self.now
            head.append(
                f" ({'in ' + fmt_span(left) if left > 0 else 'PAST, ' + fmt_span(-left) + ' ago'})",
                style="bold" if left > 0 else "bold red",
            )
        table = Table(box=None, expand=True, pad_edge=False)
        table.add_column("what", no_wrap=True)
        table.add_column("size", justify="right", no_wrap=True)
        table.add_column("path / note", overflow="fold")
        root = (self.snapshot.get("campaign") or {}).get("root") or ""
        total = 0
        for item in items:
            rel = str(item.path)
            if root and rel.startswith(root):
                rel = rel[len(root) :].lstrip("/") or "."
            warn = item.kind == "checkpoint" and item.bytes == 0
            total += item.bytes
            table.add_row(
                Text(item.kind, style="red" if warn else ""),
                fmt_bytes(item.bytes) if not warn else "-",
                Text(rel + (f"  {item.note}" if item.note else ""), style="red" if warn else ""),
            )
        if not items:
            table.add_row("-", "-", "nothing yet: no deliverables, no verified checkpoint")
        done = verified_text(self.snapshot.get("retrieval"), self.tz, short=False)
        target, port = ssh_target(**self.ssh)
        pull = f"campaign pull {'-p ' + str(port) + ' ' if port else ''}{shlex.quote(f'{target}:{root}')}"
        with VerticalScroll():
            yield Static(head)
            if done:
                yield Static(Text(done[0].upper() + done[1:], style="bold green"), id="verified")
            else:
                yield Static(
                    Text(f"not retrieved yet: on your own machine, `{pull}` copies and verifies", style="yellow")
                )
            yield Static(table)
            self.command = copy_command(self.snapshot, items, **self.ssh)
            yield Static(Text(f"total {fmt_bytes(total)} — on your own machine, paste (y copies it):", style="dim"))
            yield Static(Text(self.command), id="command")
            note = address_note(ssh_target(**{k: v for k, v in self.ssh.items() if k in ("user", "host")})[0])
            if note:
                yield Static(Text(note, style="yellow"))
        yield Footer()

    def action_copy(self) -> None:
        self.app.copy_to_clipboard(self.command)
        self.notify("copied (through the terminal: OSC 52)")
