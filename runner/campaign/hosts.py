"""`[[host]]` tables: one campaign over several rented hosts, each with its own bundle.

A host is reached by OpenSSH (`ssh` is an `~/.ssh/config` alias or `user@address`, `port` when
the provider maps one), keeps the campaign in `dir` there and runs the tool as `campaign` (a
command, for a virtualenv that a non-interactive SSH command does not activate). Its bundle is
its own: each window opens and expires on its own. Bundle keys a host leaves out come from
`[bundle]` when the file has one (never `price_usd` nor `order_ref`: they belong to one order). A variant names its `host`, or the plan's split places it.

Only the parsing and the checks that need the whole file live here; `model` calls `read_hosts`.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runner.campaign.model import _Reader
    from runner.campaign.objects import Bundle, Campaign, Variant

HOST_NAME = re.compile(r"^[a-z0-9_-]+$")
DEFAULT_COMMAND = "campaign"


@dataclass(frozen=True)
class Host:
    name: str
    ssh: str  # an ~/.ssh/config alias or user@address
    dir: str  # the campaign folder on that host
    bundle: Bundle
    port: int | None = None
    campaign: str = DEFAULT_COMMAND  # the tool's command there (a shell word list)


def read_hosts(reader: _Reader, variants: tuple[Variant, ...]) -> tuple[Host, ...]:
    """The [[host]] tables, checked against each other and against the variants placed on them."""
    t = "host"
    items = reader.array(t)
    if not items:
        return ()
    # a price and an order reference belong to one order: never inherited from [bundle]
    defaults = {k: v for k, v in reader.table("bundle").items() if k not in ("price_usd", "order_ref")}
    out: list[Host] = []
    for i, tbl in enumerate(items):
        name = reader.get(tbl, "name", str, t, i, required=True)
        if not HOST_NAME.match(name):
            raise reader.fail(f"{name!r} may hold only a-z, 0-9, '_' and '-'", t, i, "name")
        if any(h.name == name for h in out):
            raise reader.fail(f"{name!r} is declared twice", t, i, "name")
        ssh = reader.get(tbl, "ssh", str, t, i, required=True)
        if not ssh.strip() or any(c.isspace() for c in ssh) or ssh.startswith("-"):
            raise reader.fail(f"expected an ssh alias or user@address, got {ssh!r}", t, i, "ssh")
        port = reader.get(tbl, "port", int, t, i)
        if port is not None and not 1 <= port <= 65535:
            raise reader.fail(f"must be a TCP port (1-65535), got {port}", t, i, "port")
        folder = reader.get(tbl, "dir", str, t, i, required=True)
        if not folder.strip():
            raise reader.fail("must name the campaign folder on that host", t, i, "dir")
        command = reader.get(tbl, "campaign", str, t, i, default=DEFAULT_COMMAND)
        if not command.strip():
            raise reader.fail("must name the tool's command on that host", t, i, "campaign")
        bundle = reader.bundle({**defaults, **tbl}, t, i)
        out.append(Host(name=name, ssh=ssh, dir=folder, bundle=bundle, port=port, campaign=command))
    by_name = {h.name: h for h in out}
    most = max(h.bundle.gpus for h in out)
    for i, v in enumerate(variants):
        if v.host is not None:
            host = by_name.get(v.host)
            if host is None:
                raise reader.fail(
                    f"names host {v.host!r}, which is not declared (declared: {', '.join(by_name)})",
                    "variant",
                    i,
                    "host",
                )
            if v.gpus > host.bundle.gpus:
                raise reader.fail(
                    f"{v.name!r} needs {v.gpus} GPUs on one host; host {host.name!r} "
                    f"({host.bundle.gpu}) has {host.bundle.gpus} (two hosts never pool GPUs)",
                    "variant",
                    i,
                    "gpus",
                )
        elif v.gpus > most:
            raise reader.fail(
                f"{v.name!r} needs {v.gpus} GPUs on one host; the most any declared host has is {most} "
                "(two hosts never pool GPUs)",
                "variant",
                i,
                "gpus",
            )
    return tuple(out)


def host_named(campaign: Campaign, name: str) -> Host:
    for h in campaign.hosts:
        if h.name == name:
            return h
    declared = ", ".join(h.name for h in campaign.hosts) or "none"
    raise KeyError(f"no host {name!r} in {campaign.path} (declared: {declared})")


def on_host(campaign: Campaign, name: str) -> Campaign:
    """The campaign as the runner on host `name` sees it: that host's bundle is *the* bundle
    (its window, its price, its GPUs), and it knows which host it is."""
    host = host_named(campaign, name)
    return dataclasses.replace(campaign, bundle=host.bundle, this_host=name)


def total_price_usd(campaign: Campaign) -> float:
    """Every bundle the campaign rents, summed (one bundle without [[host]] tables)."""
    if not campaign.hosts:
        return campaign.bundle.price_usd
    return round(sum(h.bundle.price_usd for h in campaign.hosts), 2)
