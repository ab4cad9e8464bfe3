"""The usage objects of the MCP contracts, shared by billing's tools and every metered tool's result."""

from typing import Literal

from pydantic import BaseModel, Field

from leroy.schemas import ToolArgs


class NoArgs(ToolArgs):
    pass


class LookupUsage(BaseModel):
    """Leroy's per-result `usage` object (`LookupCharge.usage`)."""

    lookup_cost: int = Field(description="Lookups this call cost (0 for a cache hit)")
    cache: Literal["hit", "miss"] = Field(description="Whether the answer came from the frame cache")
    included_lookups: int
    used_lookups: int
    lookups_remaining: int
    overage_lookups: int
    overage_amount_usd: float


class ResearchBoundary(BaseModel):
    broker_write_authority: Literal["none"]
    paper_trading: Literal[False]
    live_order: Literal[False]


class UsageReport(BaseModel):
    """The `get_usage` answer: this UTC month's lookups, from the account ledger."""

    period_start: str = Field(description="First day of the current UTC calendar month, YYYY-MM-DD")
    included_lookups: int
    used_lookups: int
    lookups_remaining: int
    overage_lookups: int
    overage_amount_usd: float
    overage_rate_usd: float
    billing_status: Literal["ledgered"]
    research_boundary: ResearchBoundary


class CreditUsage(BaseModel):
    """Credit usage for backtests and optimizations this UTC month (the backtesting contract's `usage`)."""

    credits_consumed: int
    credits_remaining: int = Field(description="Credits that can still be reserved this month")
    credits_total_monthly: int
    credits_reserved: int = Field(description="Credits held by running jobs, not yet settled")
    period: str = Field(description="The UTC month, YYYY-MM")
    free_optimizations_remaining: int
