"""The one reader of a run's results: typed records of its selection, generations and details.

Every report (summary, comparison, pass@k, the HTML report) reads a run through `read_run` and works on
these records; none parses the JSON artifacts itself. This module also holds the problem states (the step
statuses are `stages.statuses`) and the one definition of a *resolved* problem attempt:

    generation reported no error for the attempt, the problem has scored steps, and every scored step
    of the attempt has a verdict `pass` (prefilled steps, status `skipped`, are not scored).

Tool-use statistics (calls of the code interpreter and their outcomes ok/error/timeout/sandbox_error)
are counted from the trajectories of the generation files (`tool_results` of each step).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from stages import not_scored
from stages.artifacts import SCHEMA_VERSION, ArtifactError, read_artifact, validate
from stages.categories import UNCLASSIFIED, Category, category_of
from stages.paths import RunPaths
from stages.statuses import STEP_STATUSES, TOOL_STATUSES
from stages.untrusted import UntrustedJSONError, parse_json, valid_text
from stages.usage import AttemptCost, Usage
from stages.verdict import StepVerdict

# ---------------------------------------------------------------------------
# Vocabulary
# ---------------------------------------------------------------------------

CellStatus = Literal["pass", "fail", "timeout", "parse_error", "eval_error", "skipped", "no_verdict"]
ProblemState = Literal["complete", "generation_error", "missing_generation", "missing_details", "invalid_details"]

CELL_STATUSES: tuple[CellStatus, ...] = (*STEP_STATUSES, "no_verdict")
GENERATION_FAILED_STATES: frozenset[str] = frozenset({"generation_error", "missing_generation"})
NO_DETAILS_STATES: frozenset[str] = frozenset({"missing_details", "invalid_details"})
ERROR_STATES: frozenset[str] = GENERATION_FAILED_STATES | NO_DETAILS_STATES
TOOL_ARGUMENTS_READ_CHARS = 4_000_000  # longer tool-call arguments are shown as sent, not parsed


def is_resolved(statuses: Iterable[str], scored_steps: int, generation_ok: bool) -> bool:
    """THE definition of a resolved problem attempt (see the module docstring)."""
    scored = [status for status in statuses if status != "skipped"]
    passed = sum(status == "pass" for status in scored)
    return generation_ok and scored_steps > 0 and passed >= scored_steps and passed == len(scored)


# ---------------------------------------------------------------------------
# Selection
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LayoutStep:
    """One step of a selected problem, in problem order: scored, or prefilled (official code, not scored)."""

    step_id: str
    prefilled: bool

    def to_record(self) -> dict[str, Any]:
        return {"step_id": self.step_id, "prefilled": self.prefilled}


StepLayout = tuple[LayoutStep, ...]


def layout_of(records: Iterable[Mapping[str, Any]]) -> StepLayout:
    return tuple(LayoutStep(str(step["step_id"]), bool(step["prefilled"])) for step in records)


@dataclass(frozen=True)
class SelectionEntry:
    """A selected problem as selection.json records it: identity, category and step layout (the one source of
    its step ids and of which steps are scored, for every stage after select)."""

    problem_id: str
    split: str
    category: str
    taxonomy: Category
    fingerprint: str
    steps: int
    scored_steps: int
    layout: StepLayout

    @property
    def skipped_steps(self) -> int:
        return self.steps - self.scored_steps

    @property
    def scored_step_ids(self) -> tuple[str, ...]:
        return tuple(step.step_id for step in self.layout if not step.prefilled)

    @classmethod
    def from_record(cls, entry: Mapping[str, Any]) -> SelectionEntry:
        """Entries written before field/subfield were recorded fall back to their category, else the table."""
        stated = entry.get("category")
        taxonomy = category_of(
            str(entry["problem_id"]),
            {
                "field": entry.get("field"),
                "subfield": entry.get("subfield"),
                "category": stated if stated != UNCLASSIFIED else None,
            },
        )
        return cls(
            str(entry["problem_id"]),
            str(entry["split"]),
            str(entry["category"]),
            taxonomy,
            str(entry["fingerprint"]),
            int(entry["steps"]),
            int(entry["scored_steps"]),
            layout_of(entry["layout"]),
        )


@dataclass(frozen=True)
class Selection:
    fingerprint: str
    split: str
    category: tuple[str, ...]
    sample_ids: tuple[str, ...]
    entries: tuple[SelectionEntry, ...]

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Selection:
        return cls(
            str(record["fingerprint"]),
            str(record["split"]),
            tuple(record["category"]),
            tuple(record.get("sample_ids") or ()),
            tuple(SelectionEntry.from_record(entry) for entry in record["problems"]),
        )

    @property
    def by_id(self) -> dict[str, SelectionEntry]:
        return {entry.problem_id: entry for entry in self.entries}


# ---------------------------------------------------------------------------
# Details (verdicts)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ScoredAttempt:
    """One attempt of a details file: its verdicts, codes and the cost its meta reports."""

    index: int
    verdicts: tuple[StepVerdict, ...]
    evaluation_error: str | None
    step_codes: Mapping[str, str]
    usage: Usage | None
    latency_s: float | None
    record_failed: bool  # the record-level status says generation failed and this is the only attempt
    declared_total_steps: int = 0  # the evaluation's own `total_steps`

    @property
    def generation_ok(self) -> bool:
        return self.evaluation_error is None and not self.record_failed

    def resolved(self, scored_steps: int) -> bool:
        return is_resolved((verdict.status for verdict in self.verdicts), scored_steps, self.generation_ok)

    @property
    def passed_steps(self) -> frozenset[str]:
        return frozenset(v.step_id for v in self.verdicts if v.status == "pass")

    @property
    def scored_verdicts(self) -> tuple[StepVerdict, ...]:
        return tuple(v for v in self.verdicts if v.status != "skipped")

    def verdict(self, step_id: str) -> StepVerdict | None:
        return next((v for v in self.verdicts if v.step_id == step_id), None)


@dataclass(frozen=True)
class Details:
    task_id: str
    status: str
    category: str
    attempts: tuple[ScoredAttempt, ...]

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Details:
        attempts = record.get("attempts") or []
        single_failed = len(attempts) == 1 and record.get("status") in GENERATION_FAILED_STATES
        return cls(
            str(record.get("task_id", "?")),
            str(record.get("status", "")),
            str(record.get("category", "")),
            tuple(_scored_attempt(index, attempt, single_failed) for index, attempt in enumerate(attempts)),
        )


def _scored_attempt(index: int, record: Mapping[str, Any], record_failed: bool) -> ScoredAttempt:
    meta = record["meta"]
    evaluation = meta["evaluation"]
    latency = meta.get("latency_s")
    error = evaluation.get("error")
    return ScoredAttempt(
        index=index,
        verdicts=tuple(StepVerdict.from_record(step) for step in evaluation["steps"]),
        evaluation_error=None if error is None else str(error),
        step_codes=dict((record.get("final_answer") or {}).get("step_codes") or {}),
        usage=Usage.from_record(meta.get("usage")),
        latency_s=None if latency is None else float(latency),
        record_failed=record_failed,
        declared_total_steps=int(evaluation.get("total_steps", 0)),
    )


# ---------------------------------------------------------------------------
# Generations (prompts, answers, trajectories)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolRun:
    """One tool run of a tool_use step: the code the model sent and what it got back."""

    call_id: str
    name: str
    code: str
    status: str
    duration_s: float
    truncated: bool
    output: str


@dataclass(frozen=True)
class ToolStats:
    """Tool calls and their outcomes; `other` counts statuses outside the known vocabulary."""

    calls: int = 0
    ok: int = 0
    error: int = 0
    timeout: int = 0
    sandbox_error: int = 0
    other: int = 0

    def __add__(self, other: ToolStats) -> ToolStats:
        return ToolStats(
            self.calls + other.calls,
            self.ok + other.ok,
            self.error + other.error,
            self.timeout + other.timeout,
            self.sandbox_error + other.sandbox_error,
            self.other + other.other,
        )

    @classmethod
    def of(cls, calls: Iterable[ToolRun]) -> ToolStats:
        counts = Counter(call.status for call in calls)
        known = {status: counts.get(status, 0) for status in TOOL_STATUSES}
        return cls(sum(counts.values()), other=sum(counts.values()) - sum(known.values()), **known)

    def to_record(self) -> dict[str, int]:
        return {
            "calls": self.calls,
            "ok": self.ok,
            "error": self.error,
            "timeout": self.timeout,
            "sandbox_error": self.sandbox_error,
            "other": self.other,
        }


@dataclass(frozen=True)
class GeneratedStep:
    step_id: str
    prefilled: bool
    status: str
    code: str | None
    raw_answer: str | None
    error: str | None
    finish_reason: str | None
    usage: Usage | None
    latency_s: float
    prompt: str | None
    model_calls: int
    tool_calls: tuple[ToolRun, ...]
    messages: tuple[Mapping[str, Any], ...]
    turns: tuple[Turn, ...] | None = None  # None: the generation predates recorded turns

    @property
    def tool_stats(self) -> ToolStats:
        return ToolStats.of(self.tool_calls)


@dataclass(frozen=True)
class Generation:
    problem_id: str
    attempt: int
    status: str
    error: str | None
    mode: str
    usage: Usage | None
    latency_s: float | None
    steps: tuple[GeneratedStep, ...]

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Generation:
        latency = record.get("latency_s")
        return cls(
            str(record["problem_id"]),
            int(record["attempt"]),
            str(record["status"]),
            record.get("error"),
            str(record.get("mode", "")),
            Usage.from_record(record.get("usage")),
            None if latency is None else float(latency),
            tuple(_generated_step(step) for step in record["steps"]),
        )

    def step(self, step_id: str) -> GeneratedStep | None:
        return next((step for step in self.steps if step.step_id == step_id), None)

    @property
    def cost(self) -> tuple[Usage | None, float | None]:
        """Usage and latency: summed over the steps (a step's calls counted from its trajectory when its usage
        omits them); the file's own totals when it has no steps."""
        if not self.steps:
            return self.usage, self.latency_s
        usage = sum((step.usage or Usage() for step in self.steps), Usage())
        return usage, sum(step.latency_s for step in self.steps)

    @property
    def tool_stats(self) -> ToolStats:
        return sum((step.tool_stats for step in self.steps), ToolStats())


def _tool_code(arguments: Any) -> str:
    """The `code` argument of a tool call as sent; the raw arguments when they are not the expected JSON (or
    are too long or too deeply nested to be read: `untrusted.parse_json`)."""
    if not isinstance(arguments, str):
        try:
            return json.dumps(arguments)
        except (TypeError, ValueError, RecursionError):
            return valid_text(arguments)
    try:
        parsed = parse_json(arguments, TOOL_ARGUMENTS_READ_CHARS, strict=False)  # as the code interpreter reads them
    except UntrustedJSONError:
        return arguments
    return valid_text(parsed["code"]) if isinstance(parsed, dict) and isinstance(parsed.get("code"), str) else arguments


def _tool_calls(trajectory: Mapping[str, Any]) -> tuple[ToolRun, ...]:
    sent = {}
    for message in trajectory.get("messages") or ():
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            sent[str(call.get("id"))] = _tool_code(function.get("arguments", ""))
    return tuple(
        ToolRun(
            str(result.get("call_id")),
            str(result.get("name", "")),
            sent.get(str(result.get("call_id")), ""),
            str(result.get("status", "")),
            float(result.get("duration_s", 0.0)),
            bool(result.get("truncated")),
            str(result.get("output", "")),
        )
        for result in trajectory.get("tool_results") or ()
    )


@dataclass(frozen=True)
class TurnCall:
    """A tool call an assistant turn made: its id, the tool and the code it sent."""

    call_id: str
    name: str
    code: str


@dataclass(frozen=True)
class Turn:
    """One turn of a step's conversation, in order. `role`: system, user, assistant, tool, or `failed call` (a
    model call that failed for good, which ends the step); `call`: an assistant turn's model call (tokens,
    latency, finish reason); `tool`: a tool turn's run (status, duration)."""

    role: str
    text: str | None
    reasoning: str | None = None
    tool_calls: tuple[TurnCall, ...] = ()
    call: str | None = None
    tool: ToolRun | None = None


def _text_or_none(value: Any) -> str | None:
    if value is None:
        return None
    return valid_text(value) if isinstance(value, str) else valid_text(json.dumps(value, default=repr))


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _call_text(call: Mapping[str, Any]) -> str:
    usage = _mapping(call.get("usage"))
    parts = [f"{usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out tokens"]
    latency = call.get("latency_s")
    if isinstance(latency, (int, float)) and not isinstance(latency, bool):
        parts.append(f"{latency:.2f} s")
    if call.get("finish_reason"):
        parts.append(f"finish_reason {valid_text(call['finish_reason'])}")
    return ", ".join(parts)


def _turn_calls(message: Mapping[str, Any]) -> tuple[TurnCall, ...]:
    found = []
    for call in message.get("tool_calls") or ():
        if not isinstance(call, Mapping):
            continue
        function = _mapping(call.get("function"))
        found.append(
            TurnCall(
                valid_text(call.get("id")),
                valid_text(function.get("name", "")),
                _tool_code(function.get("arguments", "")),
            )
        )
    return tuple(found)


def _turns(trajectory: Mapping[str, Any], tool_runs: Sequence[ToolRun]) -> tuple[Turn, ...] | None:
    """The conversation of a step, turn by turn (see `Turn`); None when the trajectory predates recorded turns.
    Assistant turns take the successful model calls in order; a failed call ends the conversation."""
    if trajectory.get("turns_recorded") is not True:
        return None
    calls = [call for call in trajectory.get("calls") or () if isinstance(call, Mapping)]
    answered = iter([call for call in calls if not call.get("error")])
    runs = {run.call_id: run for run in tool_runs}
    turns = []
    for message in trajectory.get("messages") or ():
        if not isinstance(message, Mapping):
            continue
        role = valid_text(message.get("role", ""))
        text = _text_or_none(message.get("content"))
        if role == "assistant":
            call = next(answered, None)
            turns.append(
                Turn(
                    role,
                    text,
                    _text_or_none(message.get("reasoning")),
                    _turn_calls(message),
                    _call_text(call) if call else None,
                )
            )
        elif role == "tool":
            turns.append(Turn(role, text, tool=runs.get(valid_text(message.get("tool_call_id")))))
        else:
            turns.append(Turn(role, text))
    failed = [call for call in calls if call.get("error")]
    if failed:
        turns.append(Turn("failed call", _text_or_none(failed[-1].get("error"))))
    return tuple(turns)


def _prompt(messages: Sequence[Mapping[str, Any]]) -> str | None:
    first = messages[0] if messages else None
    return str(first.get("content")) if first and first.get("role") == "user" else None


def _generated_step(record: Mapping[str, Any]) -> GeneratedStep:
    trajectory = record.get("trajectory") or {}
    messages = tuple(trajectory.get("messages") or ())
    model_calls = len(trajectory.get("calls") or ())
    tool_calls = _tool_calls(trajectory)
    return GeneratedStep(
        step_id=str(record["step_id"]),
        prefilled=bool(record.get("prefilled")),
        status=str(record.get("status", "")),
        code=record.get("code"),
        raw_answer=record.get("raw_answer"),
        error=record.get("error"),
        finish_reason=record.get("finish_reason"),
        usage=Usage.from_record(record.get("usage"), model_calls),
        latency_s=float(record.get("latency_s", 0.0)),
        prompt=_prompt(messages),
        model_calls=model_calls,
        tool_calls=tool_calls,
        messages=messages,
        turns=_turns(trajectory, tool_calls),
    )


def read_generation(paths: RunPaths, problem_id: str, attempt: int) -> Generation | None:
    """The generation of `attempt`; None when it is absent, invalid or records another attempt."""
    record = read_artifact(paths.generation(problem_id, attempt), "generation")
    if record is None or record["attempt"] != attempt or str(record["problem_id"]) != problem_id:
        return None
    return Generation.from_record(record)


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
    def settings(self) -> Mapping[str, Any]:
        settings: Mapping[str, Any] = (self.config or {}).get("settings", {})
        return settings

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
    """The run's selection.json, parsed and validated once per content; None when it is missing or invalid."""
    try:
        text = paths.selection.read_text(encoding="utf-8")
    except (OSError, ValueError):
        return None
    return _selection_of(text)


@lru_cache(maxsize=16)
def _selection_of(text: str) -> Selection | None:
    try:
        record = json.loads(text)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("schema_version") != SCHEMA_VERSION:
        return None
    try:
        validate("selection", record)
    except ArtifactError:
        return None
    return Selection.from_record(record)


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
    record = read_artifact(path, "details")
    if record is None:
        failure = not_scored.read(paths, problem_id)
        if failure is not None:
            state: ProblemState = "invalid_details" if path.exists() else "missing_details"
            return DetailsRead(None, state, failure.line, failure.line)
        reason = "details file does not validate" if path.exists() else "no details file"
        return DetailsRead(
            None, "invalid_details" if path.exists() else "missing_details", reason, f"{reason}: {path.name}"
        )
    if str(record["task_id"]) != problem_id:
        return DetailsRead(
            None, "invalid_details", "details of another problem", f"{path.name} holds task_id {record['task_id']}"
        )
    return DetailsRead(Details.from_record(record), record["status"])


def read_problem(paths: RunPaths, entry: SelectionEntry, attempts: int, with_generations: bool = True) -> ProblemResult:
    found = read_details(paths, entry.problem_id)
    count = len(found.details.attempts) if found.details else attempts
    generations = (
        tuple(read_generation(paths, entry.problem_id, index) for index in range(count)) if with_generations else ()
    )
    return ProblemResult(entry, found.state, found.details, generations, found.missing_reason, found.error)


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


def read_summary(paths: RunPaths) -> Mapping[str, Any] | None:
    """summary.json when it validates (its fingerprint and the plots it lists decide whether it is current)."""
    return read_artifact(paths.summary_json, "summary")


def max_attempts(problems: Iterable[ProblemResult]) -> int:
    """The largest number of attempts a details file holds (1 when none is readable)."""
    return max((len(p.details.attempts) for p in problems if p.details is not None), default=1)
