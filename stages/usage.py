"""Token usage and model latency of a problem attempt, as the reports read them.

`Usage` is the typed form of the JSON usage record `{input_tokens, output_tokens, total_tokens, calls?}`.
`attempt_cost(paths, problem_id, attempt, record)` reads one attempt's usage and latency: from the
details attempt's `meta.usage` / `meta.latency_s` first, and what those lack from the attempt's
generation file (`generations/<id>.json`, `<id>@<k>.json` for later attempts). A generation file's
steps are its primary record (each step's usage and latency_s, a step's calls counted from its
trajectory when its usage omits them); a file without steps gives its own `usage` and `latency_s`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from stages.artifacts import read_artifact
from stages.paths import RunPaths


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


@dataclass(frozen=True)
class AttemptCost:
    """Usage and model latency of one attempt; None where neither the details nor the generation report it."""

    usage: Usage | None
    latency_s: float | None

    @property
    def complete(self) -> bool:
        return self.usage is not None and self.latency_s is not None


@dataclass(frozen=True)
class _RunPathsOnly:
    """What `generation_path` needs of a settings object, for callers that hold only a run's paths."""

    run_paths: RunPaths


def generation_file_cost(paths: RunPaths, problem_id: str, attempt: int) -> AttemptCost | None:
    """Usage and latency of the generation file of `attempt`; None when it is absent, invalid or of another attempt."""
    from stages.generate.stage import generation_path  # imported here: the generate stage imports the model client

    generation = read_artifact(generation_path(_RunPathsOnly(paths), problem_id, attempt), "generation")
    if generation is None or generation["attempt"] != attempt:
        return None
    steps = generation["steps"]
    if not steps:
        latency = generation.get("latency_s")
        return AttemptCost(Usage.from_record(generation["usage"]), None if latency is None else float(latency))
    usage, latency_s = Usage(), 0.0
    for step in steps:
        usage = usage + (Usage.from_record(step["usage"], len(step["trajectory"].get("calls", ()))) or Usage())
        latency_s += float(step["latency_s"])
    return AttemptCost(usage, latency_s)


def attempt_cost(paths: RunPaths, problem_id: str, attempt: int, record: Mapping[str, Any] | None) -> AttemptCost:
    """Usage and latency of attempt `attempt` (0-based): its details record's meta (`record`, None without
    details) first, then the attempt's generation file for whichever of the two the meta lacks."""
    meta = record["meta"] if record is not None else {}
    latency = meta.get("latency_s")
    found = AttemptCost(Usage.from_record(meta.get("usage")), None if latency is None else float(latency))
    if found.complete:
        return found
    fallback = generation_file_cost(paths, problem_id, attempt)
    if fallback is None:
        return found
    return AttemptCost(found.usage or fallback.usage, found.latency_s if found.latency_s is not None else fallback.latency_s)
