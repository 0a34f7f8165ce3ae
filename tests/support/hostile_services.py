"""Hostile stand-ins of the services around the pipeline, on 127.0.0.1: an OpenAI-compatible endpoint and a
SandboxFusion-compatible /run_code service, as a proxy, a gateway, a buggy local server or a compromised sandbox
may behave.

`HostileServer(script)` speaks HTTP/1.1 over a raw socket, one request per connection, so that a reply can be
anything at the byte level: `script(request)` returns what to send, a `Behaviour`:

- `Json(data)`: a well-formed reply (`data` may be `RawJson` text, for values `json` cannot write, like `1e999`);
- `Raw(body)`: any bytes, with any status and headers (malformed bodies);
- `Huge(size)`: a body of `size` bytes, chunked (no length announced) or with its length announced;
- `Trickle(body, every)`: the headers, then the body one byte every `every` seconds (`whole=True`: the status line
  and headers too);
- `Cut(body, keep)`: a Content-Length of the whole body, then only its first `keep` bytes, then the connection
  closed.

Every request is kept (`requests`) with the time it arrived and the time its connection ended (when the client
hung up or the reply was done), so a test can state how long each call lasted as the client ended it.
"""

from __future__ import annotations

import json
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stages.benchmark.problems import Step
from tests.support.pipeline_support import doit_command, doit_environment, is_preflight_probe, step_asked

# The caps of stages/execution/service_replies.py (ENDPOINT_REPLY_BYTES, SANDBOX_REPLY_BYTES), written out so that
# the tests against these stand-ins also run, and fail, on code without that module
# (tests/execution/test_service_boundary.py checks that the two agree).
ENDPOINT_REPLY_BYTES = 8 * 1024 * 1024
SANDBOX_REPLY_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True)
class RawJson:
    """JSON text sent as it is (what `json.dumps` cannot write: `1e999`, duplicate keys, lone surrogates)."""

    text: str


@dataclass(frozen=True)
class Json:
    data: Any
    status: int = 200


@dataclass(frozen=True)
class Raw:
    body: bytes
    status: int = 200
    headers: tuple[tuple[str, str], ...] = (("Content-Type", "application/json"),)


@dataclass(frozen=True)
class Huge:
    size: int
    announced: bool = False  # send Content-Length: size (else chunked, nothing announced)
    prefix: bytes = b'{"id": "x", "choices": [{"message": {"role": "assistant", "content": "'


@dataclass(frozen=True)
class Trickle:
    body: bytes
    every: float = 0.2
    whole: bool = False  # `body` is the whole reply, status line and headers included, trickled from its first byte


@dataclass(frozen=True)
class Cut:
    body: bytes
    keep: int


Behaviour = Json | Raw | Huge | Trickle | Cut


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    arrived: float
    ended: float | None = None

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    @property
    def duration(self) -> float:
        assert self.ended is not None, f"{self.path} has not ended"
        return self.ended - self.arrived


STATUS_TEXT = {200: "OK", 400: "Bad Request", 404: "Not Found", 500: "Internal Server Error"}


def _encoded(data: Any) -> bytes:
    return (data.text if isinstance(data, RawJson) else json.dumps(data)).encode("utf-8", "surrogatepass")


def _head(status: int, headers: tuple[tuple[str, str], ...], length: int | None) -> bytes:
    lines = [f"HTTP/1.1 {status} {STATUS_TEXT.get(status, 'Status')}", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in headers]
    lines.append(f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _send(connection: socket.socket, behaviour: Behaviour) -> None:
    """Write `behaviour` to the connection (an OSError means the client hung up)."""
    json_headers = (("Content-Type", "application/json"),)
    if isinstance(behaviour, Json):
        body = _encoded(behaviour.data)
        connection.sendall(_head(behaviour.status, json_headers, len(body)) + body)
    elif isinstance(behaviour, Raw):
        connection.sendall(_head(behaviour.status, behaviour.headers, len(behaviour.body)) + behaviour.body)
    elif isinstance(behaviour, Huge):
        _send_huge(connection, behaviour, json_headers)
    elif isinstance(behaviour, Trickle):
        if not behaviour.whole:
            connection.sendall(_head(200, json_headers, len(behaviour.body)))
        for index in range(len(behaviour.body)):
            connection.sendall(behaviour.body[index : index + 1])
            time.sleep(behaviour.every)
    else:
        connection.sendall(_head(200, json_headers, len(behaviour.body)) + behaviour.body[: behaviour.keep])


def _send_huge(connection: socket.socket, behaviour: Huge, headers: tuple[tuple[str, str], ...]) -> None:
    chunk = b"x" * (1 << 20)
    connection.sendall(_head(200, headers, behaviour.size if behaviour.announced else None))
    sent = 0
    pieces = [behaviour.prefix]
    while sent < behaviour.size:
        piece = pieces.pop() if pieces else chunk[: behaviour.size - sent]
        sent += len(piece)
        connection.sendall(piece if behaviour.announced else b"%x\r\n%b\r\n" % (len(piece), piece))
    if not behaviour.announced:
        connection.sendall(b"0\r\n\r\n")


def _read_request(stream: Any) -> tuple[str, str, dict[str, str], bytes] | None:
    line = stream.readline(65536).decode("latin-1")
    if not line.strip():
        return None
    method, path = line.split()[:2]
    headers: dict[str, str] = {}
    while True:
        header = stream.readline(65536).decode("latin-1").rstrip("\r\n")
        if not header:
            break
        name, _, value = header.partition(":")
        headers[name.strip().lower()] = value.strip()
    body = stream.read(int(headers.get("content-length") or 0))
    return method, path, headers, body


class HostileServer:
    """See the module docstring. Use as a context manager; `url` is its base URL."""

    def __init__(self, script: Callable[[Request], Behaviour]) -> None:
        self.script = script
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        owner = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                parsed = _read_request(self.rfile)
                if parsed is None:
                    return
                request = Request(*parsed, arrived=time.monotonic())
                with owner._lock:
                    owner.requests.append(request)
                try:
                    _send(self.connection, owner.script(request))
                    self.connection.shutdown(socket.SHUT_WR)
                    self.connection.settimeout(60)
                    while self.connection.recv(65536):  # until the client hangs up
                        pass
                except OSError:
                    pass
                finally:
                    request.ended = time.monotonic()

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> HostileServer:
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def paths(self) -> list[str]:
        with self._lock:
            return [request.path for request in self.requests]

    def calls(self, path_end: str, settle_seconds: float = 5.0) -> list[Request]:
        """The requests to a path ending in `path_end`, once each has ended (the server notices a client that hung
        up at its next write: waits up to `settle_seconds` for that)."""
        deadline = time.monotonic() + settle_seconds
        while True:
            with self._lock:
                found = [request for request in self.requests if request.path.endswith(path_end)]
            if all(request.ended is not None for request in found) or time.monotonic() > deadline:
                return found
            time.sleep(0.05)


# ---------------------------------------------------------------------------
# Bodies of the protocols
# ---------------------------------------------------------------------------

PROBE_TEXT = "ok"
GOOD_USAGE = {"prompt_tokens": 100, "completion_tokens": 20}


def chat_body(
    text: str | None,
    *,
    usage: Any = None,
    tool_calls: list[dict[str, Any]] | None = None,
    finish_reason: str = "stop",
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-hostile",
        "object": "chat.completion",
        "created": 0,
        "model": "acme-coder-1",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else finish_reason}],
        "usage": GOOD_USAGE if usage is None else usage,
    }


def tool_call(code: str, call_id: str = "call_1") -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "code_interpreter", "arguments": json.dumps({"code": code})},
    }


def models_body(ids: tuple[str, ...]) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": model, "object": "model", "owned_by": "x"} for model in ids]}


@dataclass(frozen=True)
class RequestMessages:
    """The messages of a raw chat request, as the step helpers of tests/support/pipeline_support.py read them."""

    messages: Sequence[Mapping[str, Any]]


@dataclass
class HostileEndpoint:
    """A script for `HostileServer`: `GET /v1/models` lists `models`; the preflight's probes get `probe` (a well-
    formed "ok" by default); each step's request gets `replies[step_id]` (a Behaviour, or a function of the
    request's conversation giving one), else the step's reference code. Counts every step request in `asked`."""

    steps: Mapping[str, Step]
    replies: Mapping[str, Behaviour | Callable[[list[dict[str, Any]]], Behaviour]] = field(default_factory=dict)
    models: tuple[str, ...] = ("acme-coder-1",)
    probe: Behaviour = field(default_factory=lambda: Json(chat_body(PROBE_TEXT)))
    asked: list[str] = field(default_factory=list)

    def __call__(self, request: Request) -> Behaviour:
        if request.method == "GET" and request.path.endswith("/models"):
            return Json(models_body(self.models))
        messages = request.json()["messages"]
        conversation = RequestMessages(messages)
        if is_preflight_probe(conversation):
            return self.probe
        step_id = step_asked(conversation, self.steps)
        self.asked.append(step_id)
        reply = self.replies.get(step_id)
        if callable(reply):
            return reply(messages)
        if reply is not None:
            return reply
        code = self.steps[step_id].ground_truth_code or ""
        return Json(chat_body(f"```python\n{code}\n```"))


def run_code_body(stdout: Any = "", stderr: Any = "", status: Any = "Finished", return_code: Any = 0) -> dict[str, Any]:
    return {
        "status": "Success",
        "message": "",
        "compile_result": None,
        "run_result": {
            "status": status,
            "execution_time": 0.01,
            "return_code": return_code,
            "stdout": stdout,
            "stderr": stderr,
        },
    }


def responses_body(text: str | None, *, usage: Any = None, calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    if text is not None:
        output.append(
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        )
    output += calls or []
    return {
        "id": "resp_hostile",
        "object": "response",
        "created_at": 0,
        "status": "completed",
        "model": "acme-coder-1",
        "output": output,
        "usage": {"input_tokens": 100, "output_tokens": 20} if usage is None else usage,
    }


# ---------------------------------------------------------------------------
# The doit process's peak memory
# ---------------------------------------------------------------------------

# Runs doit's command line in this interpreter and, at exit, writes its own peak resident set size (kB, from
# getrusage: the doit process alone, not the test processes it starts) to the file named by its first argument.
_PEAK_MEMORY_PROBE = (
    "import atexit, resource, runpy, sys\n"
    "target = sys.argv.pop(1)\n"
    "def write_peak():\n"
    "    with open(target, 'w', encoding='utf-8') as handle:\n"
    "        handle.write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))\n"
    "atexit.register(write_peak)\n"
    "sys.argv = ['doit', *sys.argv[1:]]\n"
    "runpy.run_module('doit', run_name='__main__')\n"
)


def run_doit_measuring_memory(
    workdir: Path, *args: str, api_key: str | None = None, timeout: float = 600
) -> tuple[subprocess.CompletedProcess[str], int]:
    """Run doit in a fresh interpreter in `workdir`; its result and the doit process's peak RSS in kB."""
    record = workdir / "peak_rss_kb.txt"
    record.unlink(missing_ok=True)
    command = [sys.executable, "-c", _PEAK_MEMORY_PROBE, str(record), *doit_command(workdir, *args)[3:]]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, cwd=workdir, env=doit_environment(api_key)
    )
    assert record.is_file(), f"the probe wrote no peak memory\n{result.stderr}"
    return result, int(record.read_text(encoding="utf-8"))
