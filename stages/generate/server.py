"""A local OpenAI-compatible HTTP endpoint driven by a Python responder.

It serves the two protocols the pipeline speaks — Chat Completions (`POST /v1/chat/completions`)
and the Responses API (`POST /v1/responses`) — plus `GET /v1/models`. Every request is normalized
into one `ModelRequest` (chat-style messages whatever the protocol), handed to the responder, and
its reply is rendered in the official response shape so the real `openai` client parses it.

Used by the built-in models (`gold`, `replay:`) and by tests, which script errors, malformed
bodies and stalls through `ErrorReply`, `RawReply` and `StallReply`, and servers that lack a route
(`protocols=`, `models=None`), report their own timings (`ModelReply.extra` / `.headers`), return
reasoning text (`ModelReply.reasoning`, in the fields and items each protocol uses for it) or describe
themselves on other GET routes (`pages=`, e.g. llama.cpp's `GET /props`).
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, TypedDict

from stages.storage.json_values import JSONObject, JSONValue

Protocol = Literal["openai-chat", "openai-responses"]
CHAT_PATH = "/v1/chat/completions"
RESPONSES_PATH = "/v1/responses"
MODELS_PATH = "/v1/models"
MAX_BODY_BYTES = 64 * 1024 * 1024
SHUTDOWN_POLL_SECONDS = 0.05

# Request fields that are part of the normalized view; everything else lands in `params`.
CHAT_STRUCTURAL_FIELDS = frozenset({"model", "messages", "tools"})
RESPONSES_STRUCTURAL_FIELDS = frozenset({"model", "input", "instructions", "tools"})

ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    409: "conflict_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


@dataclass(frozen=True)
class ToolCallSpec:
    """One tool call in a reply (or in a normalized assistant message)."""

    id: str
    name: str
    arguments: str  # JSON text


class RequestCall(TypedDict):
    """A tool call of a normalized assistant message, its fields as the request sent them."""

    id: JSONValue
    name: JSONValue
    arguments: JSONValue


class _MessageText(TypedDict):
    role: str
    content: str | None


class RequestMessage(_MessageText, total=False):
    """One message of a normalized request: chat-style whatever the protocol."""

    tool_calls: list[RequestCall]
    tool_call_id: JSONValue


@dataclass(frozen=True)
class ModelRequest:
    """Normalized view of one API request, either protocol."""

    protocol: Protocol
    model: str
    messages: tuple[RequestMessage, ...]
    tools: tuple[str, ...]
    params: JSONObject  # the body's other fields
    headers: dict[str, str]
    index: int


@dataclass(frozen=True)
class ModelReply:
    text: str | None = None
    tool_calls: tuple[ToolCallSpec, ...] = ()
    finish_reason: str = "stop"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    extra: JSONObject = field(default_factory=dict)  # more fields of the body (e.g. llama.cpp's `timings`)
    headers: dict[str, str] = field(default_factory=dict)  # response headers (e.g. `openai-processing-ms`)
    # Reasoning text, returned as local servers and gateways do: chat, in the message field `reasoning_field`
    # (`reasoning_content` or `reasoning`); responses, as a reasoning item before the answer, each paragraph a
    # summary part (`reasoning_parts="summary"`) or a reasoning_text content part (`"content"`).
    reasoning: str | None = None
    reasoning_field: Literal["reasoning_content", "reasoning"] = "reasoning_content"
    reasoning_parts: Literal["summary", "content"] = "summary"


@dataclass(frozen=True)
class ErrorReply:
    status: int
    message: str = "error"
    headers: dict[str, str] = field(default_factory=dict)
    code: str | None = None


@dataclass(frozen=True)
class RawReply:
    """Sent verbatim (malformed-response tests)."""

    status: int
    body: bytes
    content_type: str = "application/json"


@dataclass(frozen=True)
class StallReply:
    """Waits `seconds` before answering `then` (client timeout tests)."""

    seconds: float
    then: ModelReply | ErrorReply | RawReply


Reply = ModelReply | ErrorReply | RawReply | StallReply
Responder = Callable[[ModelRequest], Reply]


class RequestFormatError(ValueError):
    """The request body is not a valid request of its protocol."""


# ---------------------------------------------------------------------------
# Normalization of requests
# ---------------------------------------------------------------------------


def _text_of_content(content: Any) -> str | None:
    """Plain text of a message content: a string, or a list of text parts joined."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "".join(parts)
    raise RequestFormatError(f"unsupported message content of type {type(content).__name__}")


def _normalize_role(role: Any) -> str:
    if role == "developer":
        return "system"
    if isinstance(role, str) and role in ("system", "user", "assistant", "tool"):
        return role
    raise RequestFormatError(f"unsupported message role {role!r}")


def _normalize_chat_message(message: Any) -> RequestMessage:
    if not isinstance(message, dict):
        raise RequestFormatError("each message must be a JSON object")
    normalized: RequestMessage = {
        "role": _normalize_role(message.get("role")),
        "content": _text_of_content(message.get("content")),
    }
    if message.get("tool_calls"):
        normalized["tool_calls"] = [
            {
                "id": call.get("id", ""),
                "name": call["function"]["name"],
                "arguments": call["function"].get("arguments", ""),
            }
            for call in message["tool_calls"]
        ]
    if "tool_call_id" in message:
        normalized["tool_call_id"] = message["tool_call_id"]
    return normalized


def normalize_chat_messages(messages: Any) -> tuple[RequestMessage, ...]:
    if not isinstance(messages, list):
        raise RequestFormatError("'messages' must be a list")
    return tuple(_normalize_chat_message(message) for message in messages)


def _append_function_call(messages: list[RequestMessage], item: JSONObject) -> None:
    """A function_call item joins the preceding assistant message, or starts one."""
    call: RequestCall = {
        "id": item.get("call_id") or item.get("id", ""),
        "name": item.get("name", ""),
        "arguments": item.get("arguments", ""),
    }
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant":
        last.setdefault("tool_calls", []).append(call)
    else:
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def normalize_responses_input(instructions: Any, input_value: Any) -> tuple[RequestMessage, ...]:
    messages: list[RequestMessage] = []
    if instructions:
        messages.append({"role": "system", "content": _text_of_content(instructions)})
    if isinstance(input_value, str):
        messages.append({"role": "user", "content": input_value})
        return tuple(messages)
    if not isinstance(input_value, list):
        raise RequestFormatError("'input' must be a string or a list of items")
    for item in input_value:
        if not isinstance(item, dict):
            raise RequestFormatError("each input item must be a JSON object")
        kind = item.get("type", "message")
        if kind == "message":
            messages.append(
                {"role": _normalize_role(item.get("role")), "content": _text_of_content(item.get("content"))}
            )
        elif kind == "function_call":
            _append_function_call(messages, item)
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append(
                {"role": "tool", "content": _text_of_content(output), "tool_call_id": item.get("call_id", "")}
            )
        elif kind == "reasoning":
            continue  # opaque reasoning items carry no conversation text
        else:
            raise RequestFormatError(f"unsupported input item type {kind!r}")
    return tuple(messages)


def _tool_names(tools: Any, protocol: Protocol) -> tuple[str, ...]:
    if not tools:
        return ()
    if not isinstance(tools, list):
        raise RequestFormatError("'tools' must be a list")
    names = []
    for tool in tools:
        if protocol == "openai-chat":
            names.append(str((tool.get("function") or {}).get("name", "")))
        else:
            names.append(str(tool.get("name", "")))
    return tuple(names)


def normalize_request(protocol: Protocol, body: Any, headers: dict[str, str], index: int) -> ModelRequest:
    if not isinstance(body, dict):
        raise RequestFormatError("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RequestFormatError("'model' is required")
    try:
        if protocol == "openai-chat":
            messages = normalize_chat_messages(body.get("messages"))
            structural = CHAT_STRUCTURAL_FIELDS
        else:
            messages = normalize_responses_input(body.get("instructions"), body.get("input"))
            structural = RESPONSES_STRUCTURAL_FIELDS
        tools = _tool_names(body.get("tools"), protocol)
    except (KeyError, TypeError, AttributeError) as error:
        raise RequestFormatError(f"malformed {protocol} request: {type(error).__name__} {error}") from None
    return ModelRequest(
        protocol=protocol,
        model=model,
        messages=messages,
        tools=tools,
        params={key: value for key, value in body.items() if key not in structural},
        headers=headers,
        index=index,
    )


# ---------------------------------------------------------------------------
# Rendering of replies
# ---------------------------------------------------------------------------


def _short_id() -> str:
    return uuid.uuid4().hex[:24]


def chat_finish_reason(reply: ModelReply) -> str:
    if reply.tool_calls and reply.finish_reason == "stop":
        return "tool_calls"
    return reply.finish_reason


def render_chat(reply: ModelReply, model: str) -> JSONObject:
    message: JSONObject = {"role": "assistant", "content": reply.text, "refusal": None}
    if reply.reasoning is not None:
        message[reply.reasoning_field] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call in reply.tool_calls
        ]
    return {
        "id": f"chatcmpl-{_short_id()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": chat_finish_reason(reply), "logprobs": None}],
        "usage": {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        },
    }


def _reasoning_item(reply: ModelReply) -> JSONObject:
    paragraphs = [part for part in (reply.reasoning or "").split("\n\n") if part]
    item: JSONObject = {"id": f"rs_{_short_id()}", "type": "reasoning", "summary": []}
    if reply.reasoning_parts == "summary":
        item["summary"] = [{"type": "summary_text", "text": part} for part in paragraphs]
    else:
        item["content"] = [{"type": "reasoning_text", "text": part} for part in paragraphs]
    return item


def _responses_output(reply: ModelReply) -> list[JSONValue]:
    output: list[JSONValue] = [_reasoning_item(reply)] if reply.reasoning is not None else []
    if reply.text is not None:
        output.append(
            {
                "id": f"msg_{_short_id()}",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
            }
        )
    for call in reply.tool_calls:
        output.append(
            {
                "id": f"fc_{_short_id()}",
                "type": "function_call",
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments,
                "status": "completed",
            }
        )
    return output


def _responses_status(reply: ModelReply) -> tuple[str, JSONObject | None]:
    if reply.finish_reason == "length":
        return "incomplete", {"reason": "max_output_tokens"}
    if reply.finish_reason == "content_filter":
        return "incomplete", {"reason": "content_filter"}
    return "completed", None


def render_responses(reply: ModelReply, model: str) -> JSONObject:
    status, incomplete_details = _responses_status(reply)
    return {
        "id": f"resp_{_short_id()}",
        "object": "response",
        "created_at": time.time(),
        "model": model,
        "status": status,
        "incomplete_details": incomplete_details,
        "error": None,
        "instructions": None,
        "metadata": {},
        "output": _responses_output(reply),
        "parallel_tool_calls": True,
        "temperature": None,
        "top_p": None,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": reply.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": reply.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        },
    }


def error_body(status: int, message: str, code: str | None) -> JSONObject:
    error_type = ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}


# ---------------------------------------------------------------------------
# HTTP server
# ---------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        return  # keep test and pipeline output clean; the request log is ModelServer.requests

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        if self.path.rstrip("/") == MODELS_PATH and self.server.owner.models is not None:
            data: list[JSONValue] = [
                {"id": name, "object": "model", "created": 0, "owned_by": "local"} for name in self.server.owner.models
            ]
            self._send_json(200, {"object": "list", "data": data})
        elif self.path.rstrip("/") in self.server.owner.pages:
            self._send_json(200, self.server.owner.pages[self.path.rstrip("/")])
        else:
            self._send_error(404, f"no route for GET {self.path}", "not_found")

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        route = self.path.split("?", 1)[0].rstrip("/")
        protocol: Protocol | None = {CHAT_PATH: "openai-chat", RESPONSES_PATH: "openai-responses"}.get(route)  # type: ignore[assignment]
        body = self._read_body()
        if protocol is None or protocol not in self.server.owner.protocols:
            self._send_json(404, {"detail": "Not Found"})  # as a server without the route answers (FastAPI)
            return
        try:
            payload = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            self._send_error(400, "the request body is not valid JSON", "invalid_json")
            return
        headers = {name.lower(): value for name, value in self.headers.items()}
        try:
            request = self.server.owner.normalize_and_log(protocol, payload, headers)
        except RequestFormatError as error:
            self._send_error(400, str(error), "invalid_request")
            return
        self._answer(request, self.server.owner.respond(request))

    # ---- helpers ---------------------------------------------------------
    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(min(length, MAX_BODY_BYTES)) if length > 0 else b""

    def _answer(self, request: ModelRequest, reply: Reply) -> None:
        if isinstance(reply, StallReply):
            time.sleep(reply.seconds)
            reply = reply.then
        if isinstance(reply, ModelReply):
            render = render_chat if request.protocol == "openai-chat" else render_responses
            self._send_json(200, {**render(reply, request.model), **reply.extra}, reply.headers)
        elif isinstance(reply, ErrorReply):
            self._send_error(reply.status, reply.message, reply.code, reply.headers)
        elif isinstance(reply, RawReply):
            self._send_bytes(reply.status, reply.body, reply.content_type)
        else:
            self._send_error(500, f"responder returned an unsupported reply {type(reply).__name__}", "bad_responder")

    def _send_error(self, status: int, message: str, code: str | None, headers: dict[str, str] | None = None) -> None:
        self._send_json(status, error_body(status, message, code), headers)

    def _send_json(self, status: int, payload: JSONValue, headers: dict[str, str] | None = None) -> None:
        self._send_bytes(status, json.dumps(payload).encode("utf-8"), "application/json", headers)

    def _send_bytes(self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(str(name), str(value))
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (e.g. its timeout during a stall)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], owner: ModelServer) -> None:
        self.owner = owner
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """Close every kept-alive connection, as a server process that goes away does."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class ModelServer:
    """OpenAI-compatible endpoint on 127.0.0.1 (a free port by default) answering with `responder`."""

    def __init__(
        self,
        responder: Responder,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        models: tuple[str, ...] | None = (),
        latency_seconds: float = 0.0,
        protocols: tuple[Protocol, ...] = ("openai-chat", "openai-responses"),
        pages: dict[str, JSONValue] | None = None,
    ) -> None:
        """`models`: the ids `GET /v1/models` lists (None: no such route); `protocols`: the routes served; `pages`:
        the JSON other GET routes answer with, by path (`{"/props": {...}}`)."""
        self.responder = responder
        self.latency_seconds = latency_seconds  # added before every answer (a slow model, for benchmarks and tests)
        self.host = host
        self.port = port
        self.models = None if models is None else tuple(models)
        self.protocols = tuple(protocols)
        self.pages: dict[str, JSONValue] = dict(pages or {})
        self.requests: list[ModelRequest] = []
        self._lock = threading.Lock()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("ModelServer is not started")
        return f"http://{self.host}:{self._httpd.server_address[1]}/v1"

    def start(self) -> ModelServer:
        if self._httpd is not None:
            return self
        self._httpd = _HTTPServer((self.host, self.port), self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": SHUTDOWN_POLL_SECONDS},
            name="model-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        httpd.close_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ---- called from handler threads ---------------------------------------
    def normalize_and_log(self, protocol: Protocol, payload: Any, headers: dict[str, str]) -> ModelRequest:
        with self._lock:
            request = normalize_request(protocol, payload, headers, len(self.requests))
            self.requests.append(request)
        return request

    def respond(self, request: ModelRequest) -> Reply:
        try:
            reply = self.responder(request)
        except Exception as error:  # a responder bug must reach the client as a server error, not a hang
            return ErrorReply(500, f"responder failed: {type(error).__name__}: {error}", code="responder_error")
        if self.latency_seconds <= 0:
            return reply
        if isinstance(reply, StallReply):  # the responder's own stall comes on top of the server's latency
            return StallReply(self.latency_seconds + reply.seconds, reply.then)
        return StallReply(self.latency_seconds, reply)
