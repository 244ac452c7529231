"""The `[bundle]` table (and a `[[host]]`'s bundle fields): the rented window and its price.

Apart from `model` because it is the one table that consults the price catalog and checks dates.
"""

from __future__ import annotations

import datetime as dt

from runner.campaign.catalog import load_catalog
from runner.campaign.field_reader import FieldReader
from runner.campaign.objects import BUNDLE_EXTRA_KEYS, BUNDLE_KEYS, MAX_GPUS, MAX_USD, Bundle


def read_bundle(reader: FieldReader, tbl: dict | None = None, t: str = "bundle", i: int | None = None) -> Bundle:
    """The [bundle] table, or (from `hosts`) one [[host]]'s bundle fields, `i` its index."""
    if tbl is None:
        tbl = reader.table(t, required=True)
    reader.check_keys(tbl, BUNDLE_KEYS | (BUNDLE_EXTRA_KEYS if i is not None else frozenset()), t, i)
    provider = reader.get(tbl, "provider", str, t, i, default="IteraGPU")
    gpu = reader.get(tbl, "gpu", str, t, i, required=True)
    days = reader.get(tbl, "days", int, t, i, required=True)
    started = reader.get(tbl, "started_at", (dt.datetime, str), t, i, required=True)
    if isinstance(started, str):
        try:
            started = dt.datetime.fromisoformat(started.replace("Z", "+00:00"))
        except ValueError:
            raise reader.fail(
                f"expected a date and time such as 2026-11-29T09:00:00Z, got {started!r}", t, i, "started_at"
            ) from None
    if started.tzinfo is None:
        raise reader.fail("needs a time zone, e.g. 2026-11-29T09:00:00Z", t, i, "started_at")
    started = started.astimezone(dt.UTC)
    if not 2000 <= started.year <= 2200:
        raise reader.fail(f"{started:%Y-%m-%d}: expected a date between the years 2000 and 2200", t, i, "started_at")
    if not 1 <= days <= 3660:
        raise reader.fail(f"must be between 1 and 3660, got {days}", t, i, "days")
    catalog_file = reader.get(tbl, "catalog", str, t, i)
    catalog_path = (reader.path.parent / catalog_file) if catalog_file else None
    if catalog_path is not None and not catalog_path.is_file():
        raise reader.fail(f"no catalog file at {catalog_path}", t, i, "catalog")
    catalog = load_catalog(catalog_path)
    offer = catalog.find(provider, gpu)
    if offer is None:
        raise reader.fail(
            f"{provider} {gpu!r} is not in the {catalog.source} (known: {', '.join(catalog.names())})",
            t,
            i,
            "gpu",
        )
    if days not in offer.days:
        raise reader.fail(
            f"{provider} {offer.gpu} is sold for {', '.join(map(str, offer.days))} days, not {days}",
            t,
            i,
            "days",
        )
    price = reader.positive(tbl, "price_usd", t, i, allow_zero=False, upto=MAX_USD)
    from_catalog = price is None
    if price is None:
        price = offer.price(days)
        if price is None:
            raise reader.fail(
                f"the catalog gives no price for {provider} {offer.gpu} {days} days: "
                "set price_usd to what the order cost",
                t,
                i,
                "price_usd",
            )
    gpus = reader.get(tbl, "gpus", int, t, i, default=offer.gpus)
    if not 1 <= gpus <= MAX_GPUS:
        raise reader.fail(f"must be between 1 and {MAX_GPUS} (GPUs on one host), got {gpus}", t, i, "gpus")
    retrieval = reader.positive(tbl, "retrieval_hours", t, i, default=2.0, allow_zero=True)
    if retrieval is not None and retrieval >= days * 24:
        raise reader.fail(
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
        warn_hours=reader.positive(tbl, "warn_hours", t, i, default=12.0, allow_zero=True),
        order_ref=reader.get(tbl, "order_ref", str, t, i),
        catalog=str(catalog_path) if catalog_path else None,
        wrap_up_s=reader.duration(tbl, "wrap_up", t, i),
    )
