"""Cost from token usage and the optional price settings (US dollars per million tokens).

`price_input_per_mtok` and `price_output_per_mtok` set together give a cost; `price_cached_input_per_mtok`
prices the input tokens the API reported as cached (`Usage.cached_input_tokens`; without it they cost the input
price). With no price set, reports show tokens only. Prices are not generation settings: no stage fingerprint
but the summary's (through config.json) covers them, so changing a price re-summarizes and never re-asks a model.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from stages.records.summary import RecordedPrices
from stages.records.usage import Usage

PER_TOKENS = 1_000_000


@dataclass(frozen=True)
class Prices(RecordedPrices):
    """The price settings (`RecordedPrices`, as summary.json records them) and the cost they give."""

    def cost(self, usage: Usage) -> float:
        """The cost of `usage`: uncached input, cached input and output tokens at their prices."""
        cached = min(usage.cached_input_tokens, usage.input_tokens)
        cached_price = self.input_per_mtok if self.cached_input_per_mtok is None else self.cached_input_per_mtok
        return (
            (usage.input_tokens - cached) * self.input_per_mtok
            + cached * cached_price
            + usage.output_tokens * self.output_per_mtok
        ) / PER_TOKENS


def prices_of(settings: Any) -> Prices | None:
    """The prices of a Settings (or of config.json's `settings` mapping); None when unset."""

    def value(name: str) -> Any:
        return settings.get(name) if isinstance(settings, Mapping) else getattr(settings, name, None)

    given_input, given_output = value("price_input_per_mtok"), value("price_output_per_mtok")
    if given_input is None or given_output is None:
        return None
    cached = value("price_cached_input_per_mtok")
    return Prices(float(given_input), float(given_output), None if cached is None else float(cached))


def cost_of(usage: Usage | None, prices: Prices | None) -> float | None:
    """The cost of one attempt (or a sum); None without prices or without usage."""
    return None if prices is None or usage is None else prices.cost(usage)


def total_cost(costs: Iterable[float | None]) -> float | None:
    """The sum of the known costs; None when none is known."""
    known = [cost for cost in costs if cost is not None]
    return sum(known) if known else None


def money(value: float | None) -> str:
    """`$0.0123`: four decimals below a dollar, two above; `-` when unknown."""
    if value is None:
        return "-"
    return f"${value:,.2f}" if abs(value) >= 1 else f"${value:.4f}"
