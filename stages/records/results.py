"""The one reader of a run's results: its selection, generations and details, as their typed records
(`stages.records`: selection, generation, details).

Every report (summary, comparison, pass@k, the HTML report) reads a run through `read_run` and works on
these records; none parses the JSON artifacts itself. This module also holds the problem states (the step
statuses are `stages.statuses`); the one definition of a *resolved* problem attempt is
`stages.records.details.is_resolved`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from stages.records import not_generated, not_scored
from stages.records.details import GENERATION_FAILED_STATES, Details, ScoredAttempt, is_resolved, read_details_file
from stages.records.generation import (
    GeneratedStep,
    Generation,
    ToolRun,
    ToolStats,
    Turn,
    TurnCall,
    read_generation_file,
)
from stages.records.selection import LayoutStep, Selection, SelectionEntry, StepLayout, read_selection_file
from stages.records.summary import Summary, read_summary_file
from stages.records.usage import AttemptCost
from stages.statuses import STEP_STATUSES
from stages.storage.artifacts import read_artifact
from stages.storage.json_values import JSONObject
from stages.storage.paths import RunPaths

__all__ = [  # the records every report reads, named here beside the readers that return them
    "CELL_STATUSES",
    "OCCASIONAL_STATUSES",
    "ERROR_STATES",
    "GENERATION_FAILED_STATES",
    "NO_DETAILS_STATES",
    "CellStatus",
    "Details",
    "DetailsRead",
    "GeneratedStep",
    "Generation",
    "LayoutStep",
    "ProblemResult",
    "ProblemState",
    "ResultsError",
    "RunResults",
    "ScoredAttempt",
    "Selection",
    "SelectionEntry",
    "StepLayout",
    "ToolRun",
    "ToolStats",
    "Turn",
    "TurnCall",
    "attempt_cost",
    "cached_selection",
    "is_resolved",
    "max_attempts",
    "read_config",
    "read_details",
    "read_generation",
    "read_problem",
    "read_run",
    "read_selection",
    "read_summary",
]

# ---------------------------------------------------------------------------
# Vocabulary
# ---------------------------------------------------------------------------

CellStatus = Literal["pass", "fail", "timeout", "parse_error", "eval_error", "skipped", "not_generated", "no_verdict"]
ProblemState = Literal["complete", "generation_error", "missing_generation", "missing_details", "invalid_details"]

CELL_STATUSES: tuple[CellStatus, ...] = (*STEP_STATUSES, "not_generated", "no_verdict")
# Counted and shown only where they occur (a run without them keeps the tables it had before they existed).
OCCASIONAL_STATUSES: frozenset[CellStatus] = frozenset({"not_generated", "no_verdict"})
NO_DETAILS_STATES: frozenset[str] = frozenset({"missing_details", "invalid_details"})
ERROR_STATES: frozenset[str] = GENERATION_FAILED_STATES | NO_DETAILS_STATES


def read_generation(paths: RunPaths, problem_id: str, attempt: int) -> Generation | None:
    """The generation of `attempt`; None when it is absent, invalid or records another attempt."""
    generation = read_generation_file(paths.generation(problem_id, attempt))
    if generation is None or generation.attempt != attempt or generation.problem_id != problem_id:
        return None
    return generation


# ---------------------------------------------------------------------------
# One problem of a run
# ---------------------------------------------------------------------------


def attempt_cost(scored: ScoredAttempt | None, generation: Generation | None) -> AttemptCost:
    """The details attempt's meta first; what it lacks from the attempt's generation."""
    found = AttemptCost(scored.usage if scored else None, scored.latency_s if scored else None)
    if found.complete or generation is None:
        return found
    usage, latency = generation.cost
    return AttemptCost(found.usage or usage, found.latency_s if found.latency_s is not None else latency)


@dataclass(frozen=True)
class ProblemResult:
    """A selected problem as the run holds it: its details (if valid) and the generation of every attempt."""

    entry: SelectionEntry
    state: ProblemState
    details: Details | None
    generations: tuple[Generation | None, ...]
    missing_reason: str | None = None  # why there are no usable details: the reason of each unscored step
    details_error: str | None = None  # the same, naming the file
    generation_failure: str | None = None  # "not generated: <reason>" when its last generation task failed

    @property
    def problem_id(self) -> str:
        return self.entry.problem_id

    @property
    def is_error(self) -> bool:
        return self.state in ERROR_STATES

    @property
    def attempt_count(self) -> int:
        return len(self.details.attempts) if self.details else max(len(self.generations), 1)

    def scored_attempt(self, index: int) -> ScoredAttempt | None:
        if self.details is None or index >= len(self.details.attempts):
            return None
        return self.details.attempts[index]

    def generation(self, index: int) -> Generation | None:
        return self.generations[index] if index < len(self.generations) else None

    def resolved(self, index: int = 0) -> bool:
        attempt = self.scored_attempt(index)
        return attempt is not None and not (index == 0 and self.is_error) and attempt.resolved(self.entry.scored_steps)

    def cost(self, index: int) -> AttemptCost:
        return attempt_cost(self.scored_attempt(index), self.generation(index))

    def costs(self) -> list[AttemptCost]:
        """The cost of every attempt (one, without details)."""
        count = len(self.details.attempts) if self.details else 1
        return [self.cost(index) for index in range(count)]

    @property
    def tool_stats(self) -> ToolStats:
        return sum((generation.tool_stats for generation in self.generations if generation), ToolStats())


@dataclass(frozen=True)
class RunResults:
    run_dir: Path
    selection: Selection
    config: Mapping[str, Any] | None
    problems: tuple[ProblemResult, ...]

    @property
    def paths(self) -> RunPaths:
        return RunPaths(self.run_dir)

    @property
    def settings(self) -> JSONObject:
        """config.json's settings (none when the run has no readable config.json)."""
        settings = (self.config or {}).get("settings")
        return settings if isinstance(settings, dict) else {}

    @property
    def by_id(self) -> dict[str, ProblemResult]:
        return {problem.problem_id: problem for problem in self.problems}

    @property
    def tool_stats(self) -> ToolStats:
        return sum((problem.tool_stats for problem in self.problems), ToolStats())


class ResultsError(ValueError):
    """A folder is not a readable run (no folder, no valid selection.json), stated in one line."""


def read_selection(paths: RunPaths) -> Selection:
    selection = cached_selection(paths)
    if selection is None:
        state = "invalid" if paths.selection.exists() else "missing"
        raise ResultsError(f"{state} {paths.selection}")
    return selection


def cached_selection(paths: RunPaths) -> Selection | None:
    """The run's selection.json, parsed and validated once per file version; None when it is missing or invalid."""
    return read_selection_file(paths.selection)


@dataclass(frozen=True)
class DetailsRead:
    details: Details | None
    state: ProblemState
    missing_reason: str | None = None
    error: str | None = None


def read_details(paths: RunPaths, problem_id: str) -> DetailsRead:
    """The details of a problem, or why there are none (not scored in the last run, missing, not valid, of
    another problem)."""
    path = paths.details(problem_id)
    details = read_details_file(path)
    if details is None:
        failure = not_scored.read(paths, problem_id)
        if failure is not None:
            state: ProblemState = "invalid_details" if path.exists() else "missing_details"
            return DetailsRead(None, state, failure.line, failure.line)
        reason = "details file does not validate" if path.exists() else "no details file"
        return DetailsRead(
            None, "invalid_details" if path.exists() else "missing_details", reason, f"{reason}: {path.name}"
        )
    if details.task_id != problem_id:
        return DetailsRead(
            None, "invalid_details", "details of another problem", f"{path.name} holds task_id {details.task_id}"
        )
    return DetailsRead(details, _problem_state(details.status))


def _problem_state(status: str) -> ProblemState:
    if status == "generation_error":
        return "generation_error"
    return "missing_generation" if status == "missing_generation" else "complete"


def read_problem(paths: RunPaths, entry: SelectionEntry, attempts: int, with_generations: bool = True) -> ProblemResult:
    found = read_details(paths, entry.problem_id)
    count = len(found.details.attempts) if found.details else attempts
    generations = (
        tuple(read_generation(paths, entry.problem_id, index) for index in range(count)) if with_generations else ()
    )
    failure = not_generated.read_for_attempts(paths, entry.problem_id, attempts)
    failed_first = failure is not None and failure.attempt == 0  # a later attempt's failure leaves the first's state
    state: ProblemState = "generation_error" if failed_first and found.state == "complete" else found.state
    return ProblemResult(
        entry, state, found.details, generations, found.missing_reason, found.error, failure.line if failure else None
    )


def read_run(
    run_dir: Path,
    problem_ids: Sequence[str] | None = None,
    *,
    attempts: int = 1,
    with_generations: bool = True,
    summary_tag: str = "",
) -> RunResults:
    """Read the run at `run_dir` once: selection, config, details and generations of the selected problems
    (only `problem_ids`, in that order, when given). `attempts` is how many generation files to look for
    when a problem has no details file. `summary_tag` names a subset's own selection (Settings.summary_tag)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ResultsError(f"run directory not found: {run_dir}")
    paths = RunPaths(run_dir, summary_tag).viewed()
    selection = read_selection(paths)
    entries = selection.by_id
    chosen = [entries[pid] for pid in problem_ids] if problem_ids is not None else list(selection.entries)
    problems = tuple(read_problem(paths, entry, attempts, with_generations) for entry in chosen)
    return RunResults(run_dir, selection, read_config(paths), problems)


def read_config(paths: RunPaths) -> Mapping[str, Any] | None:
    return read_artifact(paths.recorded_config(), "config")


def read_summary(paths: RunPaths) -> Summary | None:
    """summary.json when it validates (its fingerprint and the plots it lists decide whether it is current)."""
    return read_summary_file(paths.summary_json)


def max_attempts(problems: Iterable[ProblemResult]) -> int:
    """The largest number of attempts a details file holds (1 when none is readable)."""
    return max((len(p.details.attempts) for p in problems if p.details is not None), default=1)
