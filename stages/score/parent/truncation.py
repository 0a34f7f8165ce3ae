"""Answers cut at the output limit (`finish_reason=length`): which steps they affected, said in those steps' reasons.

A step is affected when its final answer was cut (generation status `truncated`, code or not) or when any other
model answer of its tool loop was (a tool call cut mid-arguments, an answer before the reminder). Scoring puts
`truncation_note` in front of such a step's reason, whatever its verdict, so that a syntax error of a cut answer
reads as what it is. Reads the generation record only (our own, schema-validated artifact), and tolerates any shape.
"""

from __future__ import annotations

from collections.abc import Mapping

LENGTH_FINISH = "length"


def _calls(step: Mapping[str, object]) -> list[object]:
    trajectory = step.get("trajectory")
    calls = trajectory.get("calls") if isinstance(trajectory, Mapping) else None
    return list(calls) if isinstance(calls, list) else []


def truncation_note(step: Mapping[str, object]) -> str | None:
    """`truncated: ...` for a step an answer cut at the output limit affected; None otherwise."""
    calls = _calls(step)
    cut = sum(1 for call in calls if isinstance(call, Mapping) and call.get("finish_reason") == LENGTH_FINISH)
    if step.get("status") == "truncated" or step.get("finish_reason") == LENGTH_FINISH:
        return "truncated: the final answer was cut at the output limit (finish_reason=length; raise max_tokens)"
    if cut:
        return f"truncated: {cut} of {len(calls)} model answers were cut at the output limit (finish_reason=length)"
    return None


def with_note(reason: str, note: str) -> str:
    """`reason` with `note` in front (once)."""
    if reason.startswith(note):
        return reason
    return f"{note}; {reason}" if reason else note
