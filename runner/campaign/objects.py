"""The campaign file's typed, immutable objects and the limits its fields are checked against.

They live apart from `model` (which loads and checks the file) so that every part of the runner can
name a `Campaign`, a `Variant` or a `Rule` without pulling in the loader.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.campaign.durations import duration_words
from runner.campaign.hosts import Host

CATEGORIES = ("essential", "useful", "exploratory")
RULE_KINDS = ("nonfinite", "below", "above", "truncated", "no_resume_point", "stalled")
RULE_KEYS = {  # the fields each rule kind takes, besides `kind` and `variants`
    "nonfinite": {"metric"},
    "below": {"metric", "threshold", "after_step"},
    "above": {"metric", "threshold", "after_step"},
    "truncated": {"max_fraction"},
    "no_resume_point": {"within"},
    "stalled": {"within"},
}
METRICS_FORMATS = ("hf",)  # built-in stdout line formats (runner.supervision.metric_stream)
PHASE_USES = ("gpu", "host", "human")
VARIANT_NAME = re.compile(r"^[a-z0-9_-]+$")
MAX_VARIANT_NAME = 64  # a run's folder is `<name>-<8 hex>`: well inside any file system's limits
MAX_HOURS = 24.0 * 366 * 10  # ten years: anything longer is a typo, and overflows date arithmetic
MAX_USD = 1e9
MAX_GPUS = 64  # GPUs on one host: the plan lays out one lane per GPU
MAX_INT = 2**63 - 1  # what SQLite and TOML hold
# The keys each table of the campaign file accepts: the loader refuses any other (naming these),
# and docs/CAMPAIGN_FILE.md documents each (tests/test_docs_reference.py checks it does).
TOP_LEVEL_KEYS = frozenset(
    {"campaign", "decision", "bundle", "phase", "variant", "rule", "spend", "host", "notify", "pilot"}
)
CAMPAIGN_KEYS = frozenset({"name", "question", "output_dir"})
DECISION_KEYS = frozenset({"metric", "higher_is_better", "min_gain", "control"})
BUNDLE_KEYS = frozenset(
    {
        "provider",
        "gpu",
        "days",
        "started_at",
        "price_usd",
        "gpus",
        "order_ref",
        "retrieval_hours",
        "warn_hours",
        "catalog",
        "wrap_up",
    }
)
BUNDLE_EXTRA_KEYS = frozenset({"name", "ssh", "port", "dir", "campaign"})  # a [[host]] table's own keys
PHASE_KEYS = frozenset({"name", "hours", "uses", "with", "before_window", "variants"})
VARIANT_KEYS = frozenset(
    {
        "name",
        "category",
        "command",
        "hours",
        "checkpoint_every",
        "gpus",
        "resume_command",
        "metrics_regex",
        "checkpoint_glob",
        "base_revision",
        "adapter",
        "expects",
        "env",
        "host",
        "trust_pickled_module",
        "metrics_format",
    }
)
RULE_COMMON_KEYS = frozenset({"kind", "variants"})  # besides RULE_KEYS[kind]
SPEND_KEYS = frozenset({"what", "usd"})
NOTIFY_KEYS = frozenset({"urls", "events"})
PILOT_KEYS = frozenset({"wait"})


def known_keys() -> dict[str, frozenset[str]]:
    """Every table of the file and the keys it accepts ("rule": every kind's keys together)."""
    return {
        "file": TOP_LEVEL_KEYS,
        "campaign": CAMPAIGN_KEYS,
        "decision": DECISION_KEYS,
        "bundle": BUNDLE_KEYS,
        "host": BUNDLE_KEYS | BUNDLE_EXTRA_KEYS,
        "phase": PHASE_KEYS,
        "variant": VARIANT_KEYS,
        "rule": RULE_COMMON_KEYS.union(*RULE_KEYS.values()),
        "spend": SPEND_KEYS,
        "notify": NOTIFY_KEYS,
        "pilot": PILOT_KEYS,
    }


@dataclass(frozen=True)
class Decision:
    """What answers the question, fixed before the trial."""

    metric: str
    control: str
    higher_is_better: bool = True
    min_gain: float = 0.0


DEFAULT_PILOT_WAIT_S = 2 * 3600.0  # `[pilot] wait`: how long launches wait for a decision


@dataclass(frozen=True)
class PilotSettings:
    """`[pilot]`: how long the runner holds launches for the pilot decision before it continues
    by itself (an unattended rental must not sit idle for ever)."""

    wait_s: float = DEFAULT_PILOT_WAIT_S


@dataclass(frozen=True)
class Bundle:
    provider: str
    gpu: str
    days: int
    started_at: dt.datetime  # aware, UTC
    price_usd: float
    price_from_catalog: bool
    gpus: int
    retrieval_hours: float = 2.0
    warn_hours: float = 12.0  # the console warns this long before the retrieval deadline
    order_ref: str | None = None
    catalog: str | None = None  # the user's catalog file, when not the built-in one
    wrap_up_s: float | None = None  # wrap up this long before the retrieval deadline (None: never)

    @property
    def window_hours(self) -> float:
        return self.days * 24.0

    @property
    def expires_at(self) -> dt.datetime:
        return self.started_at + dt.timedelta(days=self.days)

    @property
    def retrieve_by(self) -> dt.datetime:
        return self.expires_at - dt.timedelta(hours=self.retrieval_hours)

    @property
    def plan_label(self) -> str:
        return f"{self.days}d"

    @property
    def wrap_up_at(self) -> dt.datetime | None:
        if self.wrap_up_s is None:
            return None
        return self.retrieve_by - dt.timedelta(seconds=self.wrap_up_s)


# What `[notify] events` may name; all of them by default.
NOTIFY_EVENTS = ("expiry", "rule_stop", "run_failed", "pilot_waiting", "wrap_up", "retrieval_verified")


@dataclass(frozen=True)
class Notify:
    urls: tuple[str, ...]  # Apprise URLs (ntfy://, mailto://, slack://, json://, ...)
    events: tuple[str, ...] = NOTIFY_EVENTS


@dataclass(frozen=True)
class Phase:
    name: str
    uses: str = "gpu"
    hours: float | None = None  # None for a phase that only runs variants
    variants: tuple[str, ...] = ()
    with_: str | None = None
    before_window: bool = False


@dataclass(frozen=True)
class Variant:
    name: str
    category: str
    command: tuple[str, ...]
    hours: float
    checkpoint_every_s: float | None = None
    gpus: int = 1
    resume_command: tuple[str, ...] | None = None
    metrics_regex: str | None = None
    checkpoint_glob: str | None = None
    base_revision: str | None = None
    adapter: bool = False
    expects: tuple[str, ...] = ()
    # the run's checkpoints are pickled nn.Modules (torch.save(model)) the user trusts to be
    # reloaded by unpickling their code; part of the run's identity when set
    trust_pickled_module: bool = False
    metrics_format: str | None = None  # a built-in stdout format ("hf": the HF Trainer's log lines)
    env: tuple[tuple[str, str], ...] = ()  # sorted (name, value) pairs, part of the run's identity
    host: str | None = None  # the [[host]] it is placed on; None: the plan's split places it


@dataclass(frozen=True)
class Rule:
    kind: str
    metric: str | None = None
    threshold: float | None = None
    after_step: int = 0
    max_fraction: float | None = None
    within_s: float | None = None
    variants: tuple[str, ...] = ()  # empty: every variant

    def applies_to(self, variant: str) -> bool:
        return not self.variants or variant in self.variants

    def describe(self) -> str:
        """One short line a person reads in a table: what breaks this rule."""
        if self.kind == "nonfinite":
            return f"{self.metric} not finite"
        if self.kind == "below":
            return f"{self.metric} < {self.threshold:g} from step {self.after_step}"
        if self.kind == "above":
            return f"{self.metric} > {self.threshold:g} from step {self.after_step}"
        if self.kind == "truncated":
            return f"truncated fraction > {self.max_fraction:g}"
        if self.kind == "no_resume_point":
            return f"no verified checkpoint within {duration_words(self.within_s or 0.0)} of the start"
        return f"no new metric for {duration_words(self.within_s or 0.0)}"


@dataclass(frozen=True)
class Spend:
    what: str
    usd: float


@dataclass(frozen=True)
class Campaign:
    path: Path  # the campaign file
    name: str
    question: str
    output_dir: str
    bundle: Bundle
    phases: tuple[Phase, ...]
    variants: tuple[Variant, ...]
    rules: tuple[Rule, ...]
    spend: tuple[Spend, ...] = ()
    decision: Decision | None = None
    pilot: PilotSettings = field(default_factory=PilotSettings)
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    hosts: tuple[Host, ...] = ()  # [[host]] tables; empty: one host, the [bundle]
    this_host: str | None = None  # set by `hosts.on_host` in the runner of one host
    notify: Notify | None = None

    @property
    def root(self) -> Path:
        """The campaign folder: everything the tool writes stays inside it."""
        return self.path.parent

    @property
    def state_dir(self) -> Path:
        return self.root / ".campaign"

    @property
    def runs_dir(self) -> Path:
        return self.root / "runs"

    @property
    def output_path(self) -> Path:
        return self.root / self.output_dir

    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(name)

    def rules_for(self, variant: str) -> tuple[Rule, ...]:
        return tuple(r for r in self.rules if r.applies_to(variant))
