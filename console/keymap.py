"""The user's keymap: binding id -> keys, from a small TOML file, applied with Textual's keymap API.

Looked up in `$CAMPAIGN_KEYMAP`, else `~/.config/campaign-console/keymap.toml`:

    [keys]
    abort = "x"              # binding ids are listed in console/bindings.py
    start_next = "ctrl+n"

A missing file is no keymap; a bad one is a `CampaignError` naming the file and the key.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from runner.campaign.errors import CampaignError

DEFAULT_PATH = Path("~/.config/campaign-console/keymap.toml")


def keymap_path() -> Path:
    env = os.environ.get("CAMPAIGN_KEYMAP")
    return Path(env).expanduser() if env else DEFAULT_PATH.expanduser()


def load_keymap(path: str | Path | None = None, known_ids: set[str] | None = None) -> dict[str, str]:
    p = Path(path).expanduser() if path else keymap_path()
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise CampaignError(f"cannot read the keymap: {exc.strerror}", file=p) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CampaignError(f"not valid TOML: {exc}", file=p) from None
    keys = data.get("keys", {})
    if not isinstance(keys, dict):
        raise CampaignError('expected a [keys] table of binding id = "key"', file=p, field="keys")
    out: dict[str, str] = {}
    for binding_id, value in keys.items():
        if known_ids is not None and binding_id not in known_ids:
            raise CampaignError(
                f"unknown binding id (known: {', '.join(sorted(known_ids))})", file=p, field=f"keys.{binding_id}"
            )
        if not isinstance(value, str) or not value.strip():
            raise CampaignError(
                'expected a key such as "x" or "ctrl+x" (several: "x,ctrl+x")', file=p, field=f"keys.{binding_id}"
            )
        out[binding_id] = value.strip()
    return out
