"""Budget arithmetic for the closing report: the rental against the approved deliverables.

The rental share per approved deliverable is the committed price over the approved count, and is
undefined (None) when nothing was approved: a campaign that delivered nothing did not cost zero.
Other spending the user actually incurred stays on its own lines, never merged into the rental
and never topped up with invented fees or taxes.
"""

from __future__ import annotations

from dataclasses import dataclass

from runner.campaign.objects import Campaign

UNDEFINED = "undefined"


def cost_per_approved(price_usd: float, approved: int) -> float | None:
    """Rental share per approved deliverable; None when nothing was approved."""
    if price_usd is None or price_usd <= 0:
        raise ValueError(f"a committed price must be more than zero, got {price_usd!r}")
    if isinstance(approved, bool) or not isinstance(approved, int) or approved < 0:
        raise ValueError(f"the approved count must be a whole number of deliverables, got {approved!r}")
    if approved == 0:
        return None
    return round(price_usd / approved, 10)


def format_usd(usd: float | None) -> str:
    """`47.14 USD`; None (an undefined ratio) reads "undefined", never "0.00 USD"."""
    if usd is None:
        return UNDEFINED
    return f"{usd:,.2f} USD"


@dataclass(frozen=True)
class BudgetSummary:
    committed_usd: float  # the bundle's price for its whole period
    plan: str  # e.g. "IteraGPU RTX 4090, 3 days"
    price_source: str  # "catalog" or "campaign file (price_usd)"
    other_spend: tuple[tuple[str, float], ...]  # (what, usd), as the user recorded them
    approved: int

    @property
    def other_spend_usd(self) -> float:
        return round(sum(usd for _, usd in self.other_spend), 2)

    @property
    def usd_per_approved(self) -> float | None:
        return cost_per_approved(self.committed_usd, self.approved)

    def to_json(self) -> dict:
        """The budget keys of `report --json` (README), plus the spending lines."""
        return {
            "committed_usd": self.committed_usd,
            "other_spend_usd": self.other_spend_usd,
            "approved": self.approved,
            "usd_per_approved": self.usd_per_approved,
            "plan": self.plan,
            "price_source": self.price_source,
            "other_spend": [{"what": w, "usd": u} for w, u in self.other_spend],
        }

    def lines(self) -> list[tuple[str, str]]:
        """(label, value) rows a report prints as they are: the rental first, other spending on
        lines of its own, then the ratio (or why it is undefined)."""
        rows = [(f"committed rental ({self.plan}, {self.price_source})", format_usd(self.committed_usd))]
        rows += [(f"other spending: {what}", format_usd(usd)) for what, usd in self.other_spend]
        if not self.other_spend:
            rows.append(("other spending", "none recorded"))
        rows.append(("approved deliverables", str(self.approved)))
        if self.approved:
            rows.append(("rental share per approved deliverable", format_usd(self.usd_per_approved)))
        else:
            rows.append(
                (
                    "rental share per approved deliverable",
                    f"{UNDEFINED} (nothing approved; the rental still cost {format_usd(self.committed_usd)})",
                )
            )
        return rows


def budget_summary(campaign: Campaign, approved: int) -> BudgetSummary:
    """The campaign's budget once `approved` deliverables passed the announced validation."""
    b = campaign.bundle
    cost_per_approved(b.price_usd, approved)  # validates both before anything is shown
    return BudgetSummary(
        committed_usd=b.price_usd,
        plan=f"{b.provider} {b.gpu}, {b.days} days",
        price_source="catalog" if b.price_from_catalog else "campaign file (price_usd)",
        other_spend=tuple((s.what, s.usd) for s in campaign.spend),
        approved=approved,
    )
