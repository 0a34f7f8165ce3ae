"""Why tasks and steps failed, in one line each: doit failures as `FailureNote`s grouped by reason, failed steps
as `step 10.2 timeout: <reason>` lines (`stages.progress.run` prints them; see its docstring).

Failures of the pipeline's own error classes (modules under `stages.`, `stages.errors.PipelineError`) are
`ErrorClass: message`; an unexpected exception also keeps its traceback as the note's detail. Reasons can hold
model-derived text: each is cut to one line and neutralised (`stages.execution.untrusted.shown`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from doit.exceptions import BaseFail, UnmetDependency

from stages.execution.untrusted import shown, valid_text
from stages.progress.activity import StepFailure

OWN_ERROR_MODULE_PREFIX = "stages."
DETAIL_TAIL_LINES = 30
REASON_LIMIT = 1000  # characters of a failure's one-line reason (a run failure names every failed problem)
STEP_REASON_LIMIT = 200  # characters of a failed step's one-line reason
UNMET_REASON = "not run: a task it depends on failed"
_EXCEPTION_LINE = re.compile(r"^(?P<name>[A-Za-z_][\w.]*)(?::\s?(?P<message>.*))?$", re.DOTALL)


def stage_of(task_name: str) -> str:
    """`generate:10` -> `generate`; a task without ':' is its own stage."""
    return task_name.split(":", 1)[0]


# ---------------------------------------------------------------------------
# Failure reasons
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FailureNote:
    """One failed task: a one-line reason, and the traceback or stderr tail when it helps (else None).

    `unmet` marks a task that did not run because a task it depends on failed (a consequence, not a cause)."""

    task_name: str
    reason: str
    detail: str | None
    unmet: bool = False

    @property
    def group_key(self) -> tuple[str, str]:
        """Failures with the same key are one line: the same reason, or consequences in the same stage."""
        return ("unmet", stage_of(self.task_name)) if self.unmet else ("reason", self.reason)


@dataclass(frozen=True)
class FailureGroup:
    """Tasks that failed for the same reason (or did not run, in one stage), shown as one line."""

    task_names: tuple[str, ...]
    reason: str
    detail: str | None

    def line(self, names_shown: int) -> str:
        if len(self.task_names) == 1:
            return f"{self.task_names[0]}: {self.reason}"
        shown = ", ".join(self.task_names[:names_shown])
        hidden = len(self.task_names) - names_shown
        names = f"{shown} and {hidden} more" if hidden > 0 else shown
        return f"{names} ({len(self.task_names)} tasks): {self.reason}"


def group_failures(notes: list[FailureNote] | tuple[FailureNote, ...]) -> list[FailureGroup]:
    """The notes grouped by `group_key`, in order of first appearance; one detail kept per group."""
    grouped: dict[tuple[str, str], list[FailureNote]] = {}
    for note in notes:
        grouped.setdefault(note.group_key, []).append(note)
    groups = []
    for members in grouped.values():
        first = members[0]
        reason = first.reason if len(members) == 1 or not first.unmet else UNMET_REASON
        detail = next((note.detail for note in members if note.detail), None)
        groups.append(FailureGroup(tuple(note.task_name for note in members), reason, detail))
    return groups


def _exception_only(traceback_lines: list[str]) -> str:
    """The `module.Error: message` part that ends a formatted traceback (after the last frame)."""
    tail: list[str] = []
    for chunk in reversed(traceback_lines):
        if chunk.startswith("  ") or chunk.startswith("Traceback (most recent call last)"):
            break
        tail.append(chunk)
    return "".join(reversed(tail)).strip()


def first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


def _captured_stderr(task: Any) -> str:
    return "".join(getattr(action, "err", None) or "" for action in getattr(task, "actions", ()))


def _tail(text: str, lines: int = DETAIL_TAIL_LINES) -> str:
    kept = text.rstrip().splitlines()[-lines:]
    return "\n".join(kept)


def describe_failure(task: Any, fail: BaseFail, own_error_names: frozenset[str] = frozenset()) -> FailureNote:
    """A one-line reason for a doit failure; tracebacks only for errors that are not the pipeline's own."""
    name = task.name
    if isinstance(fail, UnmetDependency):
        return FailureNote(name, f"{UNMET_REASON} ({first_line(fail.message)})", None, unmet=True)
    traceback_lines = [valid_text(line) for line in fail.traceback or []]
    if traceback_lines:
        exception_text = _exception_only(traceback_lines)
        match = _EXCEPTION_LINE.match(exception_text)
        qualified = match.group("name") if match else type(fail).__name__
        message = first_line(match.group("message") or "") if match else first_line(exception_text)
        short = qualified.rsplit(".", 1)[-1]
        own = qualified.startswith(OWN_ERROR_MODULE_PREFIX) or short in own_error_names
        # the pipeline's own error is its message (the class is internal); any other keeps its class, and traceback
        reason = shown(message if own and message else f"{short}: {message}" if message else short, limit=REASON_LIMIT)
        return FailureNote(name, reason, None if own else "".join(traceback_lines).rstrip())
    reason = shown(first_line(valid_text(fail.message)) or fail.get_name(), limit=REASON_LIMIT)
    stderr = valid_text(_captured_stderr(task))
    return FailureNote(name, reason, _tail(stderr) if stderr.strip() else None)


# ---------------------------------------------------------------------------
# Failed steps
# ---------------------------------------------------------------------------


def step_labels(failure: StepFailure) -> list[str]:
    """`10.2`, or `10.2@1` for attempt 1: how a failed step is named on its line."""
    suffix = f"@{failure.attempt}" if failure.attempt else ""
    return [shown(step_id, limit=40) + suffix for step_id in failure.step_ids]


def step_failure_line(failure: StepFailure, same_as: str | None = None) -> str:
    """`step 10.2 timeout: <reason>`; several steps of one reason on one line; `@k` for attempt k > 0. With
    `same_as` (the step first printed with this status and reason), the reason is not repeated."""
    noun = "step" if len(failure.step_ids) == 1 else "steps"
    reason = f"same reason as step {same_as}" if same_as else shown(failure.reason, limit=STEP_REASON_LIMIT)
    return f"{noun} {', '.join(step_labels(failure))} {shown(failure.status, limit=20)}: {reason}"
