"""One model call, either protocol, with retries that never re-bill a finished answer.

`ModelClient.complete(messages, tools=..., step_id=..., tool_choice=...)` sends a conversation kept in chat form
(user / assistant with `tool_calls` / tool messages) through Chat Completions or the Responses API and returns a
`ModelResponse`: the answer text, the reasoning text when the API returned it (chat: a message's
`reasoning_content` or `reasoning` field; responses: the summaries and text parts of its reasoning items), the
tool calls, the finish reason and a `CallRecord` (latency, token usage,
response id, the server's own timings when it reports them, every retry with its reason and delay).

What a request carries besides the conversation: `model_params` as given; `tools` and `tool_choice` when the
caller offers them (a tool's name is sent in the named-function form); `max_tokens=` under the name the protocol
wants (`max_output_tokens` for responses; for chat `max_completion_tokens` on OpenAI's own endpoint, which
requires it for its reasoning models, `max_tokens` elsewhere, which every local server knows, switching once
when a server names the other one). An assistant turn without text is sent with `"content": ""` (servers that
validate requests refuse `null`, even those that answer with it).

Failures are handled by what they mean (`stages.generate.api_errors`): transient ones (timeouts, 408/409/429,
5xx, malformed bodies) are retried up to `max_retries` times with exponential backoff and full jitter,
honouring `Retry-After`; an unavailable server (connection refused, 503) is waited for until
`server_wait_seconds` after the first refusal of the current outage (shared by every call to the endpoint, so
a server that never comes back fails the remaining problems at once instead of each waiting again); permanent
ones raise `ModelCallError` after one attempt. At most `settings.concurrency` requests are in flight in the
process (one semaphore shared by threads, not held while backing off or waiting).
"""

from __future__ import annotations

import email.utils
import ipaddress
import json
import math
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

from stages.activity import ACTIVITY
from stages.config import OUTPUT_CAP_PARAMS, TOOL_CHOICE_MODES, ApiProtocol, Settings
from stages.generate import builtin
from stages.generate.api_errors import MalformedResponse, ModelCallError, RetryRecord, classify, one_line
from stages.usage import Tokens

__all__ = ["MalformedResponse", "ModelCallError", "ModelClient", "ModelResponse", "RetryRecord", "ToolCall"]

BACKOFF_BASE_SECONDS = 1.0
BACKOFF_CAP_SECONDS = 60.0
RETRY_AFTER_CAP_SECONDS = 120.0
UNAVAILABLE_POLL_CAP_SECONDS = 10.0  # while waiting for a server to come back, ask at least this often
BUILTIN_API_KEY = "builtin-model-needs-no-key"
KEYLESS_ENDPOINT_API_KEY = "no-key"  # sent to an endpoint on this machine when no key is set (they ignore it)
OPENAI_HOST = "api.openai.com"
PROCESSING_HEADER = "openai-processing-ms"  # OpenAI, llama-cpp-python: the server's time for the request
# llama.cpp's server answers with `timings`: its own prompt and generation times, without any queueing.
TIMING_FIELDS: tuple[tuple[str, str], ...] = (
    ("prompt_n", "prompt_tokens"),
    ("prompt_ms", "prompt_ms"),
    ("predicted_n", "predicted_tokens"),
    ("predicted_ms", "predicted_ms"),
)
# Where chat servers put reasoning text: `reasoning_content` (DeepSeek, vLLM, llama.cpp's server), `reasoning`
# (OpenRouter, Ollama's OpenAI endpoint, newer vLLM).
CHAT_REASONING_FIELDS: tuple[str, ...] = ("reasoning_content", "reasoning")
UNSUPPORTED_WORDS: tuple[str, ...] = ("unsupported", "not supported", "unrecognized", "unknown", "extra inputs")

# Module attributes so tests can make backoff instant and deterministic.
sleep: Callable[[float], None] = time.sleep
clock: Callable[[], float] = time.monotonic
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
class CallRecord:
    latency_s: float  # the request that succeeded, as the client saw it (queueing inside the server included)
    usage: Tokens
    finish_reason: str | None
    response_id: str | None
    retries: tuple[RetryRecord, ...] = ()
    server: Mapping[str, float] | None = None  # the server's own timings, when the response carries them

    def to_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "latency_s": round(self.latency_s, 6),
            "usage": self.usage.to_record(),
            "finish_reason": self.finish_reason,
            "response_id": self.response_id,
            "retries": len(self.retries),
            "retry_log": [retry.to_record() for retry in self.retries],
        }
        if self.server:
            record["server"] = dict(self.server)
        return record


@dataclass(frozen=True)
class ModelResponse:
    text: str | None
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str | None
    call: CallRecord
    # Responses API: the raw output items, replayed verbatim in later requests (reasoning items included).
    output_items: tuple[dict[str, Any], ...] = ()
    reasoning: str | None = None  # the reasoning text the API returned with the answer (never sent back)

    def assistant_message(self) -> dict[str, Any]:
        """The answer as a chat-form assistant message, as kept in the trajectory (with `reasoning` when the API
        returned reasoning text)."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.reasoning is not None:
            message["reasoning"] = self.reasoning
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
                for call in self.tool_calls
            ]
        if self.output_items:
            message["output_items"] = list(self.output_items)
        return message


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


class EndpointOutages:
    """When each endpoint began refusing connections (or answering 503), shared by every thread of the process: the
    wait for a server to come back is bounded per outage, not per call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: dict[str, float] = {}

    def began(self, endpoint: str, now: float) -> float:
        with self._lock:
            return self._since.setdefault(endpoint, now)

    def ended(self, endpoint: str) -> None:
        with self._lock:
            self._since.pop(endpoint, None)

    def reset(self) -> None:
        with self._lock:
            self._since.clear()


OUTAGES = EndpointOutages()


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


def _openai() -> ModuleType:
    """The openai package, imported on first use: it takes about a second, which no-op reruns and task
    listings (that never call a model) should not pay."""
    import openai
    import openai.types.chat
    import openai.types.responses

    return openai


def classify_failure(error: Exception, endpoint: str, timeout_s: float) -> ModelCallError:
    """The failure as a ModelCallError of its kind (stages.generate.api_errors); other errors re-raise."""
    return classify(error, endpoint, timeout_s, _openai())


# ---------------------------------------------------------------------------
# Endpoints
# ---------------------------------------------------------------------------


def endpoint_host(base_url: str) -> str:
    try:
        return (urlsplit(base_url).hostname or "").lower()
    except ValueError:
        return ""


def is_local_endpoint(base_url: str) -> bool:
    """An endpoint on this machine (localhost, 127.0.0.0/8, ::1): it needs no key. The default endpoint is not."""
    host = endpoint_host(base_url) if base_url else ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_openai_endpoint(base_url: str) -> bool:
    return not base_url or endpoint_host(base_url) == OPENAI_HOST


def output_cap_name(protocol: ApiProtocol, base_url: str) -> str:
    """The request field of the output cap (see the module docstring)."""
    if protocol == "openai-responses":
        return "max_output_tokens"
    return "max_completion_tokens" if is_openai_endpoint(base_url) else "max_tokens"


def tool_choice_payload(choice: str, protocol: ApiProtocol) -> str | dict[str, Any]:
    """`auto` / `none` / `required` as they are; a tool's name in the named-function form of the protocol."""
    if choice in TOOL_CHOICE_MODES:
        return choice
    if protocol == "openai-chat":
        return {"type": "function", "function": {"name": choice}}
    return {"type": "function", "name": choice}


# ---------------------------------------------------------------------------
# Conversation conversion
# ---------------------------------------------------------------------------


def _chat_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A trajectory message as a Chat Completions message (local bookkeeping keys dropped); an assistant turn
    without text (tool calls only) carries `""`, which every server accepts, where `null` is refused by some."""
    content = message.get("content")
    if content is None and message["role"] == "assistant":
        content = ""
    converted = {"role": message["role"], "content": content}
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


def _finite(value: Any) -> float | None:
    """A finite, non-negative number from untrusted JSON or a header; None for anything else."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number >= 0 else None


def server_timings(extra: Any, headers: Mapping[str, str] | None) -> dict[str, float] | None:
    """The server's own account of a request: llama.cpp's `timings` (prompt and generation, no queueing) and the
    `openai-processing-ms` header (OpenAI; llama-cpp-python, where it includes the wait for its one slot)."""
    found: dict[str, float] = {}
    timings = extra.get("timings") if isinstance(extra, Mapping) else None
    if isinstance(timings, Mapping):
        for source, name in TIMING_FIELDS:
            value = _finite(timings.get(source))
            if value is not None:
                found[name] = round(value, 3)
    processing = _finite((headers or {}).get(PROCESSING_HEADER))
    if processing is not None:
        found["processing_ms"] = processing
    return found or None


@dataclass(frozen=True)
class ParsedAnswer:
    text: str | None
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str | None
    response_id: str | None
    usage: Tokens
    output_items: tuple[dict[str, Any], ...] = ()
    extra: Mapping[str, Any] | None = None  # fields of the body outside the protocol (e.g. llama.cpp's timings)
    reasoning: str | None = None


def chat_reasoning(message: Any) -> str | None:
    """The reasoning text of a chat answer: the first of `CHAT_REASONING_FIELDS` that holds text (fields outside
    the protocol, which the openai client keeps as extras); None when there is none."""
    extra = getattr(message, "model_extra", None)
    if not isinstance(extra, Mapping):
        return None
    for name in CHAT_REASONING_FIELDS:
        value = extra.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def _reasoning_item_texts(item: Any) -> list[str]:
    """The summary texts of one Responses API reasoning item, then its reasoning text parts (where a server
    returns them)."""
    texts = [getattr(part, "text", None) for part in (getattr(item, "summary", None) or ())]
    texts += [getattr(part, "text", None) for part in (getattr(item, "content", None) or ())]
    return [text for text in texts if isinstance(text, str) and text]


def responses_reasoning(output: Sequence[Any]) -> str | None:
    """The reasoning text of a Responses API answer: every reasoning item's texts in order, one paragraph each;
    None when there is none (encrypted reasoning carries no text)."""
    texts = [text for item in output if item.type == "reasoning" for text in _reasoning_item_texts(item)]
    return "\n\n".join(texts) if texts else None


def parse_chat_completion(completion: Any) -> ParsedAnswer:
    if not isinstance(completion, _openai().types.chat.ChatCompletion):
        raise MalformedResponse(f"expected a chat completion, got {one_line(repr(completion), 200)}")
    if not completion.choices or completion.choices[0].message is None:
        raise MalformedResponse(f"chat completion {completion.id!r} has no choices")
    choice = completion.choices[0]
    calls = tuple(
        ToolCall(call.id, call.function.name, call.function.arguments or "")
        for call in (choice.message.tool_calls or ())
        if getattr(call, "function", None) is not None
    )
    usage = _usage_from(completion.usage, "prompt_tokens", "completion_tokens")
    return ParsedAnswer(
        choice.message.content,
        calls,
        choice.finish_reason,
        completion.id,
        usage,
        extra=completion.model_extra,
        reasoning=chat_reasoning(choice.message),
    )


def _responses_finish_reason(response: Any, has_calls: bool) -> str:
    if response.status == "incomplete":
        reason = getattr(response.incomplete_details, "reason", None)
        return "length" if reason == "max_output_tokens" else str(reason or "incomplete")
    return "tool_calls" if has_calls else "stop"


def parse_responses_response(response: Any) -> ParsedAnswer:
    if not isinstance(response, _openai().types.responses.Response):
        raise MalformedResponse(f"expected a response object, got {one_line(repr(response), 200)}")
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
    finish = _responses_finish_reason(response, bool(calls))
    return ParsedAnswer(
        text,
        tuple(calls),
        finish,
        response.id,
        usage,
        items,
        response.model_extra,
        responses_reasoning(response.output),
    )


# ---------------------------------------------------------------------------
# The client
# ---------------------------------------------------------------------------


def _api_key(settings: Settings, is_builtin: bool) -> str:
    if is_builtin:
        return BUILTIN_API_KEY
    if settings.api_key:
        return settings.api_key
    if is_local_endpoint(settings.base_url):
        return KEYLESS_ENDPOINT_API_KEY
    where = settings.base_url or "the default OpenAI endpoint"
    raise ModelCallError(
        f"no API key for model={settings.model} at {where}: set the environment variable {settings.api_key_env} "
        "(or api_key_env=NAME); only endpoints on this machine (localhost, 127.0.0.0/8, ::1) need none",
        kind="no_key",
    )


@dataclass
class _RetryState:
    """The failed requests of one `complete` call so far."""

    retries: list[RetryRecord]
    transient: int = 0  # transient failures (bounded by max_retries)
    cap_switched: bool = False


class ModelClient:
    """Sends one conversation turn to the configured model; see the module docstring.

    `wait_for_server=False` (the preflight) fails at the first refused connection instead of waiting."""

    def __init__(self, settings: Settings, *, wait_for_server: bool = True) -> None:
        self.settings = settings
        self.protocol: ApiProtocol = settings.api_protocol
        self.is_builtin = builtin.is_builtin_model(settings.model)
        base_url = (
            builtin.BuiltinModelService.base_url_for(settings) if self.is_builtin else (settings.base_url or None)
        )
        self.endpoint = base_url or "the default OpenAI endpoint"
        self.wait_for_server = wait_for_server
        self.keyless = not self.is_builtin and not settings.api_key
        self._client = _openai().OpenAI(
            base_url=base_url,
            api_key=_api_key(settings, self.is_builtin),
            max_retries=0,
            timeout=settings.request_timeout_seconds,
        )
        self._slots = call_slots(settings.concurrency)
        self.cap_name = output_cap_name(self.protocol, settings.base_url)

    def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[dict[str, Any]] | None,
        step_id: str,
        tool_choice: str | None = None,
        max_tokens: int | None = None,
    ) -> ModelResponse:
        """One answer to `messages` (offering `tools`, with `tool_choice`, when given), by the retry policy of
        the module docstring. `max_tokens` overrides the setting (the preflight's tiny requests)."""
        state = _RetryState([])
        while True:
            try:
                response = self._attempt(messages, tools, step_id, tool_choice, max_tokens, tuple(state.retries))
            except Exception as error:  # classify_failure re-raises anything that is not an API failure
                failure = self._classified(error)
                cap_sent = max_tokens is not None or self.settings.max_tokens is not None
                if cap_sent and not state.cap_switched and self._switch_cap_name(failure):
                    state.cap_switched = True
                    continue
                delay = self._retry_delay(failure, error, state)
                if delay is None:
                    raise self._final_failure(failure, state.retries) from error
                state.retries.append(RetryRecord(len(state.retries) + 1, failure.message, delay))
                sleep(delay)
                continue
            OUTAGES.ended(self.endpoint)
            return response

    def list_models(self) -> list[str] | None:
        """The model ids of `GET /models`; None when the server has no such list (any status but 401/403, or a
        body that is not a list). ModelCallError when the endpoint cannot be reached or refuses the key."""
        try:
            page = self._client.models.list()
            return [str(model.id) for model in page.data]
        except Exception as error:  # classify_failure re-raises anything that is not an API failure
            try:
                failure = self._classified(error)
            except Exception:  # noqa: BLE001 - a body that is not a model list: the server has none
                return None
            if failure.status is None or failure.auth:
                raise failure from error
            return None

    # ---- policy ---------------------------------------------------------
    def _classified(self, error: Exception) -> ModelCallError:
        failure = classify_failure(error, self.endpoint, self.settings.request_timeout_seconds)
        if failure.auth and self.keyless:
            note = f" (no API key was set: this server wants one; set {self.settings.api_key_env} or api_key_env=)"
            return ModelCallError(failure.message + note, kind="auth", status=failure.status, detail=failure.detail)
        return failure

    def _switch_cap_name(self, failure: ModelCallError) -> bool:
        """A server that refuses the output cap's name (naming it as unsupported) gets the other chat name."""
        if self.protocol != "openai-chat" or failure.kind != "rejected":
            return False
        message = failure.detail.lower()
        if self.cap_name not in message or not any(word in message for word in UNSUPPORTED_WORDS):
            return False
        self.cap_name = "max_tokens" if self.cap_name == "max_completion_tokens" else "max_completion_tokens"
        return True

    def _retry_delay(self, failure: ModelCallError, error: Exception, state: _RetryState) -> float | None:
        """Seconds to wait before asking again; None when the failure is final."""
        retry_after = self._retry_after(error)
        if self._waits_for(failure):
            now = clock()
            remaining = OUTAGES.began(self.endpoint, now) + self.settings.server_wait_seconds - now
            if remaining <= 0:
                return None
            polls = min(len(state.retries), 8)
            delay = (
                retry_after if retry_after is not None else jitter(0.5, min(UNAVAILABLE_POLL_CAP_SECONDS, 2.0**polls))
            )
            return min(delay, remaining)
        if failure.kind != "transient" or state.transient >= self.settings.max_retries:
            return None
        state.transient += 1
        return backoff_seconds(state.transient - 1, retry_after)

    # ---- one request -----------------------------------------------------
    def _attempt(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[dict[str, Any]] | None,
        step_id: str,
        tool_choice: str | None,
        max_tokens: int | None,
        retries: tuple[RetryRecord, ...],
    ) -> ModelResponse:
        with self._slots, ACTIVITY.busy("model_calls"):
            started = time.monotonic()
            raw = self._send(messages, tools, step_id, tool_choice, max_tokens)
            latency = time.monotonic() - started
            try:
                body = raw.parse()
            except json.JSONDecodeError as error:
                raise MalformedResponse(f"body is not JSON ({error})") from error
        parse = parse_chat_completion if self.protocol == "openai-chat" else parse_responses_response
        try:
            answer = parse(body)
            timings = server_timings(answer.extra, raw.headers)
        except (AttributeError, TypeError) as error:
            raise MalformedResponse(f"{type(error).__name__}: {error}") from error
        record = CallRecord(latency, answer.usage, answer.finish_reason, answer.response_id, retries, timings)
        return ModelResponse(
            answer.text, answer.tool_calls, answer.finish_reason, record, answer.output_items, answer.reasoning
        )

    def request_options(
        self, tools: Sequence[dict[str, Any]] | None, tool_choice: str | None, max_tokens: int | None
    ) -> dict[str, Any]:
        """Everything a request carries besides the conversation."""
        body = dict(self.settings.model_params)
        cap = max_tokens if max_tokens is not None else self.settings.max_tokens
        if cap is not None:
            for name in OUTPUT_CAP_PARAMS:
                body.pop(name, None)
            body[self.cap_name] = cap
        options: dict[str, Any] = {"model": self.settings.model, "extra_body": body}
        if tools:
            options["tools"] = list(tools)
            if tool_choice:
                options["tool_choice"] = tool_choice_payload(tool_choice, self.protocol)
        return options

    def _send(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[dict[str, Any]] | None,
        step_id: str,
        tool_choice: str | None,
        max_tokens: int | None,
    ) -> Any:
        options = self.request_options(tools, tool_choice, max_tokens)
        if self.is_builtin:
            options["extra_headers"] = {builtin.STEP_HEADER: step_id}
        try:
            if self.protocol == "openai-chat":
                return self._client.chat.completions.with_raw_response.create(
                    messages=to_chat_messages(messages), **options
                )
            return self._client.responses.with_raw_response.create(input=to_responses_input(messages), **options)
        except json.JSONDecodeError as error:
            raise MalformedResponse(f"body is not JSON ({error})") from error

    @staticmethod
    def _retry_after(error: Exception) -> float | None:
        response = getattr(error, "response", None)
        return retry_after_seconds(getattr(response, "headers", None)) if response is not None else None

    def _final_failure(self, failure: ModelCallError, retries: Sequence[RetryRecord]) -> ModelCallError:
        message = failure.message
        if self._waits_for(failure):
            wait = self.settings.server_wait_seconds
            message = (
                f"gave up after {len(retries) + 1} attempts: the server was unavailable for {wait:g} s "
                f"(server_wait_seconds): {message}"
            )
        elif failure.kind == "transient" and retries:
            message = f"gave up after {len(retries) + 1} attempts: {message}"
        return failure.with_retries(message, retries)

    def _waits_for(self, failure: ModelCallError) -> bool:
        """A 503 is always waited for; a refused connection unless `wait_for_server` is off (the preflight)."""
        return failure.kind == "unavailable" and (failure.status is not None or self.wait_for_server)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> ModelClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
