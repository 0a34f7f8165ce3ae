"""What a failed model call means, read from the HTTP status and the server's own message.

`classify(error, endpoint, timeout_s)` turns an exception of the `openai` client into a `ModelCallError` of one
`FailureKind`; the client retries by kind, the loops and the stage act on it:

| kind | what | policy |
|---|---|---|
| `transient` | timeout (the call's deadline passed), connection reset, malformed body, 408, 409, 429, 5xx | retried `max_retries` times (429: Retry-After) |
| `unavailable` | connection refused, 503 | waited for, up to `server_wait_seconds` (503: Retry-After) |
| `rejected` | any other 4xx; a 3xx (redirects are not followed); a 500 whose body is a request-validation error | one attempt |
| `reply_refused` | a reply `stages.execution.service_replies` does not read: larger than its cap, or compressed | one attempt (asking again would be billed again) |
| `context_length` | the prompt does not fit the server's context (400 naming it) | final outcome of the step |
| `auth` | 401, 403 | stops the run |
| `not_found` | 404 (a wrong model, or a route the server does not have) | one attempt |
| `no_key` | no API key for an endpoint that needs one | no request is sent |

The server's message is kept, whitespace collapsed, up to `MESSAGE_LIMIT` characters (a validation error that
names the offending field is often past the first few hundred). It is untrusted text: `valid_text` first, and
the error body is read by `stages.execution.service_replies.reply_json` (bounded nesting), never trusted to be JSON.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from stages.execution.service_replies import UnreadableReply, refusal_in, reply_json, reply_text
from stages.execution.untrusted import flattened, valid_text
from stages.records.declared import Declared, key

FailureKind = Literal[
    "transient", "unavailable", "rejected", "reply_refused", "context_length", "auth", "not_found", "no_key"
]
MESSAGE_LIMIT = 4096
RETRIED_4XX = frozenset({408, 409, 429})
REDIRECTS = range(300, 400)  # not followed: every hop would start the deadline of the call again
UNAVAILABLE_STATUSES = frozenset({503})
AUTH_STATUSES = frozenset({401, 403})
CONTEXT_STATUSES = frozenset({400, 413, 422, 500})
# How servers say that a prompt does not fit: OpenAI and llama-cpp-python (code context_length_exceeded), llama.cpp's
# server (type exceed_context_size_error), vLLM ("maximum context length"), TGI and others.
CONTEXT_CODES = frozenset({"context_length_exceeded", "exceed_context_size_error"})
CONTEXT_PHRASES: tuple[str, ...] = (
    "maximum context length",
    "context length exceeded",
    "exceeds the available context size",
    "exceed context window",
    "exceeds the context window",
    "prompt is too long",
    "input is too long",
    "too many input tokens",
)
VALIDATION_PATTERN = re.compile(r"\b\d+ validation errors?\b|\bvalidation error for\b|\brequest validation\b", re.I)


def _to_the_millisecond(seconds: float) -> float:
    return round(seconds, 3)


@dataclass(frozen=True)
class RetryRecord(Declared):
    """One failed request of a model call, as the call's `retry_log` in the trajectory records it."""

    attempt: int  # 1-based number of the failed request
    error: str
    delay_s: float = field(metadata=key(write=_to_the_millisecond))


class ModelCallError(RuntimeError):
    """A model call that failed for good (or, inside the client, one failed request and what it means)."""

    def __init__(
        self,
        message: str,
        *,
        kind: FailureKind,
        status: int | None = None,
        retries: Sequence[RetryRecord] = (),
        detail: str = "",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.kind: FailureKind = kind
        self.status = status
        self.retries = tuple(retries)
        self.detail = detail  # the server's own message, as kept

    @property
    def transient(self) -> bool:
        """Worth asking again (now, or once the server is back)."""
        return self.kind in ("transient", "unavailable")

    @property
    def model_level(self) -> bool:
        """The model or the key is wrong: every problem of the run would fail the same way."""
        return self.kind in ("auth", "not_found", "no_key")

    @property
    def auth(self) -> bool:
        return self.kind == "auth"

    @property
    def context_length(self) -> bool:
        return self.kind == "context_length"

    def with_retries(self, message: str, retries: Sequence[RetryRecord]) -> ModelCallError:
        return ModelCallError(message, kind=self.kind, status=self.status, retries=retries, detail=self.detail)


class MalformedResponse(ValueError):
    """The endpoint answered 2xx with a body that is not a response of the protocol."""


def one_line(text: Any, limit: int = MESSAGE_LIMIT) -> str:
    """Untrusted text as one line of at most `limit` characters (whatever its size: only what is kept is split)."""
    flat = flattened(valid_text(text), limit)
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def server_message(body: Any, fallback: str) -> str:
    """The message in an error body: OpenAI's `{"error": {"message"}}`, a flat `{"message"}` or `{"error": "..."}`,
    FastAPI's `{"detail"}`; else `fallback` (the client's own text)."""
    if isinstance(body, dict):
        nested = body.get("error")
        if isinstance(nested, str) and nested.strip():
            return nested
        source = nested if isinstance(nested, dict) else body
        for key in ("message", "detail"):
            value = source.get(key)
            if isinstance(value, str) and value.strip():
                return value
            if isinstance(value, (list, dict)) and value:
                return str(value)
    elif isinstance(body, str) and body.strip():
        return body
    return fallback


def _body_fields(body: Any) -> tuple[str, str]:
    """The error's `code` and `type` fields, when the body has them."""
    source = body.get("error") if isinstance(body, dict) and isinstance(body.get("error"), dict) else body
    if not isinstance(source, dict):
        return "", ""
    return str(source.get("code") or ""), str(source.get("type") or "")


def is_context_length(status: int, message: str, body: Any) -> bool:
    code, kind = _body_fields(body)
    if code in CONTEXT_CODES or kind in CONTEXT_CODES:
        return True
    lowered = message.lower()
    return status in CONTEXT_STATUSES and any(phrase in lowered for phrase in CONTEXT_PHRASES)


def is_validation_error(message: str, body: Any) -> bool:
    """A server error that says the request itself is invalid (asking again sends the same request)."""
    _, kind = _body_fields(body)
    return kind == "invalid_request_error" or bool(VALIDATION_PATTERN.search(message))


def status_kind(status: int, message: str, body: Any) -> FailureKind:
    if is_context_length(status, message, body):
        return "context_length"
    if status in AUTH_STATUSES:
        return "auth"
    if status == 404:
        return "not_found"
    if status in UNAVAILABLE_STATUSES:
        return "unavailable"
    if status in RETRIED_4XX:
        return "transient"
    if status >= 500:
        return "rejected" if status == 500 and is_validation_error(message, body) else "transient"
    return "rejected"


def _refused(error: BaseException) -> bool:
    """Whether the connection was refused (nothing listens: the server is down or restarting)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ConnectionRefusedError) or "connection refused" in str(current).lower():
            return True
        current = current.__cause__ or current.__context__
    return False


def classify(error: Exception, endpoint: str, timeout_s: float, openai: Any) -> ModelCallError:
    """The failure as a ModelCallError of its kind; an exception that is not an API failure is re-raised."""
    if isinstance(error, openai.APITimeoutError):
        message = f"request to {endpoint} timed out after {timeout_s:g} s (the deadline of the whole reply)"
        return ModelCallError(message, kind="transient")
    refusal = refusal_in(error)
    if refusal is not None:
        return ModelCallError(f"reply from {endpoint} not read: {refusal}", kind="reply_refused")
    if isinstance(error, openai.APIConnectionError):
        cause = error.__cause__ or error
        detail = one_line(str(cause) or type(cause).__name__, 500)
        kind: FailureKind = "unavailable" if _refused(error) else "transient"
        return ModelCallError(f"cannot reach {endpoint}: {detail}", kind=kind, detail=detail)
    if isinstance(error, openai.APIStatusError):
        status = error.status_code
        body = _error_body(error)
        message = one_line(server_message(body, _response_text(error) or error.message))
        if REDIRECTS.start <= status < REDIRECTS.stop:
            target = one_line(error.response.headers.get("location") or "nowhere", 500)
            message = f"it redirects to {target}: redirects are not followed, set base_url= to where it points"
        return ModelCallError(
            f"HTTP {status} from {endpoint}: {message or '(empty message)'}",
            kind=status_kind(status, message, body),
            status=status,
            detail=message,
        )
    if isinstance(error, MalformedResponse):
        return ModelCallError(f"malformed response from {endpoint}: {one_line(str(error), 500)}", kind="transient")
    raise error


def _error_body(error: Any) -> Any:
    """The error reply's JSON data, or its text when it is not JSON (within the reply cap: it was read whole)."""
    try:
        content = error.response.content
    except Exception:  # noqa: BLE001 - a body that cannot be read is no message
        return None
    try:
        return reply_json(content)
    except UnreadableReply:
        return reply_text(content)


def _response_text(error: Any) -> str:
    try:
        return str(error.response.text)
    except Exception:  # noqa: BLE001 - a body that cannot be read is no message
        return ""
