"""generations/<id>[@<attempt>].json: one attempt at a problem, step by step (prompts, answers, trajectories).

`Generation` and `GeneratedStep` hold the file's fields as written (`from_record`/`to_record`) and what the
reports read from them: a step's prompt, its model calls, its tool runs (the code the model sent and what it
got back) and its conversation turn by turn. Tool-use statistics count the `tool_results` of each step's
trajectory by outcome (ok/error/timeout/sandbox_error).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import get_args

from stages.benchmark.protocol import CARRY_MODES
from stages.config.settings import API_PROTOCOLS, MODES
from stages.execution.untrusted import UntrustedJSONError, parse_json, valid_text
from stages.records.declared import Declared, key
from stages.records.endpoint import EndpointRecord
from stages.records.run_conditions import add_counts, tool_outcome_counts
from stages.records.schema_of import ref
from stages.records.stamp import Stamp
from stages.records.usage import USAGE_SCHEMA, Usage
from stages.statuses import TOOL_STATUSES, GenerationStepStatus
from stages.storage.artifacts import read_typed
from stages.storage.json_values import (
    EMPTY,
    FrozenObject,
    JSONObject,
    JSONValue,
    objects,
    text,
    thaw_object,
)

KIND = "generation"
NON_NEGATIVE: JSONObject = {"minimum": 0}
TOOL_ARGUMENTS_READ_CHARS = 4_000_000  # longer tool-call arguments are shown as sent, not parsed


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
class ToolStats(Declared):
    """Tool calls and their outcomes; `other` counts statuses outside the known vocabulary (summary.json's
    per-step and per-run tool counts)."""

    calls: int = field(default=0, metadata=key(schema=NON_NEGATIVE))
    ok: int = field(default=0, metadata=key(schema=NON_NEGATIVE))
    error: int = field(default=0, metadata=key(schema=NON_NEGATIVE))
    timeout: int = field(default=0, metadata=key(schema=NON_NEGATIVE))
    sandbox_error: int = field(default=0, metadata=key(schema=NON_NEGATIVE))
    other: int = field(
        default=0,
        metadata=key(
            schema={
                "minimum": 0,
                "description": "tool results with a status outside ok/error/timeout/sandbox_error",
            }
        ),
    )

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


@dataclass(frozen=True)
class _StepReading:
    model_calls: int
    prompt: str | None
    tool_calls: tuple[ToolRun, ...]
    turns: tuple[Turn, ...] | None


MODEL_CALL_SCHEMA: JSONObject = {
    "type": "object",
    "required": ["latency_s", "usage"],
    "properties": {
        "latency_s": {"type": "number", "minimum": 0},
        "service_s": {
            "type": "number",
            "minimum": 0,
            "description": "the server's own time for the call without waiting in its queue, where it reports it "
            "(llama.cpp's timings)",
        },
        "queued_s": {
            "type": "number",
            "minimum": 0,
            "description": "latency_s minus service_s: the wait in the server's queue",
        },
        "usage": USAGE_SCHEMA,
        "finish_reason": {"type": ["string", "null"]},
        "response_id": {"type": ["string", "null"]},
        "retries": {"type": "integer", "minimum": 0},
    },
}
TRAJECTORY_SCHEMA: JSONObject = {
    "type": "object",
    "required": ["messages", "calls"],
    "properties": {
        "messages": {
            "type": "array",
            "items": {"type": "object"},
            "description": "the conversation in order, chat form: user (and system) messages, assistant turns "
            "(content, tool_calls, and reasoning: the reasoning text the API returned, when it did), tool results "
            "(tool_call_id, content)",
        },
        "turns_recorded": {
            "const": True,
            "description": "the messages hold every turn as the API answered it, reasoning text included; absent in "
            "generations written before turns were recorded (their reports say so)",
        },
        "calls": {"type": "array", "items": MODEL_CALL_SCHEMA},
        "tool_results": {"type": "array", "items": {"type": "object"}},
        "tool_calls_not_run": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["call_id", "name", "reason"],
                "properties": {"call_id": {"type": "string"}, "name": {"type": "string"}, "reason": {"type": "string"}},
            },
            "description": 'tool calls answered "not run" (beyond the calls of one reply that are run, or past the '
            "step's snippet time budget), with the reason; absent when every call ran",
        },
    },
}


@dataclass(frozen=True, kw_only=True)
class GeneratedStep(Declared):
    """One entry of a generation file's `steps`, as written; `tool_outcomes` None: the step records none (an
    unasked step, or one written before they were recorded)."""

    step_id: str
    prefilled: bool = field(metadata=key(schema={"description": "official code injected verbatim; never asked"}))
    status: str = field(
        metadata=key(
            schema={
                "description": "context_exceeded: the prompt did not fit the server's context; not_generated: a "
                "later step of such a problem (both final, scored as fail)",
                "enum": list(get_args(GenerationStepStatus)),
            }
        )
    )
    prompt_fingerprint: str | None = field(metadata=key(schema={"pattern": "^[0-9a-f]{64}$"}))
    code: str | None = field(
        metadata=key(schema={"description": "final extracted code, top-level imports removed; null when no code"})
    )
    raw_answer: str | None
    error: str | None
    finish_reason: str | None = field(metadata=key(required=False))  # absent in early generations
    trajectory: FrozenObject = field(metadata=key(schema=TRAJECTORY_SCHEMA))
    tool_outcomes: FrozenObject | None = field(
        default=None,
        metadata=key(
            omit="if_none",
            schema={
                "description": "this step's code_interpreter calls by outcome",
                "additionalProperties": {"type": "integer", "minimum": 0},
            },
        ),
    )
    # the index, in its generation's `endpoints`, of the endpoint that answered it
    endpoint: int | None = field(
        default=None,
        metadata=key(
            omit="if_none",
            schema={"description": "the index in `endpoints` of the endpoint that answered this step", "minimum": 0},
        ),
    )
    usage_record: FrozenObject = field(metadata=key("usage", schema=USAGE_SCHEMA))
    latency_s: float = field(metadata=key(schema=NON_NEGATIVE))

    @cached_property
    def _read(self) -> _StepReading:
        """What the reports read from the trajectory, from one plain copy of it (not kept)."""
        trajectory = thaw_object(self.trajectory)
        messages = _array(trajectory.get("messages"))
        first = messages[0] if messages else None
        prompt = str(first.get("content")) if isinstance(first, dict) and first.get("role") == "user" else None
        tool_calls = _tool_calls(trajectory)
        return _StepReading(len(_array(trajectory.get("calls"))), prompt, tool_calls, _turns(trajectory, tool_calls))

    @property
    def messages(self) -> tuple[JSONObject, ...]:
        """The trajectory's messages, each a plain copy of its own."""
        return tuple(thaw_object(message) for message in objects(self.trajectory.get("messages")))

    @property
    def model_calls(self) -> int:
        return self._read.model_calls

    @cached_property
    def usage(self) -> Usage | None:
        return Usage.from_record(thaw_object(self.usage_record), self.model_calls)

    @property
    def prompt(self) -> str | None:
        return self._read.prompt

    @property
    def tool_calls(self) -> tuple[ToolRun, ...]:
        return self._read.tool_calls

    @property
    def turns(self) -> tuple[Turn, ...] | None:
        """The conversation turn by turn; None when the generation predates recorded turns."""
        return self._read.turns

    @property
    def tool_stats(self) -> ToolStats:
        return ToolStats.of(self.tool_calls)


@dataclass(frozen=True, kw_only=True)
class Generation(Declared):
    """A generation file. The run settings it records (`api_protocol` ... `concurrency`) are None (and left
    out) in files written before they were recorded."""

    record_schema = {
        "title": "generation: the model's answers for every step of one problem (one attempt)",
        "properties": {"fingerprint": {"description": "sha256 of the generate settings and the problem record"}},
    }

    stamp: Stamp = field(metadata=key(flatten=True))
    status: str = field(
        metadata=key(
            schema={
                "description": "complete: every step has a final status other than error",
                "enum": ["complete", "error"],
            }
        )
    )
    problem_id: str
    attempt: int = field(metadata=key(schema=NON_NEGATIVE))
    model: str
    mode: str = field(metadata=key(schema={"enum": list(MODES)}))
    api_protocol: str | None = field(default=None, metadata=key(omit="if_none", schema={"enum": list(API_PROTOCOLS)}))
    with_background: bool | None = field(default=None, metadata=key(omit="if_none"))
    carry: str | None = field(
        default=None,
        metadata=key(
            omit="if_none",
            schema={
                "description": "what earlier steps carried into later prompts: whole code or the named definition",
                "enum": list(CARRY_MODES),
            },
        ),
    )
    concurrency: int | None = field(
        default=None,
        metadata=key(
            omit="if_none",
            schema={
                "description": "model calls in flight at most when it was generated: its latencies include time "
                "queued in a server with fewer parallel slots",
                "minimum": 1,
            },
        ),
    )
    error: str | None = field(metadata=key(schema={"description": "why the problem stopped early; null when complete"}))
    usage_record: FrozenObject = field(metadata=key("usage", schema=USAGE_SCHEMA))
    latency_s: float | None = field(default=None, metadata=key(omit="if_none", schema=NON_NEGATIVE))
    # every endpoint that answered a step (none recorded before)
    endpoints: tuple[EndpointRecord, ...] = field(
        default=(),
        metadata=key(
            omit="if_empty",
            schema={
                "description": "every endpoint that answered a step of this generation (steps name theirs by index); "
                "absent in generations written before endpoints were recorded",
                "items": ref("endpoint"),
            },
        ),
    )
    steps: tuple[GeneratedStep, ...]

    @property
    def fingerprint(self) -> str:
        return self.stamp.fingerprint

    @cached_property
    def usage(self) -> Usage | None:
        return Usage.from_record(thaw_object(self.usage_record))

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

    def endpoint_of(self, step: GeneratedStep) -> EndpointRecord | None:
        """The endpoint that answered `step`; None for a step no recorded endpoint answered."""
        index = step.endpoint
        return self.endpoints[index] if index is not None and 0 <= index < len(self.endpoints) else None

    def endpoint_steps(self) -> list[tuple[EndpointRecord, int]]:
        """Each recorded endpoint with the number of this generation's steps it answered."""
        counts = Counter(step.endpoint for step in self.steps if self.endpoint_of(step) is not None)
        return [(endpoint, counts[index]) for index, endpoint in enumerate(self.endpoints) if counts[index]]

    def tool_outcomes(self) -> JSONObject:
        """{"total": counts, "steps": {step_id: counts}} of the code interpreter's calls by outcome, counted
        from the trajectories' tool results (steps that called a tool only): a details attempt's meta."""
        total: dict[str, int] = dict.fromkeys(TOOL_STATUSES, 0)
        steps: JSONObject = {}
        for step in self.steps:
            counts = tool_outcome_counts(objects(step.trajectory.get("tool_results")))
            if any(counts.values()):
                steps[step.step_id] = dict(counts)
                total = add_counts(total, counts)
        return {"total": dict(total), "steps": steps}


def read_generation_file(path: Path) -> Generation | None:
    """The generation at `path` (parsed once per file version in this process); None when missing or invalid."""
    return read_typed(path, KIND, Generation.from_record)


def frozen_steps(record: FrozenObject | None) -> dict[str, FrozenObject]:
    """A generation record's steps by step id (none for no record)."""
    return {text(step.get("step_id")): step for step in objects((record or EMPTY).get("steps"))}


# ---------------------------------------------------------------------------
# What the reports read from a step's trajectory (plain JSON: model-written, any shape)
# ---------------------------------------------------------------------------


def _array(value: JSONValue) -> list[JSONValue]:
    return value if isinstance(value, list) else []


def _dict(value: JSONValue) -> JSONObject:
    return value if isinstance(value, dict) else {}


def _dicts(value: JSONValue) -> list[JSONObject]:
    return [item for item in _array(value) if isinstance(item, dict)]


def _tool_code(arguments: JSONValue) -> str:
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


def _tool_calls(trajectory: JSONObject) -> tuple[ToolRun, ...]:
    sent = {}
    for message in _dicts(trajectory.get("messages")):
        for call in _dicts(message.get("tool_calls")):
            function = _dict(call.get("function"))
            sent[str(call.get("id"))] = _tool_code(function.get("arguments", ""))
    return tuple(
        ToolRun(
            str(result.get("call_id")),
            str(result.get("name", "")),
            sent.get(str(result.get("call_id")), ""),
            str(result.get("status", "")),
            _float(result.get("duration_s", 0.0)),
            bool(result.get("truncated")),
            str(result.get("output", "")),
        )
        for result in _dicts(trajectory.get("tool_results"))
    )


def _float(value: JSONValue) -> float:
    """`float(value)` as the reports always read a duration (a malformed one is 0)."""
    try:
        return float(value) if isinstance(value, (int, float, str)) else 0.0
    except ValueError:
        return 0.0


def _text_or_none(value: JSONValue) -> str | None:
    if value is None:
        return None
    return valid_text(value) if isinstance(value, str) else valid_text(json.dumps(value, default=repr))


def _call_text(call: JSONObject) -> str:
    usage = _dict(call.get("usage"))
    parts = [f"{usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out tokens"]
    latency = call.get("latency_s")
    if isinstance(latency, (int, float)) and not isinstance(latency, bool):
        parts.append(f"{latency:.2f} s")
    if call.get("finish_reason"):
        parts.append(f"finish_reason {valid_text(call['finish_reason'])}")
    return ", ".join(parts)


def _turn_calls(message: JSONObject) -> tuple[TurnCall, ...]:
    return tuple(
        TurnCall(
            valid_text(call.get("id")),
            valid_text(_dict(call.get("function")).get("name", "")),
            _tool_code(_dict(call.get("function")).get("arguments", "")),
        )
        for call in _dicts(message.get("tool_calls"))
    )


def _turns(trajectory: JSONObject, tool_runs: Sequence[ToolRun]) -> tuple[Turn, ...] | None:
    """The conversation of a step, turn by turn (see `Turn`); None when the trajectory predates recorded turns.
    Assistant turns take the successful model calls in order; a failed call ends the conversation."""
    if trajectory.get("turns_recorded") is not True:
        return None
    calls = _dicts(trajectory.get("calls"))
    answered = iter([call for call in calls if not call.get("error")])
    runs = {run.call_id: run for run in tool_runs}
    turns = []
    for message in _dicts(trajectory.get("messages")):
        role = valid_text(message.get("role", ""))
        content = _text_or_none(message.get("content"))
        if role == "assistant":
            call = next(answered, None)
            turns.append(
                Turn(
                    role,
                    content,
                    _text_or_none(message.get("reasoning")),
                    _turn_calls(message),
                    _call_text(call) if call else None,
                )
            )
        elif role == "tool":
            turns.append(Turn(role, content, tool=runs.get(valid_text(message.get("tool_call_id")))))
        else:
            turns.append(Turn(role, content))
    failed = [call for call in calls if call.get("error")]
    if failed:
        turns.append(Turn("failed call", _text_or_none(failed[-1].get("error"))))
    return tuple(turns)
