"""Token usage: the typed form of the JSON usage record `{input_tokens, output_tokens, total_tokens, calls?}`.

How a report finds an attempt's usage and latency (details meta first, then the generation file) is
`stages.results.attempt_cost`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    calls: int = 0

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens,
                     self.total_tokens + other.total_tokens, self.calls + other.calls)

    @classmethod
    def from_record(cls, record: Any, default_calls: int = 0) -> "Usage | None":
        """The usage of a JSON record; None when it is not a mapping with the three token counts as integers."""
        if not isinstance(record, Mapping):
            return None
        try:
            calls = int(record["calls"]) if "calls" in record else default_calls
            return cls(int(record["input_tokens"]), int(record["output_tokens"]), int(record["total_tokens"]), calls)
        except (KeyError, TypeError, ValueError):
            return None

    def to_record(self, include_calls: bool = True) -> dict[str, int]:
        record = {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens, "total_tokens": self.total_tokens}
        if include_calls:
            record["calls"] = self.calls
        return record
