"""Typed getters over one parsed TOML table, each failing with the file, line and field named.

Kept apart from the campaign's own tables (`model`) because the checks are the same for every
table: a type, no NUL, a finite number, a duration, a positive amount.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any, Literal, overload

from runner.campaign.durations import parse_duration
from runner.campaign.errors import CampaignError
from runner.campaign.objects import MAX_HOURS, MAX_INT
from runner.campaign.toml_lines import KeyLines


class FieldReader:
    """The parsed file, its path and its key lines: the checks every table's fields go through."""

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

    def check_keys(self, tbl: dict, allowed: AbstractSet[str], table: str, index: int | None = None) -> None:
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
            raise self.fail(f"expected {names}, got {short_value(value)}", table, index, key)
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
                raise self.fail(f"{short_value(value)} is too large (at most {MAX_INT})", table, index, key)
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

    # -- top-level tables and arrays of tables ------------------------------------------------
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


def short_value(value: Any, limit: int = 60) -> str:
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
