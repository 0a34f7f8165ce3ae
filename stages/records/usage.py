"""Token usage and model latency, in one place.

- `Tokens`: what the model client counts for one call (or a sum of calls): input and output tokens, the
  total always their sum; written into generation files as `{input_tokens, output_tokens, total_tokens}`
  (with `calls` where a step or a problem sums several calls, and `unknown_calls` when some call's reply gave a
  count that is not a whole number: that count is unknown, counted as 0).
- `Usage`: the typed form of such a JSON usage record as reports read it back, calls included, and the cached
  input tokens when the record states them (`cached_input_tokens`, part of `input_tokens`; priced separately by
  `stages.numbers.pricing`).
- `AttemptCost`: the usage and latency of one attempt of a problem.

The one reading path: a generation file holds the usage and latency of every step and of the whole attempt;
the score stage copies the attempt's totals into the details file (`meta.usage`, `meta.latency_s`); every
report finds an attempt's cost through `stages.records.results.attempt_cost` (details meta first, what it lacks from
the generation file).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from stages.storage.json_values import Frozen, FrozenObject, JSONObject

# The schema of a usage record as a generation file holds it (the record's own, its steps' and their calls').
USAGE_SCHEMA: JSONObject = {
    "type": "object",
    "required": ["input_tokens", "output_tokens", "total_tokens"],
    "properties": {
        "input_tokens": {"type": "integer", "minimum": 0},
        "output_tokens": {"type": "integer", "minimum": 0},
        "total_tokens": {"type": "integer", "minimum": 0},
        "calls": {"type": "integer", "minimum": 0},
        "unknown_calls": {
            "type": "integer",
            "minimum": 1,
            "description": "calls whose reply gave a token count that is not a whole number in [0, 10^7): that count "
            "is unknown, counted as 0",
        },
    },
}


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    calls: int = 0
    cached_input_tokens: int = 0  # of input_tokens, when the API reported them (0 otherwise)
    unknown_calls: int = 0  # calls whose reply stated no usable count (their unknown counts are 0 above)

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.total_tokens + other.total_tokens,
            self.calls + other.calls,
            self.cached_input_tokens + other.cached_input_tokens,
            self.unknown_calls + other.unknown_calls,
        )

    # A real special case: a usage record counts only with its three token counts (else None), a step's calls
    # default to its trajectory's, and the writer leaves `calls` out of a single call's record.
    @classmethod
    def from_record(cls, record: Any, default_calls: int = 0) -> Usage | None:
        """The usage of a JSON record; None when it is not a mapping with the three token counts as integers."""
        if not isinstance(record, Mapping):
            return None
        try:
            calls = int(record["calls"]) if "calls" in record else default_calls
            usage = cls(int(record["input_tokens"]), int(record["output_tokens"]), int(record["total_tokens"]), calls)
        except (KeyError, TypeError, ValueError):
            return None
        cached = _count(record.get("cached_input_tokens"))
        return dataclasses.replace(
            usage,
            cached_input_tokens=cached if cached <= usage.input_tokens else 0,
            unknown_calls=_count(record.get("unknown_calls")),
        )

    def to_record(self, include_calls: bool = True) -> dict[str, int]:
        record = {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
        }
        if include_calls:
            record["calls"] = self.calls
        if self.cached_input_tokens:
            record["cached_input_tokens"] = self.cached_input_tokens
        if self.unknown_calls:
            record["unknown_calls"] = self.unknown_calls
        return record


@dataclass(frozen=True)
class Tokens:
    """The tokens of one model call (or a sum of calls): the total is always input + output."""

    input_tokens: int = 0
    output_tokens: int = 0
    unknown_calls: int = 0  # calls whose reply gave a count that is not a whole number (that count is 0 here)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.unknown_calls + other.unknown_calls,
        )

    @classmethod
    def of_record(cls, record: FrozenObject) -> Tokens:
        """The counts of a usage record this pipeline wrote (anything else in it is read as 0)."""
        return cls(*(_count(record.get(name)) for name in ("input_tokens", "output_tokens", "unknown_calls")))

    # Written through `Usage.to_record` (the one layout of a usage record).
    def to_record(self, calls: int | None = None) -> dict[str, int]:
        """The JSON usage record (`Usage`'s layout), with `calls` only when given."""
        usage = Usage(self.input_tokens, self.output_tokens, self.total_tokens, calls or 0)
        return dataclasses.replace(usage, unknown_calls=self.unknown_calls).to_record(include_calls=calls is not None)


def _count(value: Frozen) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


@dataclass(frozen=True)
class AttemptCost:
    """Usage and model latency of one attempt; None where neither the details nor the generation report it."""

    usage: Usage | None
    latency_s: float | None

    @property
    def complete(self) -> bool:
        return self.usage is not None and self.latency_s is not None
