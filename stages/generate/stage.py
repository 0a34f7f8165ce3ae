"""The generate stage for one problem: `run_generate(settings, problem_id, attempt)`; all attempts of a
problem: `run_generate_attempts(settings, problem_id)` (up to date: `generations_current`).

Walks the problem's steps in order and writes `<run>/generations/<id>.json` after every step, so a
crash or an API failure at step k resumes at step k: a step already generated with the same prompt
fingerprint and a status other than "error" is never asked again (later prompts embed earlier
codes, so they stay identical when nothing changed). Within a step, every reply is saved in the reply journal
before it is parsed (`stages.generate.journal`): a failure while handling it is that step's error, and the
step's next try reads the reply back instead of paying for it again. Earlier steps are carried into later prompts as
`settings.carry` says (`stages.benchmark.protocol.carried_forward`); prefilled steps carry the official code.

A model call that fails for good stops the problem: the step is recorded with status "error", the
artifact gets status "error", one line goes to stderr, and the function returns normally so that
scoring and the summary still count the problem. A prompt that does not fit the server's context is
final instead: that step is "context_exceeded" (its error says the way out), the later steps are
"not_generated", the artifact is "complete" (a rerun does not send the same prompt again) and scoring
counts those steps as failed. A key refused (HTTP 401/403) stops the whole run at once (`KeyRefused`,
after the artifact is written), at the first real call too: every later request would be refused too. A wrong model name or key must not quietly score
zero: while every problem attempted in this process failed with the same permanent model-level error
(HTTP 404, or no API key), the failing problems raise `RunAborted` after writing their
artifact (their doit tasks fail, so no summary claims 0/N) and later problems raise it at once,
without calling the API. Problems run in threads, so with enough concurrency every problem has
failed before any of them could see the others' failures: the check after the failure is what
stops the run then.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from tqdm import tqdm

from stages.benchmark.problems import Problem, ProblemDataError, Step, prefilled_code
from stages.benchmark.protocol import carried_forward
from stages.config.fingerprints import FingerprintParts, digest, settings_slice
from stages.config.run_command import clean_generations_command
from stages.config.settings import Settings
from stages.errors import PipelineError, RunStopped
from stages.execution.slots import PrioritySlots, named_slots
from stages.execution.untrusted import shown, valid_data
from stages.exit_codes import KEY_REFUSED
from stages.generate import builtin
from stages.generate.prompts import StepPrompt, build_step_prompt
from stages.records import invocations
from stages.records.endpoint import EndpointRecord
from stages.records.generation import GeneratedStep, Generation, read_generation_file
from stages.records.run_conditions import tool_outcome_counts
from stages.records.stamp import Stamp
from stages.records.usage import Tokens
from stages.statuses import GenerationStepStatus
from stages.storage.artifacts import fingerprint, is_current, read_artifact, sha256_file, write_artifact
from stages.storage.json_values import JSONObject, freeze_object, integer, objects
from stages.storage.paths import DataPaths

if TYPE_CHECKING:  # the model client and its loops load only when a model is really asked
    from stages.generate.client import ModelCallError, ModelClient
    from stages.generate.journal import ReplyJournal
    from stages.generate.loops import StepOutcome

GenerationStatus = Literal["complete", "error"]
ARTIFACT_KIND = "generation"
# Steps the live view does not count as answered: a failed call (asked again later) and prefilled steps (never asked).
UNPUBLISHED_STEP_STATUSES: frozenset[GenerationStepStatus] = frozenset({"error", "prefilled"})


class RunAborted(PipelineError, RuntimeError):
    """Every problem attempted so far failed with the same permanent model-level error."""


class KeyRefused(RunStopped):
    """The endpoint refused the key mid-run (HTTP 401/403): the run stops with one line."""


CONTEXT_WAY_OUT = (
    "give the server a larger context (llama.cpp --ctx-size, vLLM --max-model-len, Ollama num_ctx) or set a "
    "smaller max_tokens, then run `{clean_command}` and rerun"
)


def context_exceeded_text(step_id: str, message: str, clean_command: str) -> str:
    """The error of a step whose prompt does not fit; `clean_command` removes the problem's generations."""
    return f"the prompt of step {step_id} does not fit the server's context ({message}): " + CONTEXT_WAY_OUT.format(
        clean_command=clean_command
    )


# ---------------------------------------------------------------------------
# Paths and fingerprints
# ---------------------------------------------------------------------------


def generation_path(settings: Settings, problem_id: str, attempt: int = 0) -> Path:
    """The generation file of one attempt (named by `RunPaths.generation`)."""
    return settings.run_paths.generation(problem_id, attempt)


def generate_settings_fingerprint(settings: Settings) -> str:
    """The generate settings' fingerprint; for `replay:<file>` also the file's content (the file is the model)."""
    base = settings.fingerprint("generate")
    if not settings.model.startswith(builtin.REPLAY_PREFIX):
        return base
    try:
        content = sha256_file(builtin.replay_file(settings.model))
    except OSError:
        content = "missing"
    return fingerprint({"generate": base, "replay_sha256": content})


def _fingerprint_of(settings: Settings, problem: Problem, attempt: int) -> str:
    return fingerprint(
        {"generate": generate_settings_fingerprint(settings), "problem": problem.fingerprint, "attempt": attempt}
    )


def generation_fingerprint_parts(settings: Settings, problem: Problem, attempt: int) -> FingerprintParts:
    """The generation fingerprint and what it covers by named part: the generate settings, the problem record
    and, for `replay:<file>`, the replay file."""
    replay = (
        {"replay file": generate_settings_fingerprint(settings)[:16]}
        if settings.model.startswith(builtin.REPLAY_PREFIX)
        else {}
    )
    return FingerprintParts(
        _fingerprint_of(settings, problem, attempt),
        settings=settings_slice(settings, "generate"),
        inputs={f"problem {problem.problem_id}": digest(problem.fingerprint), **replay},
    )


def generation_fingerprint(settings: Settings, problem_id: str, attempt: int = 0) -> str:
    """sha256 of the generate settings, the problem record and the attempt number."""
    return _fingerprint_of(settings, settings.benchmark.problem(problem_id), attempt)


def generation_current(settings: Settings, problem_id: str, attempt: int = 0) -> bool:
    """True when the artifact exists, validates, carries the expected fingerprint and is complete."""
    try:
        expected = generation_fingerprint(settings, problem_id, attempt)
    except ProblemDataError:
        return False
    return is_current(
        generation_path(settings, problem_id, attempt), ARTIFACT_KIND, expected, require_status=("complete",)
    )


# ---------------------------------------------------------------------------
# Run-level breaker
# ---------------------------------------------------------------------------


@dataclass
class _BreakerState:
    attempted: int = 0
    failures: dict[Any, int] = field(default_factory=dict)
    tripped: str | None = None


class ModelBreaker:
    """Stops a run whose every problem failed with the same permanent model-level error."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._states: dict[tuple[str, str, str], _BreakerState] = {}

    @staticmethod
    def key(settings: Settings) -> tuple[str, str, str]:
        return settings.model, settings.base_url, settings.api_protocol

    def check(self, settings: Settings) -> None:
        with self._lock:
            state = self._states.get(self.key(settings), _BreakerState())
            tripped, attempted = state.tripped, state.attempted
        if tripped is not None:
            raise RunAborted(
                f"model call failed the same way for {problems_so_far(attempted)} (model={settings.model}): "
                f"{tripped.rstrip('. ')}; check model= and base_url="
            )

    def record(self, settings: Settings, failure: ModelCallError | None) -> None:
        """Count one problem that called the model; `failure` is what stopped it, if anything."""
        with self._lock:
            state = self._states.setdefault(self.key(settings), _BreakerState())
            state.attempted += 1
            if failure is None or not failure.model_level:
                state.tripped = None  # the model answered (or failed for another reason): it exists
                return
            kind = failure.status if failure.status is not None else failure.message
            state.failures[kind] = state.failures.get(kind, 0) + 1
            if state.failures[kind] == state.attempted:
                state.tripped = failure.message

    def reset(self) -> None:
        with self._lock:
            self._states.clear()


BREAKER = ModelBreaker()


def problems_so_far(count: int) -> str:
    """The problems a tripped breaker speaks of: those that called the model so far (others may be in flight)."""
    return (
        "the one problem that called the model so far"
        if count == 1
        else (f"each of the {count} problems that called the model so far")
    )


# ---------------------------------------------------------------------------
# Step records
# ---------------------------------------------------------------------------


def _empty_trajectory() -> JSONObject:
    return {"messages": [], "calls": [], "tool_results": []}


def _unasked_step_record(step: Step, status: str, code: str | None, error: str | None) -> GeneratedStep:
    """The record of a step the model was not asked: no prompt, no answer, no call."""
    return GeneratedStep(
        step_id=step.step_id,
        prefilled=status == "prefilled",
        status=status,
        prompt_fingerprint=None,
        code=code,
        raw_answer=None,
        error=error,
        finish_reason=None,
        trajectory=freeze_object(_empty_trajectory()),
        usage_record=freeze_object(Tokens().to_record(calls=0)),
        latency_s=0.0,
    )


def prefilled_step_record(step: Step, data_paths: DataPaths) -> GeneratedStep:
    return _unasked_step_record(step, "prefilled", prefilled_code(data_paths, step), None)


def not_generated_step_record(step: Step, reason: str) -> GeneratedStep:
    """A step never asked because an earlier step of its problem did not fit the server's context."""
    return _unasked_step_record(step, "not_generated", None, reason)


def generated_step_record(prompt: StepPrompt, outcome: StepOutcome) -> GeneratedStep:
    trajectory = freeze_object(outcome.trajectory)
    return GeneratedStep(
        step_id=prompt.step_id,
        prefilled=False,
        status=outcome.status,
        prompt_fingerprint=prompt.fingerprint,
        code=outcome.code,
        raw_answer=outcome.raw_answer,
        error=outcome.error,
        finish_reason=outcome.finish_reason,
        trajectory=trajectory,
        tool_outcomes=freeze_object(tool_outcome_counts(objects(trajectory.get("tool_results")))),
        usage_record=freeze_object(outcome.usage.to_record(calls=outcome.calls)),
        latency_s=round(outcome.latency_s, 6),
    )


def reusable(previous: GeneratedStep | None, prompt: StepPrompt) -> bool:
    return (
        previous is not None
        and previous.prompt_fingerprint == prompt.fingerprint
        and previous.status not in ("error", "prefilled")
    )


def _previous_steps(generation: Generation | None) -> dict[str, GeneratedStep]:
    return {step.step_id: step for step in generation.steps} if generation else {}


# ---------------------------------------------------------------------------
# The problem walk
# ---------------------------------------------------------------------------


@dataclass
class ProblemRun:
    """The state of one problem's generation: settings, steps so far, and the lazily opened client."""

    settings: Settings
    problem: Problem
    attempt: int
    path: Path
    fingerprint: FingerprintParts
    generate_fingerprint: str
    steps: list[GeneratedStep] = field(default_factory=list)
    carried: list[str] = field(default_factory=list)
    model: ModelClient | None = None
    called_model: bool = False
    failure: ModelCallError | None = None
    journal: ReplyJournal | None = None
    endpoints: list[EndpointRecord] = field(default_factory=list)  # those the steps name by index, in order

    def step_record(self, index: int, previous: dict[str, GeneratedStep]) -> GeneratedStep:
        step = self.problem.steps[index]
        if step.prefilled:
            return prefilled_step_record(step, self.settings.data_paths)
        prompt = build_step_prompt(
            self.problem,
            index,
            self.carried,
            data_paths=self.settings.data_paths,
            with_background=self.settings.with_background,
            generate_settings_fingerprint=self.generate_fingerprint,
        )
        earlier = previous.get(step.step_id)
        if earlier is not None and reusable(earlier, prompt):
            return earlier
        outcome = self.ask(prompt)
        self.failure = outcome.failure
        if outcome.status == "context_exceeded" and outcome.failure is not None:
            clean_command = clean_generations_command(self.settings, f"generate:{self.problem.problem_id}")
            text = context_exceeded_text(step.step_id, outcome.failure.message, clean_command)
            outcome = dataclasses.replace(outcome, error=text)
        return dataclasses.replace(generated_step_record(prompt, outcome), endpoint=self.endpoint_index())

    def endpoint_index(self) -> int:
        """The index in `endpoints` of the endpoint asked now (stages.generate.endpoint_report), added when new."""
        from stages.generate.endpoint_report import endpoint_of

        current = endpoint_of(self.settings)
        keys = [endpoint.key for endpoint in self.endpoints]
        if current.key not in keys:
            self.endpoints.append(current)
            return len(self.endpoints) - 1
        return keys.index(current.key)

    def ask(self, prompt: StepPrompt) -> StepOutcome:
        from stages.generate.client import ModelCallError, ModelClient
        from stages.generate.journal import ReplyJournal, StepReplies
        from stages.generate.loops import StepOutcome, run_step

        if self.model is None:
            BREAKER.check(self.settings)
            self.called_model = True
            try:
                self.model = ModelClient(self.settings)
            except ModelCallError as error:
                return StepOutcome("error", None, None, None, str(error), _empty_trajectory(), Tokens(), 0, 0.0, error)
        if self.journal is None:
            self.journal = ReplyJournal(self.settings.run_paths.replies(self.problem.problem_id, self.attempt))
        return run_step(
            self.model, self.settings, prompt, StepReplies(self.journal, prompt.step_id, prompt.fingerprint)
        )

    def add(self, record: GeneratedStep) -> None:
        self.steps.append(record)
        step = self.problem.steps[len(self.steps) - 1]
        self.carried.append(carried_forward(step, record.code, self.settings.data_paths, self.settings.carry))

    def recorded(self, status: GenerationStatus, error: str | None) -> JSONObject:
        """Write the generation file; then the replies of its last step are in it, unless that step is an error
        (its journal is kept, to be read back when it is asked again)."""
        record = self.write(status, error)
        if self.journal is not None and self.steps and self.steps[-1].status != "error":
            self.journal.clear()
        return record

    def write(self, status: GenerationStatus, error: str | None) -> JSONObject:
        usage = Tokens()
        calls = 0
        for step in self.steps:
            usage = usage + Tokens.of_record(step.usage_record)
            calls += integer(step.usage_record.get("calls"))
        generation = Generation(
            stamp=Stamp.of(self.fingerprint),
            status=status,
            problem_id=self.problem.problem_id,
            attempt=self.attempt,
            model=self.settings.model,
            mode=self.settings.mode,
            api_protocol=self.settings.api_protocol,
            with_background=self.settings.with_background,
            carry=self.settings.carry,
            concurrency=self.settings.concurrency,
            error=error,
            usage_record=freeze_object(usage.to_record(calls=calls)),
            latency_s=round(sum(step.latency_s for step in self.steps), 6),
            steps=tuple(self.steps),
            endpoints=tuple(self.endpoints),
        )
        # valid_data: whatever a reply held, the record is writable (a non-finite number as text, strings valid)
        return write_artifact(self.path, ARTIFACT_KIND, valid_data(generation.to_record()))

    def close(self) -> None:
        """Release the client and count this problem in the breaker; RunAborted if it is tripped by a
        model-level failure of this problem (the artifact with the error is already written)."""
        if self.model is not None:
            self.model.close()
        if self.failure is not None and self.failure.auth:
            return  # the key was refused: the run stops with the key's own line (KeyRefused), not the breaker's
        if self.called_model:
            BREAKER.record(self.settings, self.failure)
            if self.failure is not None and self.failure.model_level:
                BREAKER.check(self.settings)


def _walk_steps(run: ProblemRun, previous: dict[str, GeneratedStep]) -> tuple[JSONObject, str | None]:
    """Every step in order, the artifact written after each; the final record and the error that stopped it."""
    steps = run.problem.steps
    for index, step in enumerate(steps):
        record = run.step_record(index, previous)
        run.add(record)
        _publish_step(run, record, asked=record is not previous.get(step.step_id))
        if record.status == "error":
            message = f"step {step.step_id}: {record.error}"
            return run.recorded("error", message), message
        if record.status == "context_exceeded":
            _record_never_asked(run, index + 1, step.step_id)
            return run.recorded("complete", None), None
        if index + 1 < len(steps):
            run.recorded("error", f"incomplete: stopped before step {steps[index + 1].step_id}")
    return run.recorded("complete", None), None


def _publish_step(run: ProblemRun, record: GeneratedStep, *, asked: bool) -> None:
    """A step with its final answer, for the live view's step counts and ETA (prefilled and failed steps: none)."""
    from stages.progress.activity import ACTIVITY

    if record.status not in UNPUBLISHED_STEP_STATUSES:
        ACTIVITY.add_generated_step(run.problem.problem_id, run.attempt, record.step_id, asked=asked)


def _record_never_asked(run: ProblemRun, start: int, exceeded_step: str) -> None:
    """The steps after one that did not fit the context: not generated (prefilled steps keep their code)."""
    reason = f"not generated: the prompt of step {exceeded_step} did not fit the server's context"
    for step in run.problem.steps[start:]:
        if step.prefilled:
            run.add(prefilled_step_record(step, run.settings.data_paths))
        else:
            run.add(not_generated_step_record(step, reason))


def run_generate(settings: Settings, problem_id: str, attempt: int = 0) -> JSONObject:
    """Generate (or resume) every step of one problem; returns the written generation record.

    RunAborted when the model failed with a permanent model-level error for every problem so far."""
    problem = settings.benchmark.problem(problem_id)
    path = generation_path(settings, problem_id, attempt)
    expected = generation_fingerprint_parts(settings, problem, attempt)
    if is_current(path, ARTIFACT_KIND, expected.value, require_status=("complete",)):
        return read_artifact(path, ARTIFACT_KIND)  # type: ignore[return-value]
    run = ProblemRun(settings, problem, attempt, path, expected, generate_settings_fingerprint(settings))
    previous = read_generation_file(path)
    run.endpoints = list(previous.endpoints) if previous else []
    try:
        record, error = _walk_steps(run, _previous_steps(previous))
    finally:
        run.close()  # raises RunAborted for a model-level failure while the breaker is tripped
    if run.failure is not None and run.failure.auth:
        raise KeyRefused(
            f"{run.failure.message}: the key was refused mid-run (problem {problem_id}); finished work is saved: "
            f"fix the key ({settings.api_key_env}) and rerun the same command",
            KEY_REFUSED.code,
        )
    if error is not None:
        tqdm.write(f"generate {problem_id}: failed at {shown(error)}", file=sys.stderr)
    return record


# ---------------------------------------------------------------------------
# Several attempts per problem (settings.attempts)
# ---------------------------------------------------------------------------


def generations_current(settings: Settings, problem_id: str) -> bool:
    """True when the generation of every attempt 0..settings.attempts-1 is current (see `generation_current`) and
    no record says one of them failed (its task then runs, asks only what is missing, and clears the record)."""
    from stages.records import not_generated

    if not_generated.read_for_attempts(settings.run_paths, problem_id, settings.attempts) is not None:
        return False
    return all(generation_current(settings, problem_id, attempt) for attempt in range(settings.attempts))


PROBLEM_ADMISSION_SETTLE_S = 0.3


def problem_slots(settings: Settings) -> PrioritySlots:
    """The process-wide admission of problems: at most `concurrency` problems are generated at once (the
    first admission waits PROBLEM_ADMISSION_SETTLE_S, against a model call of seconds, so that the problems
    doit starts together are admitted in priority order)."""
    return named_slots("problems generated", settings.concurrency, PROBLEM_ADMISSION_SETTLE_S)


class AttemptStatuses(TypedDict):
    """What `run_generate_attempts` returns (doit keeps it as the task's values)."""

    problem_id: str
    attempts: list[str]  # each attempt's generation status, in order


def run_generate_attempts(settings: Settings, problem_id: str, priority: float = 0.0) -> AttemptStatuses:
    """Generate (or resume) attempts 0..settings.attempts-1 of one problem, in order; each is independent and
    resumable on its own (`run_generate`). Returns a small JSON-native dict: each attempt's status.

    The problem first waits for one of the `concurrency` problem slots; waiting problems are admitted
    highest `priority` first (the pipeline passes the problem's place in the generation order:
    `wiring.generation_admissions`), then in arrival order. A problem finishes all its
    attempts before it frees its slot, so its scoring can start while other problems are generated.

    RunAborted (from `run_generate`) stops the remaining attempts. Its start and end are recorded in the run's
    invocations.jsonl (`stages.records.invocations`), the wait for a slot included."""
    with invocations.recorded(settings.run_paths, "generate", problem_id), problem_slots(settings).slot(priority):
        statuses = [_attempt_status(settings, problem_id, attempt) for attempt in range(settings.attempts)]
    return {"problem_id": problem_id, "attempts": statuses}


class AttemptFailed(Exception):
    """An attempt's generation raised `error` (not a stop of the run): the attempts before `attempt` are complete."""

    def __init__(self, attempt: int, error: Exception) -> None:
        super().__init__(str(error))
        self.attempt = attempt
        self.error = error


def _attempt_status(settings: Settings, problem_id: str, attempt: int) -> str:
    """The attempt's generation status; any failure that is not a stop of the run as AttemptFailed."""
    from stages.errors import RunStopped
    from stages.execution.live_processes import RunInterrupted

    try:
        return str(run_generate(settings, problem_id, attempt)["status"])
    except (RunInterrupted, RunStopped, RunAborted):
        raise
    except Exception as error:  # noqa: BLE001 - the caller records it as this attempt's
        raise AttemptFailed(attempt, error) from error
