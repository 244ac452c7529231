"""Loading the campaign file (`campaign.toml`) into typed, immutable objects (`objects`).

Loading validates every field the README documents and fails with a `CampaignError` naming the file,
the line (found by `toml_lines`) and the field. The generic field checks are `field_reader`'s; the
`[bundle]` (priced from the catalog) and `[[phase]]` tables are read in `bundle_table` and
`phase_table`; the rest here. Nothing here plans or launches: those are other modules' jobs.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from runner.campaign.bundle_table import read_bundle
from runner.campaign.errors import CampaignError
from runner.campaign.field_reader import FieldReader, short_value
from runner.campaign.hosts import read_hosts
from runner.campaign.objects import (
    CAMPAIGN_KEYS,
    CATEGORIES,
    DECISION_KEYS,
    DEFAULT_PILOT_WAIT_S,
    MAX_USD,
    MAX_VARIANT_NAME,
    METRICS_FORMATS,
    NOTIFY_EVENTS,
    NOTIFY_KEYS,
    PILOT_KEYS,
    RULE_COMMON_KEYS,
    RULE_KEYS,
    RULE_KINDS,
    SPEND_KEYS,
    TOP_LEVEL_KEYS,
    VARIANT_KEYS,
    VARIANT_NAME,
    Bundle,
    Campaign,
    Decision,
    Notify,
    PilotSettings,
    Rule,
    Spend,
    Variant,
)
from runner.campaign.phase_table import read_phases
from runner.campaign.toml_depth import too_deep
from runner.campaign.toml_lines import KeyLines

MAX_NESTING = 200  # deeper arrays or inline tables make tomllib itself recurse out of the stack
CAMPAIGN_FILE = "campaign.toml"


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


class _Reader(FieldReader):
    """Walks the parsed TOML once, checking each table against the fields it may hold."""

    # -- tables -------------------------------------------------------------------------------
    def campaign(self) -> Campaign:
        self.check_keys(self.data, TOP_LEVEL_KEYS, "file")
        top = self.table("campaign", required=True)
        self.check_keys(top, CAMPAIGN_KEYS, "campaign")
        name = self.get(top, "name", str, "campaign", required=True)
        question = self.get(top, "question", str, "campaign", required=True)
        output_dir = self.get(top, "output_dir", str, "campaign", default="deliverables")
        if Path(output_dir).is_absolute() or ".." in Path(output_dir).parts:
            raise self.fail("must be a folder inside the campaign folder", "campaign", None, "output_dir")
        variants = self.variants()
        names = {v.name for v in variants}
        phases = read_phases(self, names)
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
        self.check_keys(tbl, NOTIFY_KEYS, "notify")
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

    def decision(self, names: set[str]) -> Decision | None:
        tbl = self.table("decision")
        if not tbl:
            return None
        self.check_keys(tbl, DECISION_KEYS, "decision")
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
        self.check_keys(tbl, PILOT_KEYS, "pilot")
        wait = self.duration(tbl, "wait", "pilot")
        return PilotSettings(wait_s=DEFAULT_PILOT_WAIT_S if wait is None else wait)

    def bundle(self, tbl: dict | None = None, t: str = "bundle", i: int | None = None) -> Bundle:
        """The [bundle] table, or (from `hosts`) one [[host]]'s bundle fields, `i` its index."""
        return read_bundle(self, tbl, t, i)

    def variants(self) -> tuple[Variant, ...]:
        t = "variant"
        out: list[Variant] = []
        seen: set[str] = set()
        items = self.array(t)
        if not items:
            raise self.fail("declare at least one [[variant]]", t)
        for i, tbl in enumerate(items):
            self.check_keys(tbl, VARIANT_KEYS, t, i)
            name = self.get(tbl, "name", str, t, i, required=True)
            if not VARIANT_NAME.match(name):
                raise self.fail(f"{short_value(name)} may hold only a-z, 0-9, '_' and '-'", t, i, "name")
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
                        f"{short_value(k)} is not a variable name the OS accepts (empty, or holds '=' or NUL)",
                        t,
                        i,
                        f"env[{short_value(k)}]",
                    )
                if "\x00" in v:
                    raise self.fail("the value contains a NUL character (\\u0000)", t, i, f"env[{short_value(k)}]")
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

    def rules(self, variant_names: set[str]) -> tuple[Rule, ...]:
        t = "rule"
        out = []
        for i, tbl in enumerate(self.array(t)):
            kind = self.get(tbl, "kind", str, t, i, required=True)
            if kind not in RULE_KINDS:
                raise self.fail(f"{kind!r} is not one of {', '.join(RULE_KINDS)}", t, i, "kind")
            allowed = RULE_COMMON_KEYS | RULE_KEYS[kind]
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
            self.check_keys(tbl, SPEND_KEYS, t, i)
            out.append(
                Spend(
                    what=self.get(tbl, "what", str, t, i, required=True),
                    usd=self.positive(tbl, "usd", t, i, required=True, allow_zero=True, upto=MAX_USD),
                )
            )
        return tuple(out)
