"""What the conditions of a run did to it: tool-call outcomes (ok, error, timeout, sandbox_error) per step and
per run, and the scored steps that had no targets. Counted from the generation files' trajectories, written into
details and summary, and the reason a run whose tool calls mostly failed on the sandbox's side ends non-zero."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from stages.statuses import TOOL_STATUSES
from stages.storage.json_values import FrozenObject, JSONObject, obj, objects, text

# How the reason of an eval_error step scored without targets begins (score stage, targets_io). Only the
# trusted side gives a step an eval_error, so only it writes these.
TARGETS_MISSING_MARKERS: tuple[str, ...] = ("targets missing", "no targets file", "targets of step ", "targets file ")


def tool_outcome_counts(tool_results: Iterable[FrozenObject]) -> dict[str, int]:
    """{status: count} over every status, for the tool results of one step (or several)."""
    counts: dict[str, int] = dict.fromkeys(TOOL_STATUSES, 0)
    for result in tool_results:
        status = result.get("status")
        if isinstance(status, str) and status in counts:
            counts[status] += 1
    return counts


def add_counts(total: dict[str, int], more: Mapping[str, int]) -> dict[str, int]:
    return {status: total.get(status, 0) + more.get(status, 0) for status in TOOL_STATUSES}


def step_tool_outcomes(step: FrozenObject) -> dict[str, int]:
    return tool_outcome_counts(objects(obj(step.get("trajectory")).get("tool_results")))


def generation_tool_outcomes(generation: FrozenObject | None) -> JSONObject:
    """{"total": counts, "steps": {step_id: counts}} of one generation record (steps that called a tool only)."""
    steps: JSONObject = {}
    total: dict[str, int] = dict.fromkeys(TOOL_STATUSES, 0)
    for step in objects((generation or {}).get("steps")):
        counts = step_tool_outcomes(step)
        if any(counts.values()):
            steps[text(step.get("step_id"))] = dict(counts)
            total = add_counts(total, counts)
    return {"total": dict(total), "steps": steps}


def sandbox_failure_line(counts: Mapping[str, int]) -> str | None:
    """One line when most tool calls of the run failed on the sandbox's side (the answers are not the model's)."""
    calls = sum(counts.get(status, 0) for status in TOOL_STATUSES)
    failed = counts.get("sandbox_error", 0)
    if not calls or failed * 2 <= calls:
        return None
    return (
        f"{failed} of {calls} tool calls failed in the code sandbox (sandbox_error): the scores do not measure the "
        "model; check sandbox_url= and rerun (generations with sandbox errors are kept, delete them to redo them)"
    )


def unscored_steps(step_rows: Iterable[tuple[str, str]]) -> list[str]:
    """Step ids among (step id, eval_error reason) rows that could not be scored because their targets are missing."""
    return [step_id for step_id, reason in step_rows if reason.startswith(TARGETS_MISSING_MARKERS)]


def conditions_markdown(tool_calls: Mapping[str, int], unscored: Sequence[str], mode: str) -> list[str]:
    """The summary.md lines: a warning when most tool calls failed in the sandbox (the counts themselves are in
    the summary's Tool use section), and the unscored steps (when any)."""
    lines: list[str] = []
    warning = sandbox_failure_line(tool_calls) if mode == "tool_use" else None
    if warning:
        lines += ["", f"**Warning: {warning}.**"]
    if unscored:
        shown = ", ".join(unscored[:20]) + (", ..." if len(unscored) > 20 else "")
        lines += [
            "",
            f"**{len(unscored)} scored step(s) could not be scored: no targets** "
            f"(counted as unresolved; allow_missing_targets): {shown}",
        ]
    return lines
