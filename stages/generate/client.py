"""One model call, either protocol, with retries that never re-bill a finished answer.

`ModelClient.complete(messages, tools=..., step_id=...)` sends a conversation kept in chat form
(user / assistant with `tool_calls` / tool messages) through Chat Completions or the Responses API
and returns a `ModelResponse`: the answer text, the tool calls, the finish reason and a
`CallRecord` (latency, token usage, response id, every retry with its reason and delay).

Transient failures (connection errors, timeouts, HTTP 408/409/429/5xx, malformed bodies) are
retried up to `settings.max_retries` times with exponential backoff and full jitter, honouring
`Retry-After`; permanent ones (400, 401, 403, 404, 422, ...) raise `ModelCallError` at once. At
most `settings.concurrency` requests are in flight in the process (one semaphore shared by threads,
not held while backing off).
"""

from __future__ import annotations

import email.utils
import json
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import openai

from stages.activity import ACTIVITY
from stages.config import ApiProtocol, Settings
from stages.generate import builtin
from stages.usage import Tokens

TRANSIENT_STATUSES = frozenset({408, 409, 429})
MODEL_LEVEL_STATUSES = frozenset({401, 403, 404})  # wrong key, no access, wrong model or endpoint
BACKOFF_BASE_SECONDS = 1.0
BACKOFF_CAP_SECONDS = 60.0
RETRY_AFTER_CAP_SECONDS = 120.0
BUILTIN_API_KEY = "builtin-model-needs-no-key"
KEYLESS_ENDPOINT_API_KEY = "no-key"  # sent to a custom base_url when no key is set (local servers ignore it)
ERROR_TEXT_LIMIT = 500

# Module attributes so tests can make backoff instant and deterministic.
sleep: Callable[[float], None] = time.sleep
jitter: Callable[[float, float], float] = random.uniform


# ---------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class RetryRecord:
    attempt: int  # 1-based number of the failed request
    error: str
    delay_s: float

    def to_record(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "error": self.error, "delay_s": round(self.delay_s, 3)}


@dataclass(frozen=True)
class CallRecord:
    latency_s: float  # the request that succeeded
    usage: Tokens
    finish_reason: str | None
    response_id: str | None
    retries: tuple[RetryRecord, ...] = ()

    def to_record(self) -> dict[str, Any]:
        return {
            "latency_s": round(self.latency_s, 6),
            "usage": self.usage.to_record(),
            "finish_reason": self.finish_reason,
            "response_id": self.response_id,
            "retries": len(self.retries),
            "retry_log": [retry.to_record() for retry in self.retries],
        }


@dataclass(frozen=True)
class ModelResponse:
    text: str | None
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str | None
    call: CallRecord
    # Responses API: the raw output items, replayed verbatim in later requests (reasoning items included).
    output_items: tuple[dict[str, Any], ...] = ()

    def assistant_message(self) -> dict[str, Any]:
        """The answer as a chat-form assistant message, as kept in the trajectory."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
                for call in self.tool_calls
            ]
        if self.output_items:
            message["output_items"] = list(self.output_items)
        return message


class ModelCallError(RuntimeError):
    """A model call that failed for good: permanent, or transient with every retry used."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        transient: bool = False,
        model_level: bool = False,
        retries: Sequence[RetryRecord] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.transient = transient
        self.model_level = model_level
        self.retries = tuple(retries)


class MalformedResponse(ValueError):
    """The endpoint answered 2xx with a body that is not a response of the protocol."""


# ---------------------------------------------------------------------------
# Concurrency: one semaphore per limit, shared by every thread of the process
# ---------------------------------------------------------------------------

_slots_lock = threading.Lock()
_slots: dict[int, threading.BoundedSemaphore] = {}


def call_slots(limit: int) -> threading.BoundedSemaphore:
    with _slots_lock:
        if limit not in _slots:
            _slots[limit] = threading.BoundedSemaphore(limit)
        return _slots[limit]


# ---------------------------------------------------------------------------
# Retry policy
# ---------------------------------------------------------------------------


def retry_after_seconds(headers: Mapping[str, str] | None, now: datetime | None = None) -> float | None:
    """Seconds asked by `retry-after-ms` or `Retry-After` (seconds or an HTTP date), capped; None if absent."""
    if not headers:
        return None
    lowered = {str(name).lower(): str(value) for name, value in headers.items()}
    seconds: float | None = None
    if "retry-after-ms" in lowered:
        try:
            seconds = float(lowered["retry-after-ms"]) / 1000.0
        except ValueError:
            seconds = None
    if seconds is None and "retry-after" in lowered:
        seconds = _parse_retry_after(lowered["retry-after"].strip(), now or datetime.now(timezone.utc))
    if seconds is None or seconds != seconds:
        return None
    return min(max(seconds, 0.0), RETRY_AFTER_CAP_SECONDS)


def _parse_retry_after(value: str, now: datetime) -> float | None:
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return (when - now).total_seconds()


def backoff_seconds(retry_number: int, retry_after: float | None) -> float:
    """Delay before retry `retry_number` (0-based): Retry-After when given, else full jitter."""
    if retry_after is not None:
        return retry_after
    return jitter(0.0, min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2**retry_number))


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= ERROR_TEXT_LIMIT else text[: ERROR_TEXT_LIMIT - 3] + "..."


def _status_error_detail(error: openai.APIStatusError) -> str:
    body = error.body
    if isinstance(body, dict):
        nested = body.get("error")
        message = (nested if isinstance(nested, dict) else body).get("message")
        if isinstance(message, str):
            return message
    return error.message


def _openai() -> ModuleType:
    """The openai package, imported on first use: it takes about a second, which no-op reruns and task
    listings (that never call a model) should not pay."""
    import openai
    import openai.types.chat
    import openai.types.responses

    return openai


def classify_failure(error: Exception, endpoint: str, timeout_s: float) -> ModelCallError:
    """The failure as a ModelCallError telling whether it is worth retrying; other errors re-raise."""
    openai = _openai()
    if isinstance(error, openai.APITimeoutError):
        return ModelCallError(f"request to {endpoint} timed out after {timeout_s:g} s", transient=True)
    if isinstance(error, openai.APIConnectionError):
        cause = error.__cause__ or error
        return ModelCallError(f"cannot reach {endpoint}: {_short(str(cause) or type(cause).__name__)}", transient=True)
    if isinstance(error, openai.APIStatusError):
        status = error.status_code
        transient = status in TRANSIENT_STATUSES or status >= 500
        return ModelCallError(
            f"HTTP {status} from {endpoint}: {_short(_status_error_detail(error))}",
            status=status,
            transient=transient,
            model_level=status in MODEL_LEVEL_STATUSES,
        )
    if isinstance(error, MalformedResponse):
        return ModelCallError(f"malformed response from {endpoint}: {_short(str(error))}", transient=True)
    raise error


# ---------------------------------------------------------------------------
# Conversation conversion
# ---------------------------------------------------------------------------


def _chat_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A trajectory message as a Chat Completions message (local bookkeeping keys dropped)."""
    converted = {"role": message["role"], "content": message.get("content")}
    if message.get("tool_calls"):
        converted["tool_calls"] = message["tool_calls"]
    if message["role"] == "tool":
        converted["tool_call_id"] = message["tool_call_id"]
    return converted


def to_chat_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [_chat_message(message) for message in messages]


def to_responses_input(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A chat-form conversation as Responses API input items (message / function_call / function_call_output)."""
    items: list[dict[str, Any]] = []
    for message in messages:
        role = message["role"]
        if role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message["tool_call_id"],
                    "output": message.get("content") or "",
                }
            )
        elif role == "assistant" and message.get("output_items"):
            items.extend(dict(item) for item in message["output_items"])
        elif role == "assistant":
            if message.get("content") is not None:
                items.append({"role": "assistant", "content": message["content"]})
            for call in message.get("tool_calls") or ():
                function = call["function"]
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call["id"],
                        "name": function["name"],
                        "arguments": function["arguments"],
                    }
                )
        else:
            items.append({"role": role, "content": message.get("content") or ""})
    return items


# ---------------------------------------------------------------------------
# Response parsing
# ---------------------------------------------------------------------------


def _usage_from(raw_usage: Any, input_name: str, output_name: str) -> Tokens:
    if raw_usage is None:
        return Tokens()
    return Tokens(int(getattr(raw_usage, input_name, 0) or 0), int(getattr(raw_usage, output_name, 0) or 0))


def parse_chat_completion(
    completion: Any,
) -> tuple[str | None, tuple[ToolCall, ...], str | None, str | None, Tokens, tuple]:
    if not isinstance(completion, _openai().types.chat.ChatCompletion):
        raise MalformedResponse(f"expected a chat completion, got {_short(repr(completion))[:200]}")
    if not completion.choices or completion.choices[0].message is None:
        raise MalformedResponse(f"chat completion {completion.id!r} has no choices")
    choice = completion.choices[0]
    calls = tuple(
        ToolCall(call.id, call.function.name, call.function.arguments or "")
        for call in (choice.message.tool_calls or ())
        if getattr(call, "function", None) is not None
    )
    usage = _usage_from(completion.usage, "prompt_tokens", "completion_tokens")
    return choice.message.content, calls, choice.finish_reason, completion.id, usage, ()


def _responses_finish_reason(response: Any, has_calls: bool) -> str:
    if response.status == "incomplete":
        reason = getattr(response.incomplete_details, "reason", None)
        return "length" if reason == "max_output_tokens" else str(reason or "incomplete")
    return "tool_calls" if has_calls else "stop"


def parse_responses_response(
    response: Any,
) -> tuple[str | None, tuple[ToolCall, ...], str | None, str | None, Tokens, tuple]:
    if not isinstance(response, _openai().types.responses.Response):
        raise MalformedResponse(f"expected a response object, got {_short(repr(response))[:200]}")
    if response.status == "failed":
        detail = getattr(response.error, "message", None) or "no detail"
        raise MalformedResponse(f"response {response.id!r} failed: {detail}")
    if not isinstance(response.output, list):
        raise MalformedResponse(f"response {response.id!r} has no output")
    texts: list[str] = []
    calls: list[ToolCall] = []
    for item in response.output:
        if item.type == "message":
            texts.extend(part.text for part in item.content if getattr(part, "type", None) == "output_text")
        elif item.type == "function_call":
            calls.append(ToolCall(item.call_id, item.name, item.arguments or ""))
    text = "".join(texts) if texts else None
    items = tuple(item.model_dump(mode="json", exclude_none=True) for item in response.output)
    usage = _usage_from(response.usage, "input_tokens", "output_tokens")
    return text, tuple(calls), _responses_finish_reason(response, bool(calls)), response.id, usage, items


# ---------------------------------------------------------------------------
# The client
# ---------------------------------------------------------------------------


def _api_key(settings: Settings, is_builtin: bool) -> str:
    if is_builtin:
        return BUILTIN_API_KEY
    if settings.api_key:
        return settings.api_key
    if settings.base_url:
        return KEYLESS_ENDPOINT_API_KEY
    raise ModelCallError(
        f"no API key for model={settings.model}: set the environment variable {settings.api_key_env} "
        "(or api_key_env=NAME), or give base_url= for an endpoint without keys",
        model_level=True,
    )


class ModelClient:
    """Sends one conversation turn to the configured model; see the module docstring."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.protocol: ApiProtocol = settings.api_protocol
        self.is_builtin = builtin.is_builtin_model(settings.model)
        base_url = (
            builtin.BuiltinModelService.base_url_for(settings) if self.is_builtin else (settings.base_url or None)
        )
        self.endpoint = base_url or "the default OpenAI endpoint"
        self._client = _openai().OpenAI(
            base_url=base_url,
            api_key=_api_key(settings, self.is_builtin),
            max_retries=0,
            timeout=settings.request_timeout_seconds,
        )
        self._slots = call_slots(settings.concurrency)

    def complete(
        self, messages: Sequence[Mapping[str, Any]], *, tools: Sequence[dict[str, Any]] | None, step_id: str
    ) -> ModelResponse:
        """One answer to `messages` (offering `tools` when given), retrying transient failures."""
        retries: list[RetryRecord] = []
        for retry_number in range(self.settings.max_retries + 1):
            try:
                return self._attempt(messages, tools, step_id, tuple(retries))
            except Exception as error:  # classify_failure re-raises anything that is not an API failure
                failure = classify_failure(error, self.endpoint, self.settings.request_timeout_seconds)
                if not failure.transient or retry_number == self.settings.max_retries:
                    raise self._final_failure(failure, retries) from error
                delay = backoff_seconds(retry_number, self._retry_after(error))
                retries.append(RetryRecord(retry_number + 1, failure.message, delay))
                sleep(delay)
        raise AssertionError("unreachable: the loop returns or raises")

    # ---- one request -----------------------------------------------------
    def _attempt(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[dict[str, Any]] | None,
        step_id: str,
        retries: tuple[RetryRecord, ...],
    ) -> ModelResponse:
        with self._slots, ACTIVITY.busy("model_calls"):
            started = time.monotonic()
            raw = self._send(messages, tools, step_id)
            latency = time.monotonic() - started
        parse = parse_chat_completion if self.protocol == "openai-chat" else parse_responses_response
        try:
            text, calls, finish_reason, response_id, usage, items = parse(raw)
        except (AttributeError, TypeError) as error:
            raise MalformedResponse(f"{type(error).__name__}: {error}") from error
        record = CallRecord(latency, usage, finish_reason, response_id, retries)
        return ModelResponse(text, calls, finish_reason, record, items)

    def _send(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[dict[str, Any]] | None, step_id: str) -> Any:
        options: dict[str, Any] = {"model": self.settings.model, "extra_body": dict(self.settings.model_params)}
        if tools:
            options["tools"] = list(tools)
        if self.is_builtin:
            options["extra_headers"] = {builtin.STEP_HEADER: step_id}
        try:
            if self.protocol == "openai-chat":
                return self._client.chat.completions.create(messages=to_chat_messages(messages), **options)
            return self._client.responses.create(input=to_responses_input(messages), **options)
        except json.JSONDecodeError as error:
            raise MalformedResponse(f"body is not JSON ({error})") from error

    @staticmethod
    def _retry_after(error: Exception) -> float | None:
        response = getattr(error, "response", None)
        return retry_after_seconds(getattr(response, "headers", None)) if response is not None else None

    @staticmethod
    def _final_failure(failure: ModelCallError, retries: Sequence[RetryRecord]) -> ModelCallError:
        message = failure.message
        if failure.transient:
            message = f"gave up after {len(retries) + 1} attempts: {message}"
        return ModelCallError(
            message,
            status=failure.status,
            transient=failure.transient,
            model_level=failure.model_level,
            retries=retries,
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> ModelClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
