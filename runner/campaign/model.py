"""The campaign file (`campaign.toml`) as typed, immutable objects.

Loading validates every field the README documents and fails with a `CampaignError` naming the file,
the line (found by `toml_lines`) and the field. Nothing here plans, launches or prices beyond
resolving the bundle's price from the catalog: those are other modules' jobs.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, overload

from runner.campaign.catalog import load_catalog
from runner.campaign.durations import duration_words, parse_duration
from runner.campaign.errors import CampaignError
from runner.campaign.hosts import Host, read_hosts
from runner.campaign.toml_depth import too_deep
from runner.campaign.toml_lines import KeyLines

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
MAX_NESTING = 200  # deeper arrays or inline tables make tomllib itself recurse out of the stack
CAMPAIGN_FILE = "campaign.toml"
BUNDLE_EXTRA_KEYS = {"name", "ssh", "port", "dir", "campaign"}  # a [[host]] table's own keys


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


# ---------------------------------------------------------------------------------------------
# Loading


def resolve_campaign_path(file: str | Path | None) -> Path:
    """A campaign file or its folder (default ./campaign.toml) as an absolute file path."""
    p = Path(file) if file else Path(CAMPAIGN_FILE)
    if p.is_dir():
        p = p / CAMPAIGN_FILE
    return p.absolute()


def load_campaign(file: str | Path | None = None) -> Campaign:
    path = resolve_campaign_path(file)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CampaignError(
            "no campaign file here: run `campaign init` to write one, or name the file or its folder", file=path
        ) from None
    except UnicodeDecodeError as exc:
        raw = path.read_bytes()
        line = raw.count(b"\n", 0, exc.start) + 1
        raise CampaignError("not UTF-8 text: save the file as UTF-8 (TOML requires it)", file=path, line=line) from None
    except OSError as exc:
        raise CampaignError(f"cannot read: {exc.strerror}", file=path) from exc
    return parse_campaign(text, path)


def parse_campaign(text: str, path: Path) -> Campaign:
    deep = too_deep(text, MAX_NESTING)
    if deep is not None:
        line, key = deep
        raise CampaignError(
            f"arrays or tables nested more than {MAX_NESTING} levels deep: no campaign value needs that",
            file=path,
            line=line,
            field=key,
        )
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        raise CampaignError(f"not valid TOML: {exc}", file=path, line=int(m.group(1)) if m else None) from None
    except RecursionError:
        raise CampaignError("not valid TOML: nested too deeply to read", file=path) from None
    return _Reader(data, path, KeyLines(text)).campaign()


class _Reader:
    """Walks the parsed TOML once, checking each table against the fields it may hold."""

    def __init__(self, data: dict[str, Any], path: Path, lines: KeyLines) -> None:
        self.data = data
        self.path = path
        self.lines = lines

    # -- error helpers ------------------------------------------------------------------------
    def fail(self, msg: str, table: str, index: int | None = None, key: str | None = None) -> CampaignError:
        label = table if index is None else f"{table}[{index}]"
        fieldname = f"{label}.{key}" if key else label
        if table == "file" and key:  # a top-level table or key: name it alone
            fieldname = key
        return CampaignError(msg, file=self.path, line=self.lines.line(table, index, key), field=fieldname)

    def check_keys(self, tbl: dict, allowed: set[str], table: str, index: int | None = None) -> None:
        for key in tbl:
            if key not in allowed:
                known = ", ".join(sorted(allowed))
                raise self.fail(f"unknown key {key!r} (known: {known})", table, index, key)

    def get(
        self,
        tbl: dict,
        key: str,
        kind: type | tuple,
        table: str,
        index: int | None = None,
        *,
        required: bool = False,
        default: Any = None,
    ) -> Any:
        if key not in tbl:
            if required:
                raise self.fail("is required", table, index, key)
            return default
        value = tbl[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
        if not ok:
            names = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
            raise self.fail(f"expected {names}, got {_short(value)}", table, index, key)
        if isinstance(value, str) and "\x00" in value:
            raise self.fail(
                "contains a NUL character (\\u0000), which no command, path or name may hold", table, index, key
            )
        if isinstance(value, list) and any(isinstance(x, str) and "\x00" in x for x in value):
            raise self.fail(
                "an item contains a NUL character (\\u0000), which no command or path may hold", table, index, key
            )
        if isinstance(value, float | int) and not isinstance(value, bool):
            if isinstance(value, int) and abs(value) > MAX_INT:
                raise self.fail(f"{_short(value)} is too large (at most {MAX_INT})", table, index, key)
            if isinstance(value, float) and not math.isfinite(value):
                raise self.fail(f"must be a finite number, got {value!r}", table, index, key)
        return value

    @overload
    def str_list(
        self,
        tbl: dict,
        key: str,
        table: str,
        index: int | None = ...,
        *,
        required: Literal[True],
        non_empty: bool = ...,
    ) -> tuple[str, ...]: ...
    @overload
    def str_list(
        self, tbl: dict, key: str, table: str, index: int | None = ..., *, required: bool = ..., non_empty: bool = ...
    ) -> tuple[str, ...] | None: ...
    def str_list(
        self,
        tbl: dict,
        key: str,
        table: str,
        index: int | None = None,
        *,
        required: bool = False,
        non_empty: bool = False,
    ) -> tuple[str, ...] | None:
        value = self.get(tbl, key, list, table, index, required=required)
        if value is None:
            return None
        if not all(isinstance(x, str) for x in value):
            raise self.fail("expected a list of strings", table, index, key)
        if non_empty and not value:
            raise self.fail("must not be empty", table, index, key)
        return tuple(value)

    @overload
    def duration(
        self, tbl: dict, key: str, table: str, index: int | None = ..., *, required: Literal[True]
    ) -> float: ...
    @overload
    def duration(
        self, tbl: dict, key: str, table: str, index: int | None = ..., *, required: bool = ...
    ) -> float | None: ...
    def duration(
        self, tbl: dict, key: str, table: str, index: int | None = None, *, required: bool = False
    ) -> float | None:
        value = self.get(tbl, key, str, table, index, required=required)
        if value is None:
            return None
        try:
            return parse_duration(value)
        except ValueError as exc:
            raise self.fail(str(exc), table, index, key) from None

    @overload
    def positive(
        self,
        tbl: dict,
        key: str,
        table: str,
        index: int | None = ...,
        *,
        required: Literal[True],
        allow_zero: bool = ...,
        upto: float = ...,
    ) -> float: ...
    @overload
    def positive(
        self,
        tbl: dict,
        key: str,
        table: str,
        index: int | None = ...,
        *,
        default: float,
        allow_zero: bool = ...,
        upto: float = ...,
    ) -> float: ...
    @overload
    def positive(
        self,
        tbl: dict,
        key: str,
        table: str,
        index: int | None = ...,
        *,
        required: bool = ...,
        default: None = ...,
        allow_zero: bool = ...,
        upto: float = ...,
    ) -> float | None: ...
    def positive(
        self,
        tbl: dict,
        key: str,
        table: str,
        index: int | None = None,
        *,
        required: bool = False,
        default: float | None = None,
        allow_zero: bool = False,
        upto: float = MAX_HOURS,
    ) -> float | None:
        value = self.get(tbl, key, (int, float), table, index, required=required, default=default)
        if value is not None and (value < 0 or (value == 0 and not allow_zero)):
            raise self.fail(
                f"must be {'zero or more' if allow_zero else 'more than zero'}, got {value!r}", table, index, key
            )
        if value is not None and value > upto:
            raise self.fail(f"{value!r} is more than anyone rents ({upto:g} at most)", table, index, key)
        return float(value) if value is not None else None

    # -- tables -------------------------------------------------------------------------------
    def campaign(self) -> Campaign:
        self.check_keys(
            self.data,
            {"campaign", "decision", "bundle", "phase", "variant", "rule", "spend", "host", "notify", "pilot"},
            "file",
        )
        top = self.table("campaign", required=True)
        self.check_keys(top, {"name", "question", "output_dir"}, "campaign")
        name = self.get(top, "name", str, "campaign", required=True)
        question = self.get(top, "question", str, "campaign", required=True)
        output_dir = self.get(top, "output_dir", str, "campaign", default="deliverables")
        if Path(output_dir).is_absolute() or ".." in Path(output_dir).parts:
            raise self.fail("must be a folder inside the campaign folder", "campaign", None, "output_dir")
        variants = self.variants()
        names = {v.name for v in variants}
        phases = self.phases(names)
        rules = self.rules(names)
        hosts = read_hosts(self, variants)
        bundle = min((h.bundle for h in hosts), key=lambda b: b.started_at) if hosts else self.bundle()
        for i, v in enumerate(variants):
            if not hosts and v.host is not None:
                raise self.fail("names a host, but the file declares no [[host]] table", "variant", i, "host")
            if not hosts and v.gpus > bundle.gpus:
                raise self.fail(
                    f"{v.name!r} needs {v.gpus} GPUs on one host; the {bundle.gpu} bundle has "
                    f"{bundle.gpus} (two bundles never pool GPUs)",
                    "variant",
                    i,
                    "gpus",
                )
        return Campaign(
            path=self.path,
            name=name,
            question=question,
            output_dir=output_dir,
            bundle=bundle,
            phases=phases,
            variants=variants,
            rules=rules,
            spend=self.spend(),
            decision=self.decision(names),
            pilot=self.pilot(),
            raw=self.data,
            hosts=hosts,
            notify=self.notify(),
        )

    def notify(self) -> Notify | None:
        tbl = self.table("notify")
        if not tbl:
            return None
        self.check_keys(tbl, {"urls", "events"}, "notify")
        urls = self.str_list(tbl, "urls", "notify", None, required=True, non_empty=True)
        for url in urls:
            if "://" not in url:
                raise self.fail(
                    f"{url!r} is not an Apprise URL (such as ntfy://topic or json://host/path)", "notify", None, "urls"
                )
        events = self.str_list(tbl, "events", "notify", None) or NOTIFY_EVENTS
        unknown = [e for e in events if e not in NOTIFY_EVENTS]
        if unknown:
            raise self.fail(
                f"unknown event {unknown[0]!r} (known: {', '.join(NOTIFY_EVENTS)})", "notify", None, "events"
            )
        return Notify(urls=tuple(urls), events=tuple(events))

    def table(self, key: str, *, required: bool = False) -> dict:
        value = self.data.get(key)
        if value is None:
            if required:
                raise self.fail(f"the [{key}] table is required", key)
            return {}
        if not isinstance(value, dict):
            raise self.fail(f"expected a [{key}] table", key)
        return value

    def array(self, key: str) -> list[dict]:
        value = self.data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(x, dict) for x in value):
            raise self.fail(f"expected [[{key}]] tables", key)
        return value

    def decision(self, names: set[str]) -> Decision | None:
        tbl = self.table("decision")
        if not tbl:
            return None
        self.check_keys(tbl, {"metric", "higher_is_better", "min_gain", "control"}, "decision")
        control = self.get(tbl, "control", str, "decision", required=True)
        if control not in names:
            raise self.fail(f"names variant {control!r}, which is not declared", "decision", None, "control")
        return Decision(
            metric=self.get(tbl, "metric", str, "decision", required=True),
            control=control,
            higher_is_better=self.get(tbl, "higher_is_better", bool, "decision", default=True),
            min_gain=float(self.get(tbl, "min_gain", (int, float), "decision", default=0.0)),
        )

    def pilot(self) -> PilotSettings:
        tbl = self.table("pilot")
        self.check_keys(tbl, {"wait"}, "pilot")
        wait = self.duration(tbl, "wait", "pilot")
        return PilotSettings(wait_s=DEFAULT_PILOT_WAIT_S if wait is None else wait)

    def bundle(self, tbl: dict | None = None, t: str = "bundle", i: int | None = None) -> Bundle:
        """The [bundle] table, or (from `hosts`) one [[host]]'s bundle fields, `i` its index."""
        if tbl is None:
            tbl = self.table(t, required=True)
        self.check_keys(
            tbl,
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
            | (BUNDLE_EXTRA_KEYS if i is not None else set()),
            t,
            i,
        )
        provider = self.get(tbl, "provider", str, t, i, default="IteraGPU")
        gpu = self.get(tbl, "gpu", str, t, i, required=True)
        days = self.get(tbl, "days", int, t, i, required=True)
        started = self.get(tbl, "started_at", (dt.datetime, str), t, i, required=True)
        if isinstance(started, str):
            try:
                started = dt.datetime.fromisoformat(started.replace("Z", "+00:00"))
            except ValueError:
                raise self.fail(
                    f"expected a date and time such as 2026-11-29T09:00:00Z, got {started!r}", t, i, "started_at"
                ) from None
        if started.tzinfo is None:
            raise self.fail("needs a time zone, e.g. 2026-11-29T09:00:00Z", t, i, "started_at")
        started = started.astimezone(dt.UTC)
        if not 2000 <= started.year <= 2200:
            raise self.fail(f"{started:%Y-%m-%d}: expected a date between the years 2000 and 2200", t, i, "started_at")
        if not 1 <= days <= 3660:
            raise self.fail(f"must be between 1 and 3660, got {days}", t, i, "days")
        catalog_file = self.get(tbl, "catalog", str, t, i)
        catalog_path = (self.path.parent / catalog_file) if catalog_file else None
        if catalog_path is not None and not catalog_path.is_file():
            raise self.fail(f"no catalog file at {catalog_path}", t, i, "catalog")
        catalog = load_catalog(catalog_path)
        offer = catalog.find(provider, gpu)
        if offer is None:
            raise self.fail(
                f"{provider} {gpu!r} is not in the {catalog.source} (known: {', '.join(catalog.names())})",
                t,
                i,
                "gpu",
            )
        if days not in offer.days:
            raise self.fail(
                f"{provider} {offer.gpu} is sold for {', '.join(map(str, offer.days))} days, not {days}",
                t,
                i,
                "days",
            )
        price = self.positive(tbl, "price_usd", t, i, allow_zero=False, upto=MAX_USD)
        from_catalog = price is None
        if price is None:
            price = offer.price(days)
            if price is None:
                raise self.fail(
                    f"the catalog gives no price for {provider} {offer.gpu} {days} days: "
                    "set price_usd to what the order cost",
                    t,
                    i,
                    "price_usd",
                )
        gpus = self.get(tbl, "gpus", int, t, i, default=offer.gpus)
        if not 1 <= gpus <= MAX_GPUS:
            raise self.fail(f"must be between 1 and {MAX_GPUS} (GPUs on one host), got {gpus}", t, i, "gpus")
        retrieval = self.positive(tbl, "retrieval_hours", t, i, default=2.0, allow_zero=True)
        if retrieval is not None and retrieval >= days * 24:
            raise self.fail(
                f"{retrieval:g} h leaves no time in a {days}-day window: it must be less than {days * 24} h",
                t,
                i,
                "retrieval_hours",
            )
        return Bundle(
            provider=offer.provider,
            gpu=offer.gpu,
            days=days,
            started_at=started,
            price_usd=float(price),
            price_from_catalog=from_catalog,
            gpus=gpus,
            retrieval_hours=retrieval,
            warn_hours=self.positive(tbl, "warn_hours", t, i, default=12.0, allow_zero=True),
            order_ref=self.get(tbl, "order_ref", str, t, i),
            catalog=str(catalog_path) if catalog_path else None,
            wrap_up_s=self.duration(tbl, "wrap_up", t, i),
        )

    def variants(self) -> tuple[Variant, ...]:
        t = "variant"
        out: list[Variant] = []
        seen: set[str] = set()
        items = self.array(t)
        if not items:
            raise self.fail("declare at least one [[variant]]", t)
        for i, tbl in enumerate(items):
            self.check_keys(
                tbl,
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
                },
                t,
                i,
            )
            name = self.get(tbl, "name", str, t, i, required=True)
            if not VARIANT_NAME.match(name):
                raise self.fail(f"{_short(name)} may hold only a-z, 0-9, '_' and '-'", t, i, "name")
            if len(name) > MAX_VARIANT_NAME:
                raise self.fail(
                    f"{len(name)} characters: at most {MAX_VARIANT_NAME} (it names the run's folder)", t, i, "name"
                )
            if name in seen:
                raise self.fail(f"{name!r} is declared twice", t, i, "name")
            seen.add(name)
            category = self.get(tbl, "category", str, t, i, required=True)
            if category not in CATEGORIES:
                raise self.fail(f"{category!r} is not one of {', '.join(CATEGORIES)}", t, i, "category")
            regex = self.get(tbl, "metrics_regex", str, t, i)
            if regex is not None:
                try:
                    compiled = re.compile(regex)
                except re.error as exc:
                    raise self.fail(f"not a valid regular expression: {exc}", t, i, "metrics_regex") from None
                if not compiled.groupindex:
                    raise self.fail("needs named groups, e.g. (?P<step>\\d+) and (?P<loss>\\S+)", t, i, "metrics_regex")
            env = self.get(tbl, "env", dict, t, i, default={})
            if not all(isinstance(v, str) for v in env.values()):
                raise self.fail("values must be strings", t, i, "env")
            for k, v in env.items():
                if not k or "=" in k or "\x00" in k:
                    raise self.fail(
                        f"{_short(k)} is not a variable name the OS accepts (empty, or holds '=' or NUL)",
                        t,
                        i,
                        f"env[{_short(k)}]",
                    )
                if "\x00" in v:
                    raise self.fail("the value contains a NUL character (\\u0000)", t, i, f"env[{_short(k)}]")
            gpus = self.get(tbl, "gpus", int, t, i, default=1)
            if gpus < 1:
                raise self.fail(f"must be at least 1 (a run takes one GPU slot or more), got {gpus}", t, i, "gpus")
            out.append(
                Variant(
                    name=name,
                    category=category,
                    command=self.str_list(tbl, "command", t, i, required=True, non_empty=True),
                    hours=self.positive(tbl, "hours", t, i, required=True),
                    checkpoint_every_s=self.duration(tbl, "checkpoint_every", t, i),
                    gpus=gpus,
                    resume_command=self.str_list(tbl, "resume_command", t, i, non_empty=True),
                    metrics_regex=regex,
                    checkpoint_glob=self.get(tbl, "checkpoint_glob", str, t, i),
                    base_revision=self.get(tbl, "base_revision", str, t, i),
                    adapter=self.get(tbl, "adapter", bool, t, i, default=False),
                    expects=self.str_list(tbl, "expects", t, i) or (),
                    env=tuple(sorted(env.items())),
                    host=self.variant_host(tbl, i),
                    trust_pickled_module=self.get(tbl, "trust_pickled_module", bool, t, i, default=False),
                    metrics_format=self.metrics_format(tbl, t, i),
                )
            )
        return tuple(out)

    def metrics_format(self, tbl: dict, t: str, i: int) -> str | None:
        fmt = self.get(tbl, "metrics_format", str, t, i)
        if fmt is not None and fmt not in METRICS_FORMATS:
            raise self.fail(f"{fmt!r} is not a known format ({', '.join(METRICS_FORMATS)})", t, i, "metrics_format")
        return fmt

    def variant_host(self, tbl: dict, i: int) -> str | None:
        """A variant runs on one host: a list naming two is refused here, an unknown name in `hosts`."""
        value = tbl.get("host")
        if isinstance(value, list) and len(value) > 1 and all(isinstance(x, str) for x in value):
            raise self.fail(
                f"placed on {len(value)} hosts ({', '.join(value)}): a variant runs on one host; "
                "declare a second variant to run it on another",
                "variant",
                i,
                "host",
            )
        return self.get(tbl, "host", str, "variant", i)

    def phases(self, variant_names: set[str]) -> tuple[Phase, ...]:
        t = "phase"
        out: list[Phase] = []
        for i, tbl in enumerate(self.array(t)):
            self.check_keys(tbl, {"name", "hours", "uses", "with", "before_window", "variants"}, t, i)
            name = self.get(tbl, "name", str, t, i, required=True)
            if any(p.name == name for p in out):
                raise self.fail(f"{name!r} is declared twice", t, i, "name")
            variants = self.str_list(tbl, "variants", t, i) or ()
            for n, v in enumerate(variants):
                if v not in variant_names:
                    raise self.fail(f"names variant {v!r}, which is not declared", t, i, "variants")
                if v in variants[:n]:
                    raise self.fail(f"names variant {v!r} twice", t, i, "variants")
            hours = self.positive(tbl, "hours", t, i)
            if hours is None and not variants:
                raise self.fail("a phase needs hours, or variants to run", t, i, "hours")
            uses = self.get(tbl, "uses", str, t, i, default="gpu")
            if uses not in PHASE_USES:
                raise self.fail(f"{uses!r} is not one of {', '.join(PHASE_USES)}", t, i, "uses")
            if variants and uses != "gpu":
                raise self.fail("a phase that runs variants uses the GPUs", t, i, "uses")
            before = self.get(tbl, "before_window", bool, t, i, default=False)
            if before and uses != "human":
                raise self.fail("only human preparation can happen before the window", t, i, "before_window")
            out.append(
                Phase(
                    name=name,
                    uses=uses,
                    hours=hours,
                    variants=variants,
                    with_=self.get(tbl, "with", str, t, i),
                    before_window=before,
                )
            )
        by_name = {p.name: p for p in out}
        for i, p in enumerate(out):
            if p.with_ is None:
                continue
            other = by_name.get(p.with_)
            if other is None or other is p:
                raise self.fail(f"names phase {p.with_!r}, which is not another declared phase", t, i, "with")
            if p.before_window != other.before_window:
                raise self.fail("preparation before the window cannot overlap a phase inside it", t, i, "with")
        # `with` chains (A with B with C) share one start: no loop, and at most one GPU phase in a chain
        gpu_in_chain: dict[str, int] = {}
        for i, p in enumerate(out):
            chain, q = [p.name], p
            while q.with_ is not None:
                q = by_name[q.with_]
                if q.name in chain:
                    raise self.fail("`with` goes round in a loop: " + " -> ".join(chain + [q.name]), t, i, "with")
                chain.append(q.name)
            if p.uses == "gpu":
                j = gpu_in_chain.setdefault(q.name, i)
                if j != i:
                    blame = i if p.with_ is not None else j
                    raise self.fail(
                        f"{out[j].name!r} and {p.name!r} both need the GPUs and overlap through "
                        "`with`: two steps on the same GPU run one after the other",
                        t,
                        blame,
                        "with",
                    )
        return tuple(out)

    def rules(self, variant_names: set[str]) -> tuple[Rule, ...]:
        t = "rule"
        out = []
        for i, tbl in enumerate(self.array(t)):
            kind = self.get(tbl, "kind", str, t, i, required=True)
            if kind not in RULE_KINDS:
                raise self.fail(f"{kind!r} is not one of {', '.join(RULE_KINDS)}", t, i, "kind")
            allowed = {"kind", "variants"} | RULE_KEYS[kind]
            self.check_keys(tbl, allowed, t, i)
            variants = self.str_list(tbl, "variants", t, i) or ()
            for v in variants:
                if v not in variant_names:
                    raise self.fail(f"names variant {v!r}, which is not declared", t, i, "variants")
            rule = Rule(kind=kind, variants=variants)
            if kind == "nonfinite":
                rule = Rule(kind=kind, variants=variants, metric=self.get(tbl, "metric", str, t, i, default="loss"))
            elif kind in ("below", "above"):
                after = self.get(tbl, "after_step", int, t, i, default=0)
                if after < 0:
                    raise self.fail("must be 0 or more", t, i, "after_step")
                rule = Rule(
                    kind=kind,
                    variants=variants,
                    metric=self.get(tbl, "metric", str, t, i, required=True),
                    threshold=float(self.get(tbl, "threshold", (int, float), t, i, required=True)),  # finite: get()
                    after_step=after,
                )
            elif kind == "truncated":
                frac = float(self.get(tbl, "max_fraction", (int, float), t, i, default=0.0))
                if not 0.0 <= frac <= 1.0:
                    raise self.fail(f"must be between 0 and 1, got {frac}", t, i, "max_fraction")
                rule = Rule(kind=kind, variants=variants, max_fraction=frac)
            else:
                rule = Rule(kind=kind, variants=variants, within_s=self.duration(tbl, "within", t, i, required=True))
            out.append(rule)
        return tuple(out)

    def spend(self) -> tuple[Spend, ...]:
        t = "spend"
        out = []
        for i, tbl in enumerate(self.array(t)):
            self.check_keys(tbl, {"what", "usd"}, t, i)
            out.append(
                Spend(
                    what=self.get(tbl, "what", str, t, i, required=True),
                    usd=self.positive(tbl, "usd", t, i, required=True, allow_zero=True, upto=MAX_USD),
                )
            )
        return tuple(out)


def _short(value: Any, limit: int = 60) -> str:
    """A value in an error message, cut short: a 300-character name need not be printed whole."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_TYPE_NAMES = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    list: "a list",
    dict: "a table",
    dt.datetime: "a date and time",
}
