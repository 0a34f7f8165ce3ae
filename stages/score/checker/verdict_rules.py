"""The rules of a verdict: every verdict of a step, whether its test process ran or not, is decided here.

Trusted, in the doit process (never in the checker process: nothing run by path imports this module). The parent
side (`stages.score.parent`) only observes and assembles: it calls these rules with the facts it saw.

* Before running: `verdict_before_running` decides from the step and its generation record whether the step is
  `skipped` (prefilled), `fail` (never generated, or never answered), `parse_error` (no code in the answer), or
  is to be run (None).
* Without a judgement of the test process: the steps the trusted side could not run are `eval_error`s with a named
  reason (`targets_missing`, `unprepared_tests`, `targets_unreadable`, `not_started`, and the dask executor's
  `worker_unfit`, `not_submitted`, `worker_failed`, `workers_lost`; `retried_after_worker_loss` notes a step
  re-run after its worker died). Each reason's text is declared once, in a `Rule`.
* Executed: `SessionLog` holds what the engine saw; `on_test_frame` and `on_checker_frame` take each frame of the
  two processes into it; `decide` turns it, with the test process's exit status, into a status and a reason, and
  `judged_verdict` into the step's verdict: `pass` needs every test judged passed by the checker, the test
  process's completion record and exit code 0; a value that never arrives fails.
* Over grading environments (`environments=`): `verdict_over_environments` makes one verdict of each consulted
  environment's.

Total on whatever the test process sends: every frame is bounded before it is parsed, every parse of it catches
everything (deep nesting, invalid UTF-8), every text it takes from it is made valid UTF-8
(`stages.execution.untrusted.valid_text`) and bounded. The test process never chooses the kind of outcome: a failure it
reports is a failed test with its text as the reason, whatever kind it names; only what the trusted side
established itself is an `eval_error` (the checker could not start, the process could not be launched; targets
are checked before the launch).
"""

from __future__ import annotations

import dataclasses
import json
import mmap
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from stages.benchmark.datasets import PREFILLED_REASON
from stages.benchmark.problems import Step
from stages.benchmark.protocol import is_code, no_code_reason
from stages.execution.untrusted import valid_data, valid_text
from stages.records.generation import GeneratedStep, Generation
from stages.records.verdict import EnvironmentVerdict, StepVerdict
from stages.statuses import NEVER_ANSWERED_STATUSES, GenerationStepStatus, StepStatus
from stages.storage.json_values import JSONObject, JSONValue

MAX_VALUES_HEADER_BYTES = 1 << 20  # the JSON header of a values frame (a name and a size per value)
MAX_RECORD_BYTES = 64 * 1024  # a record of the test process (its reasons are bounded to 2000 characters)
CHECKER_RECORD_BYTES = 64 * 1024
REASON_LIMIT = 2000
# A frame as the engine reads it: each in one buffer of its announced size, a large one in an anonymous mapping.
Frame = bytes | bytearray | mmap.mmap


class FrameSink(Protocol):
    """Where the values frames of the test process go on to (the engine's end of the checker's channel)."""

    def send(self, payload: Frame) -> bool: ...


@dataclass
class SessionLog:
    """What the engine saw from the test process and the checker.

    What the test process says is at most a failed test with its text as the reason (`failure`): the kind
    of failure it names is ignored. Only what the trusted side established is an `eval_error`: the checker
    could not start (`checker_error`: its dependencies do not import there either, unreadable targets).
    A checker that fails after it was sent a value fails the step (`checker_failure`)."""

    total: int
    forwarded: list[int] = field(default_factory=list)
    results: dict[int, tuple[bool, str]] = field(default_factory=dict)
    compared: dict[int, JSONObject] = field(default_factory=dict)  # what each failed check compared
    failure: tuple[int | None, str] | None = None  # (test, reason) of the first failure the test process reported
    complete: bool = False
    tamper: str | None = None
    checker_ready: bool = False
    checker_error: str | None = None
    checker_failure: str | None = None
    timed_out: bool = False
    test_closed: bool = False
    checker_closed: bool = False

    @property
    def passed(self) -> set[int]:
        return {index for index, (passed, _) in self.results.items() if passed}

    def first_failed_check(self) -> tuple[int, str] | None:
        failed = sorted((index, reason) for index, (passed, reason) in self.results.items() if not passed)
        return failed[0] if failed else None

    def deciding_comparison(self, reason: str) -> JSONObject | None:
        """What the failed check behind a `fail` with `reason` compared (None when another failure decided)."""
        failed = self.first_failed_check()
        return self.compared.get(failed[0]) if failed is not None and failed[1] == reason else None

    def first_unjudged(self) -> int:
        """The first test sent to the checker that it has not judged (else the next one)."""
        return next((index for index in self.forwarded if index not in self.results), len(self.forwarded))

    def checker_stopped(self, why: str) -> None:
        """The checker went away (or broke its protocol): a failed test once it was sent a value, else (it
        never received one) an evaluation error."""
        if self.forwarded and self.checker_ready:
            self.checker_failure = (
                self.checker_failure or f"the checker {why} while judging test {self.first_unjudged() + 1}"
            )
        else:
            self.checker_error = self.checker_error or f"the checker {why} before judging any test"

    def settled(self) -> bool:
        """Nothing more can change the verdict."""
        if self.timed_out or self.tamper or self.checker_error or self.checker_failure or self.first_failed_check():
            return True
        # The checker's start decides too: dependencies it cannot import either make an `eval_error`, however early
        # the test process gave up.
        checker_known = self.checker_ready or self.checker_closed or bool(self.results)
        answered = all(index in self.results for index in self.forwarded) or self.checker_closed
        return (self.test_closed or self.failure is not None or self.complete) and answered and checker_known


def _json_record(frame: Frame, limit: int) -> JSONObject | None:
    """A `J` record of at most `limit` bytes, parsed; None for anything else (never raises)."""
    if frame[:1] != b"J" or len(frame) > limit:
        return None
    try:
        record = json.loads(frame[1:].decode("utf-8"))
    except Exception:  # noqa: BLE001 - invalid UTF-8 or JSON, nesting deeper than the parser's recursion
        return None
    return record if isinstance(record, dict) else None


def _announced_test(frame: Frame) -> int | None:
    """The test a `V` frame says it holds (its JSON header, bounded before parsing); None when unreadable."""
    size = int.from_bytes(frame[1:5], "big")
    if len(frame) < 5 or size > MAX_VALUES_HEADER_BYTES:
        return None
    try:
        header = json.loads(frame[5 : 5 + size].decode("utf-8"))
    except Exception:  # noqa: BLE001 - see _json_record
        return None
    test = header.get("test") if isinstance(header, dict) else None
    return test if type(test) is int else None


def _text(value: JSONValue, default: str) -> str:
    """A reason from a record: text only, valid UTF-8, bounded."""
    return valid_text(value)[:REASON_LIMIT] if isinstance(value, str) and value else default


def on_test_frame(log: SessionLog, frame: Frame, checker: FrameSink) -> None:
    """Take one frame of the test process: a values frame goes on to the checker (`checker`), in test order."""
    if frame[:1] == b"V":
        index = len(log.forwarded)
        announced = _announced_test(frame)
        if announced != index or index >= log.total:
            shown = "an unreadable header" if announced is None else f"test {announced + 1}"
            log.tamper = log.tamper or (
                f"the test process sent values out of order (expected test {index + 1}, got {shown})"
            )
            return
        log.forwarded.append(index)
        if not checker.send(frame):
            log.checker_closed = True
            log.checker_stopped("stopped reading")
        return
    record = _json_record(frame, MAX_RECORD_BYTES)
    if record is None:
        log.tamper = log.tamper or "a malformed message arrived from the test process"
    elif record.get("type") == "done":
        if len(log.forwarded) < log.total:
            log.tamper = log.tamper or (
                f"the test process reported completion after {len(log.forwarded)} of {log.total} tests"
            )
        log.complete = True
    elif log.failure is None:
        test = record.get("test")
        log.failure = (
            test if type(test) is int and 0 <= test < log.total else None,
            _text(record.get("reason"), "the test process reported a failure without a reason"),
        )


def on_checker_frame(log: SessionLog, frame: Frame) -> None:
    """Take one reply of the checker."""
    record = _json_record(frame, CHECKER_RECORD_BYTES)
    if record is None:
        log.checker_stopped("sent a malformed message")
        return
    kind, test = record.get("type"), record.get("test")
    if kind == "ready":
        log.checker_ready = True
    elif kind == "checker_error":
        log.checker_error = log.checker_error or _text(record.get("reason"), "the checker could not start")
    elif type(test) is int and 0 <= test < log.total:
        log.results[test] = (record.get("passed") is True, _text(record.get("reason"), f"test {test + 1} judged"))
        compared = record.get("compared")
        if record.get("passed") is not True and isinstance(compared, dict):
            log.compared[test] = valid_data(compared)
    else:
        log.tamper = log.tamper or _text(record.get("reason"), "the checker refused the values sent")


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def _first_failure(log: SessionLog) -> str | None:
    """The earliest failure in test order: one the test process reported (whatever kind it named), a failed
    check, or the checker failing after it was sent a value."""
    candidates: list[tuple[int, str]] = []
    if log.failure is not None:
        test, reason = log.failure
        candidates.append((test if test is not None else -1, reason))
    failed = log.first_failed_check()
    if failed is not None:
        candidates.append(failed)
    if log.checker_failure is not None:
        candidates.append((log.first_unjudged(), log.checker_failure))
    return min(candidates)[1] if candidates else None


def decide(log: SessionLog, returncode: int | None, timeout_seconds: float) -> tuple[StepStatus, str]:
    """The verdict of one execution (see the module docstring and `SessionLog`)."""
    total = log.total
    if log.checker_error:
        return "eval_error", f"the checker failed: {log.checker_error}"
    if log.tamper:
        return "fail", log.tamper
    if log.timed_out:
        return (
            "timeout",
            f"the tests did not finish within step_timeout_seconds={timeout_seconds:g} (process group killed)",
        )
    failure = _first_failure(log)
    if failure is not None:
        return "fail", failure
    done = f"after {len(log.passed)} of {total} tests"
    if log.complete and len(log.passed) == total:
        if returncode != 0:
            return "fail", f"all tests passed but the test process ended with code {returncode}"
        return "pass", f"all {total} tests passed"
    if returncode is None:
        return "eval_error", "the test process ended without an exit status (the zygote stopped)"
    if returncode < 0:
        return "fail", f"the test process was killed by {_signal_name(returncode)} {done} (no completion record)"
    if returncode == 0:
        return (
            "fail",
            f"the test process exited with code 0 {done} without a completion record (early exit is not a pass)",
        )
    return "fail", f"the test process exited with code {returncode} {done} without a completion record"


@dataclass(frozen=True)
class SessionOutput:
    """What the engine collected of one execution besides its frames: the test process's bounded output (stderr
    with the checker's when the checker failed), how long the step ran and how its test process was launched."""

    stdout: str
    stderr: str
    duration_s: float
    launch_mode: str


def judged_verdict(
    step_id: str, log: SessionLog, returncode: int | None, timeout_seconds: float, output: SessionOutput
) -> StepVerdict:
    """The verdict of one execution: `decide`'s status and reason, with what the engine collected of it."""
    status, reason = decide(log, returncode, timeout_seconds)
    return StepVerdict(
        step_id=step_id,
        status=status,
        reason=valid_text(reason),
        tests_total=log.total,
        tests_passed=len(log.passed),
        returncode=returncode,
        stdout=valid_text(output.stdout),
        stderr=valid_text(output.stderr),
        duration_s=output.duration_s,
        launch_mode=output.launch_mode,
        compared=log.deciding_comparison(reason) if status == "fail" else None,
    )


# ---------------------------------------------------------------------------
# Verdicts without a judgement of the test process
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """A verdict reached without the test process's judgement: its status and its reason's text, whose `{name}`
    fields are filled with what the parent side observed (the facts are inserted as they are, never read as
    templates)."""

    status: StepStatus
    reason: str

    def verdict(self, step_id: str, tests_total: int, executed_on: str = "", **facts: str | int) -> StepVerdict:
        return StepVerdict(
            step_id, self.status, self.reason.format(**facts), tests_total=tests_total, executed_on=executed_on
        )


# Decided before running, from the step and its generation record (in the order `verdict_before_running` tries them).
PREFILLED = Rule("skipped", PREFILLED_REASON)
NOT_GENERATED = Rule("fail", "not generated: {detail}")
NEVER_ANSWERED = Rule("fail", "{detail}")  # final: a prompt too long for the server's context, a step never asked
NO_CODE = Rule("parse_error", "no code in the answer ({why}): {detail}")
# Steps the trusted side could not run: evaluation errors (never cached).
TARGETS_MISSING = Rule("eval_error", "targets missing: {note}")
UNPREPARED_TESTS = Rule("eval_error", "cannot prepare the tests: {error}")
TARGETS_UNREADABLE = Rule("eval_error", "{error}")
NOT_STARTED = Rule("eval_error", "could not start the test process: {error}")
# ... on a dask cluster (`executor=dask`).
WORKER_UNFIT = Rule("eval_error", "on dask worker {worker}: {problem}")
NOT_SUBMITTED = Rule("eval_error", "cannot submit to the dask scheduler: {error}")
WORKER_FAILED = Rule("eval_error", "the dask worker could not run the step: {kind}: {error}")
WORKERS_LOST = Rule(
    "eval_error", "the dask workers running this step died {count} times ({workers}); not retried again"
)
RULES: tuple[Rule, ...] = (
    PREFILLED,
    NOT_GENERATED,
    NEVER_ANSWERED,
    NO_CODE,
    TARGETS_MISSING,
    UNPREPARED_TESTS,
    TARGETS_UNREADABLE,
    NOT_STARTED,
    WORKER_UNFIT,
    NOT_SUBMITTED,
    WORKER_FAILED,
    WORKERS_LOST,
)
# The details of NOT_GENERATED when the generation names none, and of NO_CODE.
NO_GENERATION_FILE = "no generation file"
GENERATION_STOPPED = "generation stopped before this step"
NO_CODE_STATUSES: tuple[GenerationStepStatus, ...] = ("no_code", "truncated")  # named as they are; any other: no_code
RETRY_NOTE = "{reason}; retried after worker loss (dask worker {lost} died during the step{where})"
RETRY_PLACE = "; re-run on {worker}"


def _not_generated_detail(generation: Generation | None, record: GeneratedStep | None) -> str:
    if generation is None:
        return NO_GENERATION_FILE
    return (record.error if record else None) or generation.error or GENERATION_STOPPED


def verdict_before_running(
    step: Step, generation: Generation | None, record: GeneratedStep | None
) -> StepVerdict | None:
    """The verdict of a step decided before anything runs (`record`: its entry in `generation`, None when there is
    none): prefilled, never generated, never answered, or without code; None when its code is to be run."""
    total = len(step.test_cases)
    if step.prefilled:
        return PREFILLED.verdict(step.step_id, total)
    if record is None or record.status == "error":
        return NOT_GENERATED.verdict(step.step_id, total, detail=_not_generated_detail(generation, record))
    if record.status in NEVER_ANSWERED_STATUSES:
        return NEVER_ANSWERED.verdict(step.step_id, total, detail=str(record.error or record.status))
    if not isinstance(record.code, str) or not is_code(record.code):
        why = record.status if record.status in NO_CODE_STATUSES else "no_code"
        return NO_CODE.verdict(step.step_id, total, why=why, detail=no_code_reason(record.raw_answer))
    return None


def targets_missing(step_id: str, tests_total: int, note: str) -> StepVerdict:
    """No targets file to judge the step with (`note`: why, as the targets resolution says)."""
    return TARGETS_MISSING.verdict(step_id, tests_total, note=note)


def unprepared_tests(step_id: str, tests_total: int, error: str) -> StepVerdict:
    """The official test cells could not be split between the test process and the checker."""
    return UNPREPARED_TESTS.verdict(step_id, tests_total, error=error)


def targets_unreadable(step_id: str, tests_total: int, error: str) -> StepVerdict:
    """The step's targets could not be read from the targets file (`error` names the file and the cause)."""
    return TARGETS_UNREADABLE.verdict(step_id, tests_total, error=error)


def not_started(step_id: str, tests_total: int, error: str) -> StepVerdict:
    """The test process or the checker could not be launched."""
    return NOT_STARTED.verdict(step_id, tests_total, error=error)


def worker_unfit(step_id: str, tests_total: int, worker: str, problem: str) -> StepVerdict:
    """A dask worker cannot run the step as the submitting side would (its targets or its versions differ)."""
    return WORKER_UNFIT.verdict(step_id, tests_total, executed_on=worker, worker=worker, problem=problem)


def not_submitted(step_id: str, tests_total: int, error: str) -> StepVerdict:
    """The dask scheduler did not take the step (a closed client, a lost scheduler)."""
    return NOT_SUBMITTED.verdict(step_id, tests_total, error=error)


def worker_failed(step_id: str, tests_total: int, error: BaseException) -> StepVerdict:
    """The dask worker raised instead of returning the step's verdict."""
    return WORKER_FAILED.verdict(step_id, tests_total, kind=type(error).__name__, error=str(error))


def workers_lost(step_id: str, tests_total: int, lost: list[str]) -> StepVerdict:
    """Every worker given the step died while running it (`lost`: their addresses, in order)."""
    return WORKERS_LOST.verdict(step_id, tests_total, count=len(lost), workers=", ".join(lost))


def retried_after_worker_loss(verdict: StepVerdict, lost: list[str], final: str | None) -> StepVerdict:
    """`verdict`, reached after the workers `lost` died running the step, with that said in its reason (`final`:
    the worker that ran it to the end, when known)."""
    where = RETRY_PLACE.format(worker=final) if final else ""
    reason = RETRY_NOTE.format(reason=verdict.reason, lost=", ".join(lost), where=where)
    return dataclasses.replace(verdict, reason=reason)


def verdict_over_environments(names: tuple[str, ...], found: Mapping[int, StepVerdict]) -> StepVerdict:
    """One step's verdict from those of the grading environments consulted (`found`, by their index in `names`):
    the first passing environment's, else the first consulted one's. With named environments every consulted
    environment's verdict is kept in it, in their order; `python_binary` alone (one unnamed environment), the
    verdict as it always was."""
    order = sorted(found)
    chosen = next((found[index] for index in order if found[index].status == "pass"), found[order[0]])
    if not names[0]:
        return chosen
    kept = tuple(EnvironmentVerdict.of(names[index], found[index]) for index in order)
    return dataclasses.replace(chosen, environments=kept)
