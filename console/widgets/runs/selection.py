"""Which runs the table lists, at any number of runs, and in what order.

Up to `SHOW_MAX` runs (after the filter) the table lists them all in launch order, as it always
did. Past that it lists the running and queued runs, then the most recently ended ones, up to
`SHOW_MAX` rows, and says how many more there are. The filter (`/` in the console) keeps runs whose
state, variant, id or stop reason match: `state:failed`, `variant:lr-high`, or plain words.

Kept apart from the widget, and kept up to date one run at a time (`put`): the table asks for the
visible list again only when a run entered, left or moved within the listed set (`version`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from runner.ledger.states import RunState

SHOW_MAX = 200
ACTIVE_STATES = frozenset({RunState.RUNNING, RunState.QUEUED})


@dataclass(frozen=True)
class RunFilter:
    """Every term must match: `state:X`, `variant:X` (exact, any case), or a word found in the
    run's id, variant, state or stop reason."""

    text: str = ""
    states: frozenset[str] = field(default_factory=frozenset)
    variants: frozenset[str] = field(default_factory=frozenset)
    words: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> RunFilter:
        states, variants, words = set(), set(), []
        for term in text.lower().split():
            key, sep, value = term.partition(":")
            if sep and key == "state" and value:
                states.add(value)
            elif sep and key == "variant" and value:
                variants.add(value)
            else:
                words.append(term)
        return cls(text.strip(), frozenset(states), frozenset(variants), tuple(words))

    @property
    def active(self) -> bool:
        return bool(self.states or self.variants or self.words)

    def matches(self, run: dict) -> bool:
        if self.states and str(run.get("state") or "").lower() not in self.states:
            return False
        if self.variants and str(run.get("variant") or "").lower() not in self.variants:
            return False
        if self.words:
            hay = " ".join(str(run.get(k) or "") for k in ("id", "variant", "state", "stop_reason")).lower()
            return all(w in hay for w in self.words)
        return True


class RunSelection:
    def __init__(self, cap: int = SHOW_MAX) -> None:
        self.cap = cap
        self.rows: dict[str, dict] = {}  # every run seen, in first-seen (launch) order
        self.first: dict[str, int] = {}
        self.filter = RunFilter()
        self.active: set[str] = set()  # matching runs that are running or queued
        self.ended: list[tuple[float, int, str]] = []  # matching ended runs, by (ended_at, first seen)
        self._ended_key: dict[str, tuple[float, int, str]] = {}
        self.version = 0  # bumped when the listed set may have changed
        self.longest_id = 0

    def _drop(self, rid: str) -> None:
        self.active.discard(rid)
        key = self._ended_key.pop(rid, None)
        if key is not None:
            i = bisect.bisect_left(self.ended, key)
            if i < len(self.ended) and self.ended[i] == key:
                del self.ended[i]

    def _add(self, rid: str, run: dict) -> None:
        if not self.filter.matches(run):
            return
        if run.get("state") in ACTIVE_STATES:
            self.active.add(rid)
        else:
            key = (float(run.get("ended_at") or 0.0), self.first[rid], rid)
            self._ended_key[rid] = key
            bisect.insort(self.ended, key)

    def _place(self, rid: str, run: dict) -> tuple:
        """Where a run sits in the pool: nowhere, active, or ended at a time."""
        if rid in self.active:
            return ("active",)
        key = self._ended_key.get(rid)
        return ("ended", key) if key is not None else ("out",)

    def put(self, run: dict) -> None:
        """One run as it is now (new or changed). Costs O(log n) (plus a list insert)."""
        rid = str(run.get("id"))
        if rid not in self.first:
            self.first[rid] = len(self.first)
            self.longest_id = max(self.longest_id, len(rid))
        before = self._place(rid, self.rows.get(rid) or {}) if rid in self.rows else ("new",)
        self.rows[rid] = run
        self._drop(rid)
        self._add(rid, run)
        if self._place(rid, run) != before:
            self.version += 1

    def put_all(self, runs: list[dict]) -> None:
        """A full state (the first one, or after a reconnect): every run at once, the pool judged
        again in one pass and one sort, not one insert per run. Runs not in `runs` are kept."""
        first, rows = self.first, self.rows
        for run in runs:
            rid = str(run.get("id"))
            if rid not in first:
                first[rid] = len(first)
            rows[rid] = run
        self.longest_id = max(self.longest_id, max(map(len, rows), default=0))
        self._judge_all()

    def set_filter(self, text: str) -> None:
        """A new filter: every run is judged again (a user's action, not a periodic one)."""
        self.filter = RunFilter.parse(text)
        self._judge_all()

    def _judge_all(self) -> None:
        match = self.filter.matches if self.filter.active else None
        active: set[str] = set()
        ended: list[tuple[float, int, str]] = []
        for rid, run in self.rows.items():
            if match is not None and not match(run):
                continue
            if run.get("state") in ACTIVE_STATES:
                active.add(rid)
            else:
                ended.append((float(run.get("ended_at") or 0.0), self.first[rid], rid))
        ended.sort()
        self.active, self.ended = active, ended
        self._ended_key = {key[2]: key for key in ended}
        self.version += 1

    @property
    def pool(self) -> int:
        return len(self.active) + len(self.ended)

    def visible(self) -> list[str]:
        """The run ids to list, in order (at most `cap`)."""
        if self.pool <= self.cap:
            ids = list(self.active) + [k[2] for k in self.ended]
            return sorted(ids, key=self.first.__getitem__)
        act = sorted(self.active, key=self.first.__getitem__)[: self.cap]
        room = self.cap - len(act)
        recent = [k[2] for k in reversed(self.ended[-room:])] if room > 0 else []
        return act + recent

    def note(self, shown: int) -> str | None:
        """The line under the table: what is not listed, and how to see it (None: nothing hidden)."""
        hidden = self.pool - shown
        filtered = len(self.rows) - self.pool
        if not hidden and not self.filter.active:
            return None
        parts = []
        if self.filter.active:
            parts.append(f"filter {self.filter.text!r}: {self.pool:,} of {len(self.rows):,} runs match")
        if hidden:
            parts.append(f"{hidden:,} older ended runs not listed")
        elif filtered:
            parts.append(f"{filtered:,} hidden by the filter")
        return " · ".join(parts) + " — / to filter (state:failed, variant:NAME, words)"
