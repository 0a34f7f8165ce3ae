"""Answering one step: naive (one call) or tool_use (a loop with the code interpreter).

Both return a `StepOutcome`: the final code (`protocol.answer_to_code` of the final answer), its
status, the raw answer and the whole trajectory (every message in order: prompts, assistant turns with
their reasoning text when the API returned it and their tool calls, tool results; one record per model
call, one per tool run). A model call that fails for good ends the step with status
"error" and the trajectory so far; it is never turned into an empty answer.

tool_use: every tool call of a response is answered, in order; a final answer without code (no
fence, and not Python that defines the step's name) gets one reminder; after `tool_use_max_loops`
model calls, one last call without tools asks for the final code. A step that still has no code is
"no_code" and the problem goes on.

The work one reply can cause is bounded: at most MAX_TOOL_CALLS_RUN_PER_REPLY of its tool calls are run, and a
snippet starts only while the step's snippets have run less than `tool_time_budget_seconds` in all (so they run
at most that plus one snippet's deadline). Every other call is answered "not run" with the reason (the API wants an answer to each
call), listed in the trajectory's `tool_calls_not_run`, and is no tool run: the tool counts do not include it.

Everything a response holds (answer text, tool-call ids, names and arguments) passes through
`untrusted.valid_data` as it arrives, so the trajectory can always be written and sent back.

`tool_choice` (when set) goes with every call that offers tools; a forcing choice (`required`, or a tool's name) only with the first call of each step: later calls send
none, which the API defines as `auto`, so that the model can answer. (An explicit `auto` would be the
same for OpenAI, vLLM and llama.cpp's server; llama-cpp-python's function-calling format ignores the
output cap under an explicit `auto` and answers until its context is full, and without one it answers
as a plain chat, capped.)

A prompt that does not fit the server's context ends the step as "context_exceeded": asking again
would send the same prompt (the stage records the problem's later steps as not generated).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass, field

from stages.benchmark.protocol import answer_to_code
from stages.config.settings import Settings
from stages.execution import live_processes
from stages.execution.untrusted import valid_data, valid_text
from stages.generate import tools
from stages.generate.client import MalformedResponse, ModelCallError, ModelClient, ModelResponse
from stages.generate.journal import StepReplies
from stages.generate.prompts import StepPrompt
from stages.records.usage import Tokens
from stages.statuses import GenerationStepStatus
from stages.storage.json_values import JSONObject

REMINDER = (
    "Your answer has no code block. Reply with the complete implementation of the next step "
    "in a single ```python``` block, following the function header."
)
FINAL_ANSWER_REQUEST = (
    "You have used all the tool calls allowed for this step. Do not call tools any more: reply now with "
    "the complete implementation of the next step in a single ```python``` block, without example usage or tests."
)


NON_FORCING_TOOL_CHOICES = ("auto", "none")
MAX_TOOL_CALLS_RUN_PER_REPLY = 8  # the tool calls of one reply that are run; the rest are answered "not run"


def tool_time_budget_seconds(settings: Settings) -> float:
    """How long a step's snippets may run in all: one snippet's whole deadline per model call the loop allows."""
    return settings.tool_use_max_loops * tools.tool_run_deadline_seconds(settings)


def not_run_reason(position: int, count: int, spent_s: float, settings: Settings) -> str | None:
    """Why call number `position` (0-based) of a reply with `count` calls is not run, after the step's snippets
    ran `spent_s` seconds; None: it is run."""
    if position >= MAX_TOOL_CALLS_RUN_PER_REPLY:
        return (
            f"not run: at most {MAX_TOOL_CALLS_RUN_PER_REPLY} tool calls of one reply are run, and this reply made "
            f"{count}; send fewer calls per reply"
        )
    budget = tool_time_budget_seconds(settings)
    if spent_s >= budget:
        return (
            f"not run: this step's snippets have run {spent_s:.0f} s, its budget of {budget:g} s "
            "(tool_use_max_loops x the deadline of one snippet) is spent; reply with the final code"
        )
    return None


def tool_choice_for_call(setting: str, call_index: int) -> str | None:
    """The tool_choice of a step's call number `call_index` (0-based) that offers tools; None: not sent (the
    API's default with tools: auto)."""
    if not setting or (setting not in NON_FORCING_TOOL_CHOICES and call_index > 0):
        return None
    return setting


@dataclass(frozen=True)
class StepOutcome:
    status: GenerationStepStatus
    code: str | None
    raw_answer: str | None
    finish_reason: str | None
    error: str | None
    trajectory: JSONObject  # written as it is into the generation file
    usage: Tokens
    calls: int
    latency_s: float
    failure: ModelCallError | None = None  # the exception behind status "error" (not serialized)


def final_status(
    answer: str | None, finish_reason: str | None, defines: str | None
) -> tuple[GenerationStepStatus, str | None]:
    """Status and code of a final answer (`defines`: the name the step's header defines): truncated when
    cut by the length limit (code kept if any)."""
    code = answer_to_code(answer or "", defines)
    if finish_reason == "length":
        return "truncated", code
    return ("no_code" if code is None else "ok"), code


@dataclass
class Conversation:
    """The messages of one step and the records of every model call and tool run in it."""

    model: ModelClient
    step_id: str
    defines: str | None
    messages: list[JSONObject]  # sent to the model, and kept in the trajectory
    replies: StepReplies | None = None  # the reply journal of this step (stages.generate.journal)
    calls: list[JSONObject] = field(default_factory=list)
    tool_results: list[JSONObject] = field(default_factory=list)
    not_run: list[JSONObject] = field(default_factory=list)  # tool calls answered "not run", with the reason
    tool_seconds: float = 0.0  # how long this step's snippets ran in all
    usage: Tokens = Tokens()
    started: float = field(default_factory=time.monotonic)

    @classmethod
    def start(cls, model: ModelClient, prompt: StepPrompt, replies: StepReplies | None = None) -> Conversation:
        return cls(
            model=model,
            step_id=prompt.step_id,
            defines=prompt.defines,
            messages=[{"role": "user", "content": prompt.text}],
            replies=replies,
        )

    @property
    def call_count(self) -> int:
        return len(self.calls)

    def ask(self, tool_schemas: list[JSONObject] | None, tool_choice: str | None = None) -> ModelResponse:
        """The next answer: read back from the reply journal when it holds this call's reply, else asked (and
        journaled before it is parsed)."""
        live_processes.raise_if_stopping()  # no model call once the run is being stopped
        call = self.call_count
        response = self._replayed(call)
        if response is None:
            record = functools.partial(self.replies.record, call) if self.replies else None
            try:
                response = self.model.complete(
                    self.messages, tools=tool_schemas, step_id=self.step_id, tool_choice=tool_choice, on_reply=record
                )
            except ModelCallError as error:
                self.calls.append(_failed_call_record(error))
                raise
        response = valid_data(response)
        self.calls.append(response.call.to_record() | ({"replayed": True} if response.replayed else {}))
        self.usage = self.usage + response.call.usage
        self.messages.append(response.assistant_message())
        return response

    def _replayed(self, call: int) -> ModelResponse | None:
        """The answer the journal holds for call number `call`; None when it holds none that parses."""
        received = self.replies.recorded(call) if self.replies else None
        if received is None:
            return None
        try:
            return dataclasses.replace(self.model.answer_from(received), replayed=True)
        except MalformedResponse:
            return None

    def say(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})

    def answer_tool_calls(self, response: ModelResponse, settings: Settings) -> None:
        """Answer every tool call of `response` in order, each with a tool message: run it, or say why it is not
        run (`not_run_reason`)."""
        count = len(response.tool_calls)
        for position, call in enumerate(response.tool_calls):
            reason = not_run_reason(position, count, self.tool_seconds, settings)
            if reason is not None:
                self._answer_not_run(call.id, call.name, reason)
                continue
            outcome = tools.run_tool(call.name, call.arguments, settings)
            self.tool_seconds += outcome.duration_s
            self.messages.append({"role": "tool", "tool_call_id": call.id, "content": outcome.output})
            self.tool_results.append(
                {
                    "call_id": call.id,
                    "name": call.name,
                    "status": outcome.status,
                    "duration_s": round(outcome.duration_s, 6),
                    "truncated": outcome.truncated,
                    "output": outcome.output,
                }
            )

    def _answer_not_run(self, call_id: str, name: str, reason: str) -> None:
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": tools.with_note("", reason)})
        self.not_run.append({"call_id": call_id, "name": name, "reason": reason})

    def trajectory(self) -> JSONObject:
        """`turns_recorded`: the messages hold every turn as answered, reasoning text included (generations
        written before it was recorded lack the marker, and their reports say so)."""
        not_run: JSONObject = {"tool_calls_not_run": list(self.not_run)} if self.not_run else {}
        return {
            "messages": list(self.messages),
            "calls": list(self.calls),
            "tool_results": list(self.tool_results),
            "turns_recorded": True,
            **not_run,
        }

    def finish(self, final: ModelResponse) -> StepOutcome:
        status, code = final_status(final.text, final.finish_reason, self.defines)
        return self._outcome(status, code, final.text, final.finish_reason, None, None)

    def fail(self, error: ModelCallError) -> StepOutcome:
        status: GenerationStepStatus = "context_exceeded" if error.context_length else "error"
        return self._outcome(status, None, None, None, str(error), error)

    def fail_unexpectedly(self, error: Exception) -> StepOutcome:
        """A failure of the pipeline's own while handling an answer: the step is an error. A file that cannot be
        written (OSError) may work on the next run, which reads the journaled replies back instead of paying for
        them again; any other failure marks them unhandled (stages.generate.journal), so that no run reads them
        back into the same failure."""
        text = valid_text(f"{type(error).__name__}: {error}")
        if not isinstance(error, OSError) and self.replies is not None and self.replies.mark_unhandled(text):
            kept = f" ({unhandled_way_out(str(self.replies.path))})"
        else:
            kept = " (the replies so far are kept in the reply journal and read back when it is asked again)"
        return self._outcome("error", None, None, None, f"the pipeline failed on this step: {text}{kept}", None)

    def refuse_unhandled(self, reason: str) -> StepOutcome:
        """The step's journaled replies could not be handled before: an error naming them, no model call."""
        assert self.replies is not None
        text = f"handling its reply failed before ({reason}); {unhandled_way_out(str(self.replies.path))}"
        return self._outcome("error", None, None, None, text, None)

    def _outcome(
        self,
        status: GenerationStepStatus,
        code: str | None,
        answer: str | None,
        finish_reason: str | None,
        error_text: str | None,
        failure: ModelCallError | None,
    ) -> StepOutcome:
        return StepOutcome(
            status=status,
            code=code,
            raw_answer=answer,
            finish_reason=finish_reason,
            error=error_text,
            trajectory=self.trajectory(),
            usage=self.usage,
            calls=self.call_count,
            latency_s=time.monotonic() - self.started,
            failure=failure,
        )


def _failed_call_record(error: ModelCallError) -> JSONObject:
    return {
        "latency_s": 0.0,
        "usage": dict(Tokens().to_record()),
        "finish_reason": None,
        "response_id": None,
        "retries": len(error.retries),
        "retry_log": [retry.to_record() for retry in error.retries],
        "error": str(error),
    }


def run_naive(conversation: Conversation, settings: Settings) -> StepOutcome:
    """One call, no tools."""
    return conversation.finish(conversation.ask(None))


def run_tool_use(conversation: Conversation, settings: Settings) -> StepOutcome:
    """The tool loop; see the module docstring."""
    schemas = tools.tool_schemas(settings.tool_names, settings.api_protocol)
    reminded = False
    while conversation.call_count < settings.tool_use_max_loops:
        response = conversation.ask(schemas, tool_choice_for_call(settings.tool_choice, conversation.call_count))
        if response.tool_calls:
            conversation.answer_tool_calls(response, settings)
            continue
        if answer_to_code(response.text or "", conversation.defines) is not None or reminded:
            return conversation.finish(response)
        reminded = True
        if conversation.call_count >= settings.tool_use_max_loops:
            break  # the last call below asks for the code anyway
        conversation.say(REMINDER)
    conversation.say(FINAL_ANSWER_REQUEST)
    return conversation.finish(conversation.ask(None))


def unhandled_way_out(journal: str) -> str:
    """What a step whose replies could not be handled says: where they are kept, and the explicit way to ask
    again."""
    return (
        f"the replies are kept in {journal} and not read back into the same failure; `reask_unhandled_replies=true` "
        "asks the endpoint again (a paid call)"
    )


def run_step(
    model: ModelClient, settings: Settings, prompt: StepPrompt, replies: StepReplies | None = None
) -> StepOutcome:
    """The step in `settings.mode`; any failure ends as the step's outcome, never as an exception (but a stop of
    the run): a model call that failed for good, or a failure of the pipeline's own while handling an answer."""
    conversation = Conversation.start(model, prompt, replies)
    unhandled = replies.unhandled() if replies is not None else None
    if unhandled is not None and not settings.reask_unhandled_replies:
        return conversation.refuse_unhandled(unhandled)
    loop = run_naive if settings.mode == "naive" else run_tool_use
    try:
        return loop(conversation, settings)
    except ModelCallError as error:
        return conversation.fail(error)
    except live_processes.RunInterrupted:
        raise
    except Exception as error:  # noqa: BLE001 - whatever fails on an answer is that step's recorded error
        if live_processes.stopping():
            raise
        return conversation.fail_unexpectedly(error)
