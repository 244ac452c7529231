"""What a supervisor runs: the frozen `run.toml` and this attempt's `launch.json`, read and checked.

Apart from the supervisor's loop because it is all checked before anything starts (a bad rule or
argv fails here, with the file and field named), and it builds the training process's environment.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from campaign_train.atomic import read_json
from runner.campaign.durations import parse_duration
from runner.campaign.errors import CampaignError
from runner.campaign.placeholders import expand_opt
from runner.campaign.statedir import paths_for
from runner.import_paths import training_env
from runner.supervision.line_parsers import line_parser
from runner.supervision.rules import Judge

DEFAULT_GRACE = 30.0


class LaunchSpec:
    """What to run: the frozen run.toml and this attempt's launch.json, checked."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        toml_path = run_dir / "run.toml"
        try:
            self.config = tomllib.loads(toml_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise CampaignError("the run folder has no run.toml", file=toml_path) from None
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise CampaignError(f"cannot read: {exc}", file=toml_path) from None
        launch_path = run_dir / "launch.json"
        launch = read_json(launch_path)
        if not isinstance(launch, dict):
            raise CampaignError("missing or not a JSON object", file=launch_path)
        run = self.config.get("run", {})
        self.variant_tbl = self.config.get("variant", {})
        self.run_id = str(run.get("id") or run_dir.name)
        self.variant = str(run.get("variant") or self.variant_tbl.get("name") or "")
        self.attempt = int(launch.get("attempt", 1))
        argv = launch.get("argv") or self.variant_tbl.get("command")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise CampaignError("expected a non-empty list of strings", file=launch_path, field="argv")
        self.argv = argv
        self.grace = float(launch.get("grace_seconds", DEFAULT_GRACE))
        self.resume_from = launch.get("resume_from")
        cgroup = launch.get("cgroup")
        self.cgroup = Path(cgroup) if isinstance(cgroup, str) and os.path.isabs(cgroup) else None
        self.launch_env = {str(k): str(v) for k, v in (launch.get("env") or {}).items()}
        self.root = self._campaign_root(run)
        self.rules = self.config.get("rule", [])
        self.regex = line_parser(self.variant_tbl.get("metrics_regex"), self.variant_tbl.get("metrics_format"))
        self.checkpoint_glob = expand_opt(self.variant_tbl.get("checkpoint_glob"), self.run_id)
        self.trust_pickled_module = bool(self.variant_tbl.get("trust_pickled_module", False))
        every = self.variant_tbl.get("checkpoint_every")
        try:
            self.checkpoint_every = parse_duration(every) if isinstance(every, str) else every
        except ValueError as exc:
            raise CampaignError(str(exc), file=toml_path, field="variant.checkpoint_every") from None
        # the judge is built here so a bad rule fails before anything starts
        Judge(self.rules, variant=self.variant or None, source=toml_path)

    def _campaign_root(self, run: dict) -> Path:
        for key in ("root", "campaign_root", "campaign_dir", "campaign"):
            value = run.get(key)
            if isinstance(value, str) and os.path.isabs(value) and os.path.isdir(value):
                return Path(value)
        return self.run_dir.parent.parent  # <campaign>/runs/<id>/

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({str(k): str(v) for k, v in (self.variant_tbl.get("env") or {}).items()})
        env.update({str(k): str(v) for k, v in (self.config.get("env") or {}).items()})
        env.update(self.launch_env)
        env.update(
            {
                "CAMPAIGN_RUN_ID": self.run_id,
                "CAMPAIGN_RUN_DIR": str(self.run_dir),
                "CAMPAIGN_DIR": str(self.root),
                "CAMPAIGN_ATTEMPT": str(self.attempt),
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.setdefault("CUDA_VISIBLE_DEVICES", "")
        if self.checkpoint_every:
            env["CAMPAIGN_CHECKPOINT_EVERY"] = f"{float(self.checkpoint_every):g}"
        if self.resume_from:
            env["CAMPAIGN_RESUME_FROM"] = str(self.resume_from)
        else:
            env.pop("CAMPAIGN_RESUME_FROM", None)
        return training_env(env, paths_for(self.root).dir)
