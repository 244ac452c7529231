"""The price catalog: bundles a provider sells, with the prices it publishes for whole periods."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from runner.campaign.errors import CampaignError


@dataclass(frozen=True)
class Offer:
    provider: str
    gpu: str
    gpus: int
    days: tuple[int, ...]
    prices_usd: dict[int, float] = field(default_factory=dict)

    def price(self, days: int) -> float | None:
        """The published price of a `days` bundle, or None when the provider gives none."""
        return self.prices_usd.get(days)


@dataclass(frozen=True)
class Catalog:
    source: str
    offers: tuple[Offer, ...]

    def find(self, provider: str, gpu: str) -> Offer | None:
        for offer in self.offers:
            if offer.provider.lower() == provider.lower() and offer.gpu.lower() == gpu.lower():
                return offer
        return None

    def names(self) -> list[str]:
        return [f"{o.provider} {o.gpu}" for o in self.offers]


def load_catalog(path: str | Path | None = None) -> Catalog:
    """The shipped catalog, or the user's own file of the same shape."""
    if path is None:
        text = resources.files("runner.campaign").joinpath("catalog.toml").read_text(encoding="utf-8")
        source = "built-in catalog"
    else:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise CampaignError(f"cannot read the catalog: {exc.strerror}", file=path) from exc
        source = str(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CampaignError(f"not valid TOML: {exc}", file=source) from exc
    offers = []
    for i, raw in enumerate(data.get("offer", [])):
        try:
            prices = {int(k): float(v) for k, v in raw.get("prices_usd", {}).items()}
            offers.append(
                Offer(
                    provider=str(raw["provider"]),
                    gpu=str(raw["gpu"]),
                    gpus=int(raw.get("gpus", 1)),
                    days=tuple(int(d) for d in raw.get("days", sorted(prices))),
                    prices_usd=prices,
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CampaignError(f"offer #{i + 1} is malformed ({exc!r})", file=source, field="offer") from exc
    return Catalog(source=source, offers=tuple(offers))
