"""RELOAD.md: the exact commands, run from the output folder, that check and reload each deliverable.

Apart from the manifest because it is prose for a person, by artifact format, not the record itself.
"""

from __future__ import annotations

import shlex
from typing import Any

from runner.campaign.objects import Campaign
from runner.campaign.placeholders import expand
from runner.closing.deliverables import RunCheck, Verification


def reload_markdown(campaign: Campaign, verification: Verification, runs: list[dict[str, Any]]) -> str:
    """Exact commands, run from the output folder, that check and reload each approved artifact."""
    lines = [
        f"# Reloading the deliverables of {campaign.name}",
        "",
        "Run these commands from this folder (the one holding `manifest.toml`). Each approved run's "
        "final artifact was reloaded in a new process when this file was written.",
        "",
    ]
    approved = [e for e in runs if e["check"].approved]
    if not approved:
        lines += [
            "No run is approved yet: there is nothing to reload. `manifest.toml` lists every run with its problems.",
            "",
        ]
        return "\n".join(lines)
    for entry in approved:
        check: RunCheck = entry["check"]
        run = check.run
        files = entry["files"]
        artifact = next((f for f in files if f["kind"] == "artifact"), None) or entry.get("artifact_folder")
        lines += [f"## {run.id} (variant `{run.variant}`, {run.category})", ""]
        if check.duplicate_of:
            lines += [f"Re-run of the same configuration as `{check.duplicate_of}`: not a separate deliverable.", ""]
        if check.base_revision:
            base = (check.artifact_check or {}).get("base_model")
            lines += [
                f"Adapter on base model {f'`{base}` at ' if base else ''}revision `{check.base_revision}`"
                f" (as {'its adapter_config.json records' if (check.artifact_check or {}).get('base_revision') else 'the variant declares'}):"
                " load that exact revision first.",
                "",
            ]
        lines += ["Check the bytes:", "", "```sh", "sha256sum -c - <<'EOF'"]
        lines += [f"{f['sha256']}  {f['path']}" for f in files]
        lines += ["EOF", "```", ""]
        if artifact is not None:
            p = shlex.quote(artifact["path"])
            grade = (check.artifact_check or {}).get("grade")
            lines += [
                f"Reload the final artifact ({artifact['bytes']} bytes"
                + (f", grade `{grade}`" if grade else "")
                + ") and grade it in a fresh process:",
                "",
                "```sh",
                f"campaign checkpoint {p} --json",
                "```",
                "",
            ]
            lines += _plain_reload(artifact["path"], check)
        preds = next((f for f in files if f["kind"] == "predictions"), None)
        if preds is not None:
            lines += [
                "Read the predictions:",
                "",
                "```sh",
                'python -c "import json, sys; rows = [json.loads(l) for l in open(sys.argv[1])]; '
                f"print(len(rows), 'predictions')\" {shlex.quote(preds['path'])}",
                "```",
                "",
            ]
        command = run.frozen_variant.get("command")
        if isinstance(command, list):
            lines += [
                "The command that produced it (from `run.toml`, run in the campaign folder):",
                "",
                "```sh",
                " ".join(shlex.quote(expand(str(a), run.id)) for a in command),
                "```",
                "",
            ]
    return "\n".join(lines)


def _plain_reload(path: str, check: RunCheck) -> list[str]:
    """How to load the artifact with its own library alone, by format."""
    p = shlex.quote(path)
    fmt = (check.artifact_check or {}).get("format")
    if fmt in ("safetensors",):
        code = "import sys; from safetensors.torch import load_file; print(sorted(load_file(sys.argv[1])))"
    elif fmt == "peft-adapter":
        code = "import sys; from peft import PeftConfig; print(PeftConfig.from_pretrained(sys.argv[1]))"
    elif fmt == "pickled-module":
        code = "import sys, torch; print(torch.load(sys.argv[1], map_location='cpu', weights_only=False))"
    elif fmt in (None, "campaign", "state-dict", "checkpoint-dict", "lightning"):
        code = (
            "import sys, torch; state = torch.load(sys.argv[1], map_location='cpu', weights_only=True); "
            "print(sorted(state) if isinstance(state, dict) else type(state))"
        )
    else:  # folders (Trainer, Accelerate, DCP, DeepSpeed...): `campaign checkpoint` above reads them
        return []
    note = " (unpickles the training code: run it from the campaign folder)" if fmt == "pickled-module" else ""
    return ["Or with its own library alone" + note + ":", "", "```sh", f'python -c "{code}" {p}', "```", ""]
