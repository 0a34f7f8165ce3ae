"""The one boundary every service reply crosses: the model endpoint's (both protocols, the preflight's requests
included) and a SandboxFusion service's. Nothing about a service is trusted: not the size of what it sends, not
its pace, not the shape, types or values of its JSON, not its text.

- **Bytes.** A reply's body is read up to a cap (`ENDPOINT_REPLY_BYTES`, `SANDBOX_REPLY_BYTES`); a longer one (or
  one that announces more in `Content-Length`) is refused as soon as that is known, and the connection is dropped.
  Replies are asked for uncompressed (`Accept-Encoding: identity`) and a compressed one is refused, so the cap
  bounds what is held in memory, not only what crossed the wire.
- **Time.** The timeout a request is sent with is a deadline for the whole call: connecting, sending, the status
  line and headers, and the body together. Every socket operation waits at most until that deadline (a reply
  trickled a byte at a time ends there, where a per-read timeout would wait forever), and fails as the HTTP
  library's own timeout error, so callers classify it as before. (Resolving the host name is the one step the
  deadline cannot interrupt.)
- **Shape.** `reply_json` turns a body into JSON data or an `UnreadableReply` naming why (not JSON, nested deeper
  than `REPLY_DEPTH_LIMIT`); every string in it is valid UTF-8 (`untrusted.valid_data`). `whole_count` reads a
  count that must be a whole number in [0, limit) and gives None for anything else.

`bounded_client(max_bytes)` is the `httpx2` client (the HTTP package of the `openai` client) that enforces the cap
and the deadline; the model client hands it to `openai.OpenAI`, the sandbox client posts through it. Text from a
reply reaches a reader only through `stages.execution.untrusted.shown`.
"""

from __future__ import annotations

import math
import ssl
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import httpcore2
import httpx2

from stages.execution.untrusted import UntrustedJSONError, parse_json, valid_data

MIB = 1024 * 1024
# A model reply: the largest answer any output cap allows (128k tokens, about 0.5 MB of text, JSON-escaped up to
# six bytes a character) and a long `GET /models` list fit several times over; held whole, it stays tens of MB.
ENDPOINT_REPLY_BYTES = 8 * MIB
# A /run_code reply: each stream passes on its first 80,000 bytes (stages.generate.tools.CAPTURE_BYTES), at most
# six bytes a character once JSON-escaped, so under 1 MB.
SANDBOX_REPLY_BYTES = 2 * MIB
REPLY_DEPTH_LIMIT = 64  # levels of nesting in a reply's JSON (real replies use fewer than ten)
NO_TIMEOUT_DEADLINE_SECONDS = 600.0  # the deadline of a request sent without a timeout (every caller sends one)
IDENTITY = "identity"
CONNECTION_LIMITS = httpx2.Limits(max_connections=1000, max_keepalive_connections=100)  # the openai client's own

_local = threading.local()  # the deadline (time.monotonic) of the call this thread is making, if any


class ReplyRefused(httpx2.TransportError):
    """A reply the boundary does not read on (too large, compressed): the call fails with this reason."""


class UnreadableReply(ValueError):
    """A reply body that is not JSON the caller can use; the message says why, in one line."""


# ---------------------------------------------------------------------------
# The deadline of one call, at every socket operation
# ---------------------------------------------------------------------------


class _Deadline:
    """Sets the calling thread's deadline for the duration of a `with` block (restoring the previous one)."""

    def __init__(self, at: float) -> None:
        self.at = at
        self._previous: float | None = None

    def __enter__(self) -> None:
        self._previous = getattr(_local, "deadline", None)
        _local.deadline = self.at

    def __exit__(self, *exc_info: object) -> None:
        _local.deadline = self._previous


def _wait(timeout: float | None, expired: type[httpcore2.TimeoutException]) -> float | None:
    """How long one socket operation may wait: its own timeout, cut to what is left of the call's deadline;
    `expired` when nothing is left."""
    deadline: float | None = getattr(_local, "deadline", None)
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise expired("the deadline of the call has passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore2.NetworkStream):
    """A connection whose every read, write and TLS handshake ends by the current call's deadline."""

    def __init__(self, inner: httpcore2.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _wait(timeout, httpcore2.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _wait(timeout, httpcore2.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
        return _DeadlineStream(
            self._inner.start_tls(ssl_context, server_hostname, _wait(timeout, httpcore2.ConnectTimeout))
        )

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore2.NetworkBackend):
    """Opens connections within the current call's deadline, as `_DeadlineStream`s."""

    def __init__(self, inner: httpcore2.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.NetworkStream:
        wait = _wait(timeout, httpcore2.ConnectTimeout)
        return _DeadlineStream(self._inner.connect_tcp(host, port, wait, local_address, socket_options))

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore2.NetworkStream:
        wait = _wait(timeout, httpcore2.ConnectTimeout)
        return _DeadlineStream(self._inner.connect_unix_socket(path, wait, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


# ---------------------------------------------------------------------------
# The byte cap, on the body as it is read
# ---------------------------------------------------------------------------


def _size_text(count: int) -> str:
    return f"{count / MIB:.1f} MiB" if count >= MIB else f"{count} bytes"


class _CappedBody(httpx2.SyncByteStream):
    """A reply body read within the call's deadline, refused once it passes `max_bytes`."""

    def __init__(self, inner: httpx2.SyncByteStream, max_bytes: int, deadline: float) -> None:
        self._inner = inner
        self._max_bytes = max_bytes
        self._deadline = deadline

    def __iter__(self) -> Iterator[bytes]:
        chunks = iter(self._inner)
        read = 0
        while True:
            with _Deadline(self._deadline):
                chunk = next(chunks, None)
            if chunk is None:
                return
            read += len(chunk)
            if read > self._max_bytes:
                raise ReplyRefused(f"the reply is larger than {_size_text(self._max_bytes)} (the cap per reply)")
            yield chunk

    def close(self) -> None:
        self._inner.close()


def _declared_length(response: httpx2.Response) -> int | None:
    try:
        return int(response.headers.get("content-length", ""))
    except ValueError:
        return None


def _budget(request: httpx2.Request) -> float:
    """The request's timeout, which this boundary applies to the whole call (the largest of httpx's phases)."""
    timeouts = request.extensions.get("timeout")
    values = [value for value in (timeouts or {}).values() if isinstance(value, (int, float)) and value > 0]
    return max(values) if values else NO_TIMEOUT_DEADLINE_SECONDS


class BoundedTransport(httpx2.BaseTransport):
    """httpx2's own transport, with every connection under the call's deadline and every body under the cap."""

    def __init__(self, max_bytes: int, **transport_options: Any) -> None:
        self._max_bytes = max_bytes
        self._inner = httpx2.HTTPTransport(**transport_options)
        pool = getattr(self._inner, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if backend is None:  # another httpx2 layout: refuse to run unbounded rather than quietly do so
            raise RuntimeError(
                "httpx2's connection pool has no network backend to bound: update stages.execution.service_replies"
            )
        pool._network_backend = _DeadlineBackend(backend)  # type: ignore[union-attr]

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        deadline = time.monotonic() + _budget(request)
        request.headers["Accept-Encoding"] = IDENTITY
        with _Deadline(deadline):
            response = self._inner.handle_request(request)
        encoding = response.headers.get("content-encoding", IDENTITY).strip().lower()
        declared = _declared_length(response)
        refusal = None
        if encoding not in ("", IDENTITY):
            refusal = f"the reply is compressed ({encoding}) although an uncompressed one was asked for"
        elif declared is not None and declared > self._max_bytes:
            refusal = f"the reply announces {_size_text(declared)}, more than the {_size_text(self._max_bytes)} cap"
        if refusal is not None:
            response.close()
            raise ReplyRefused(refusal)
        assert isinstance(response.stream, httpx2.SyncByteStream)
        return httpx2.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_CappedBody(response.stream, self._max_bytes, deadline),
            extensions=response.extensions,
        )

    def close(self) -> None:
        self._inner.close()


class BoundedClient(httpx2.Client):
    """An httpx2 client whose direct and proxy transports (proxies from the environment included) are bounded."""

    def __init__(self, max_bytes: int, **client_options: Any) -> None:
        self._max_bytes = max_bytes
        super().__init__(**client_options)

    def _init_transport(
        self,
        verify: ssl.SSLContext | str | bool = True,
        cert: Any = None,
        trust_env: bool = True,
        http1: bool = True,
        http2: bool = False,
        limits: httpx2.Limits = CONNECTION_LIMITS,
        transport: httpx2.BaseTransport | None = None,
    ) -> httpx2.BaseTransport:
        if transport is not None:
            return transport
        return BoundedTransport(
            self._max_bytes, verify=verify, cert=cert, trust_env=trust_env, http1=http1, http2=http2, limits=limits
        )

    def _init_proxy_transport(
        self,
        proxy: httpx2.Proxy,
        verify: ssl.SSLContext | str | bool = True,
        cert: Any = None,
        trust_env: bool = True,
        http1: bool = True,
        http2: bool = False,
        limits: httpx2.Limits = CONNECTION_LIMITS,
    ) -> httpx2.BaseTransport:
        return BoundedTransport(
            self._max_bytes,
            verify=verify,
            cert=cert,
            trust_env=trust_env,
            http1=http1,
            http2=http2,
            limits=limits,
            proxy=proxy,
        )


def bounded_client(max_bytes: int, **client_options: Any) -> BoundedClient:
    """An httpx2 client under this module's bounds: bodies of at most `max_bytes`, each request's timeout a
    deadline for the whole call."""
    return BoundedClient(max_bytes, **{"limits": CONNECTION_LIMITS, **client_options})


def refusal_in(error: BaseException) -> ReplyRefused | None:
    """The `ReplyRefused` behind `error` (the openai client wraps transport errors), if any."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, ReplyRefused):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


# ---------------------------------------------------------------------------
# Total reading of what a reply holds
# ---------------------------------------------------------------------------


def _depth_exceeds(value: Any, limit: int) -> bool:
    """Whether `value` nests containers deeper than `limit` levels (iterative: any depth is safe to ask)."""
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        pending.extend((child, depth + 1) for child in children)
    return False


def reply_text(body: bytes) -> str:
    """A body as text: UTF-8, any invalid byte as U+FFFD."""
    return body.decode("utf-8", errors="replace")


def reply_json(body: bytes | str) -> Any:
    """The JSON data of a reply body (raw control characters inside strings accepted), every string valid UTF-8;
    UnreadableReply with a one-line reason when it is not JSON or nests deeper than REPLY_DEPTH_LIMIT."""
    text = reply_text(body) if isinstance(body, bytes) else body
    try:
        data = parse_json(text, max(len(text), 1), strict=False)
    except UntrustedJSONError as error:
        raise UnreadableReply(f"the body is not JSON: {error}") from None
    if _depth_exceeds(data, REPLY_DEPTH_LIMIT):
        raise UnreadableReply(f"the body nests deeper than {REPLY_DEPTH_LIMIT} levels")
    return valid_data(data)


def whole_count(value: Any, limit: int) -> int | None:
    """`value` as a count: a whole number (an int, or a float with no fraction) in [0, limit); None otherwise
    (text, a negative or fractional number, infinity, NaN, a boolean, null)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        return None
    return int(value) if 0 <= value < limit else None
