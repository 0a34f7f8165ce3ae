"""One model call, either protocol, with retries that never re-bill a finished answer.

`ModelClient.complete(messages, tools=..., step_id=..., tool_choice=...)` sends a conversation kept in chat form
(user / assistant with `tool_calls` / tool messages) through Chat Completions or the Responses API and returns a
`ModelResponse`: the answer text, the reasoning text when the API returned it (chat: a message's
`reasoning_content` or `reasoning` field; responses: the summaries and text parts of its reasoning items), the
tool calls, the finish reason and a `CallRecord` (latency, token usage,
response id, the server's own timings when it reports them, every retry with its reason and delay). Where the
server reports its own time without queueing (llama.cpp's `timings`), the record also holds that time
(`service_s`) and the rest of the latency, the wait in the server's queue (`queued_s`). The shapes
of requests and answers are `stages.generate.api_format`; this module sends, times and retries.

Every reply crosses `stages.execution.service_replies`: the `openai` client sends through its bounded httpx2 client (a reply
of at most ENDPOINT_REPLY_BYTES, `request_timeout_seconds` the deadline of the whole call, no redirect followed),
and an answer is read from the reply's bytes (`answer_from`), never from the `openai` client's models. A 2xx reply
is handed to `on_reply` (the reply journal, `stages.generate.journal`) before it is parsed.

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
import math
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

from stages.config.settings import OUTPUT_CAP_PARAMS, TOOL_CHOICE_MODES, ApiProtocol, Settings
from stages.execution.activity import ACTIVITY
from stages.execution.service_replies import (
    ENDPOINT_REPLY_BYTES,
    UnreadableReply,
    bounded_client,
    reply_json,
    reply_text,
)
from stages.execution.untrusted import valid_text
from stages.generate import builtin
from stages.generate.api_errors import MalformedResponse, ModelCallError, RetryRecord, classify
from stages.generate.api_format import (
    PROCESSING_HEADER,
    ToolCall,
    openai_package,
    parse_chat_completion,
    parse_responses_response,
    server_timings,
    to_chat_messages,
    to_responses_input,
)
from stages.generate.journal import ReceivedReply
from stages.records.usage import Tokens
from stages.storage.json_values import JSONObject

__all__ = ["MalformedResponse", "ModelCallError", "ModelClient", "ModelResponse", "RetryRecord", "ToolCall"]

BACKOFF_BASE_SECONDS = 1.0
BACKOFF_CAP_SECONDS = 60.0
RETRY_AFTER_CAP_SECONDS = 120.0
UNAVAILABLE_POLL_CAP_SECONDS = 10.0  # while waiting for a server to come back, ask at least this often
BUILTIN_API_KEY = "builtin-model-needs-no-key"
KEYLESS_ENDPOINT_API_KEY = "no-key"  # sent to an endpoint on this machine when no key is set (they ignore it)
OPENAI_HOST = "api.openai.com"
UNSUPPORTED_WORDS: tuple[str, ...] = ("unsupported", "not supported", "unrecognized", "unknown", "extra inputs")
KEPT_HEADERS: tuple[str, ...] = (PROCESSING_HEADER,)  # the reply headers a call's record uses
# The server timings (milliseconds) that sum to its time for a request without queueing: llama.cpp's `timings`.
UNQUEUED_TIMINGS: tuple[str, ...] = ("prompt_ms", "predicted_ms")

# Module attributes so tests can make backoff instant and deterministic.
sleep: Callable[[float], None] = time.sleep
clock: Callable[[], float] = time.monotonic
jitter: Callable[[float, float], float] = random.uniform


# ---------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------


def received_reply(response: Any, latency_s: float) -> ReceivedReply:
    """An httpx2 response (read whole, within the reply boundary) as the journal keeps it."""
    kept = {name: valid_text(response.headers[name]) for name in KEPT_HEADERS if name in response.headers}
    return ReceivedReply(reply_text(response.content), kept, latency_s)


def served_ids(body: bytes) -> list[str] | None:
    """The model ids of a `GET /models` reply (`{"data": [{"id": ...}]}`); None for a body that is no such list."""
    try:
        data = reply_json(body)
    except UnreadableReply:
        return None
    entries = data.get("data") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return None
    return [entry["id"] for entry in entries if isinstance(entry, dict) and isinstance(entry.get("id"), str)]


@dataclass(frozen=True)
class CallRecord:
    latency_s: float  # the request that succeeded, as the client saw it (queueing inside the server included)
    usage: Tokens
    finish_reason: str | None
    response_id: str | None
    retries: tuple[RetryRecord, ...] = ()
    server: Mapping[str, float] | None = None  # the server's own timings, when the response carries them

    @property
    def service_s(self) -> float | None:
        """The server's own time for the request without any wait in its queue, where it reports one (llama.cpp's
        prompt and generation times); None otherwise (`openai-processing-ms` includes the queue)."""
        parts = [(self.server or {}).get(name) for name in UNQUEUED_TIMINGS]
        if any(part is None for part in parts):
            return None
        return min(math.fsum(part for part in parts if part is not None) / 1000.0, self.latency_s)

    # A real special case: the service and queue times are derived, and the retries written as a count beside their log.
    def to_record(self) -> JSONObject:
        service = self.service_s
        record: JSONObject = {
            "latency_s": round(self.latency_s, 6),
            **({} if service is None else {"service_s": round(service, 6)}),
            **({} if service is None else {"queued_s": round(self.latency_s - service, 6)}),
            "usage": dict(self.usage.to_record()),
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
    output_items: tuple[JSONObject, ...] = ()
    reasoning: str | None = None  # the reasoning text the API returned with the answer (never sent back)
    replayed: bool = False  # read back from the reply journal, not asked again

    def assistant_message(self) -> JSONObject:
        """The answer as a chat-form assistant message, as kept in the trajectory (with `reasoning` when the API
        returned reasoning text)."""
        message: JSONObject = {"role": "assistant", "content": self.text}
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


def classify_failure(error: Exception, endpoint: str, timeout_s: float) -> ModelCallError:
    """The failure as a ModelCallError of its kind (stages.generate.api_errors); other errors re-raise."""
    return classify(error, endpoint, timeout_s, openai_package())


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


def tool_choice_payload(choice: str, protocol: ApiProtocol) -> str | JSONObject:
    """`auto` / `none` / `required` as they are; a tool's name in the named-function form of the protocol."""
    if choice in TOOL_CHOICE_MODES:
        return choice
    if protocol == "openai-chat":
        return {"type": "function", "function": {"name": choice}}
    return {"type": "function", "name": choice}


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
        self._client = openai_package().OpenAI(
            base_url=base_url,
            api_key=_api_key(settings, self.is_builtin),
            max_retries=0,
            timeout=settings.request_timeout_seconds,
            http_client=bounded_client(ENDPOINT_REPLY_BYTES),  # no redirect: each hop would restart the deadline
        )
        self._slots = call_slots(settings.concurrency)
        self.cap_name = output_cap_name(self.protocol, settings.base_url)

    def complete(
        self,
        messages: Sequence[JSONObject],
        *,
        tools: Sequence[JSONObject] | None,
        step_id: str,
        tool_choice: str | None = None,
        max_tokens: int | None = None,
        on_reply: Callable[[ReceivedReply], None] | None = None,
    ) -> ModelResponse:
        """One answer to `messages` (offering `tools`, with `tool_choice`, when given), by the retry policy of
        the module docstring. `max_tokens` overrides the setting (the preflight's tiny requests); `on_reply` is
        given every 2xx reply as it arrives, before it is parsed (the reply journal)."""
        state = _RetryState([])
        while True:
            try:
                response = self._attempt(
                    messages, tools, step_id, tool_choice, max_tokens, tuple(state.retries), on_reply
                )
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
            raw = self._client.models.with_raw_response.list()
        except Exception as error:  # classify_failure re-raises anything that is not an API failure
            try:
                failure = self._classified(error)
            except Exception:  # noqa: BLE001 - a body that is not a model list: the server has none
                return None
            if failure.status is None or failure.auth:
                raise failure from error
            return None
        return served_ids(raw.http_response.content)

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
        messages: Sequence[JSONObject],
        tools: Sequence[JSONObject] | None,
        step_id: str,
        tool_choice: str | None,
        max_tokens: int | None,
        retries: tuple[RetryRecord, ...],
        on_reply: Callable[[ReceivedReply], None] | None,
    ) -> ModelResponse:
        with self._slots, ACTIVITY.busy("model_calls"):
            started = time.monotonic()
            raw = self._send(messages, tools, step_id, tool_choice, max_tokens)
            received = received_reply(raw.http_response, time.monotonic() - started)
        if on_reply is not None:
            on_reply(received)  # the paid answer is saved before anything parses it
        return self.answer_from(received, retries)

    def answer_from(self, received: ReceivedReply, retries: tuple[RetryRecord, ...] = ()) -> ModelResponse:
        """The answer a 2xx reply holds (one just received, or one read back from the reply journal);
        MalformedResponse when it holds none. Total: any JSON is either an answer or that error."""
        parse = parse_chat_completion if self.protocol == "openai-chat" else parse_responses_response
        try:
            body = reply_json(received.body)
            answer = parse(body)
            timings = server_timings(body, received.headers)
        except UnreadableReply as error:
            raise MalformedResponse(str(error)) from None
        except MalformedResponse:
            raise
        except Exception as error:  # noqa: BLE001 - a reply no reader foresaw is that call's named error
            raise MalformedResponse(f"the reply could not be read ({type(error).__name__}: {error})") from None
        record = CallRecord(
            received.latency_s, answer.usage, answer.finish_reason, answer.response_id, retries, timings
        )
        return ModelResponse(
            answer.text, answer.tool_calls, answer.finish_reason, record, answer.output_items, answer.reasoning
        )

    def request_options(
        self, tools: Sequence[JSONObject] | None, tool_choice: str | None, max_tokens: int | None
    ) -> dict[str, Any]:
        """Everything a request carries besides the conversation: the keyword arguments of the `openai` client's
        `create` (whose own request types our JSON does not claim to be)."""
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
        messages: Sequence[JSONObject],
        tools: Sequence[JSONObject] | None,
        step_id: str,
        tool_choice: str | None,
        max_tokens: int | None,
    ) -> Any:
        options = self.request_options(tools, tool_choice, max_tokens)
        if self.is_builtin:
            options["extra_headers"] = {builtin.STEP_HEADER: step_id}
        if self.protocol == "openai-chat":
            return self._client.chat.completions.with_raw_response.create(
                messages=to_chat_messages(messages), **options
            )
        return self._client.responses.with_raw_response.create(input=to_responses_input(messages), **options)

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
