"""A real HTTP server on 127.0.0.1 in a thread, for the download tests: a subclass answers each GET."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LoopbackServer:
    """Serves GET requests on a free port of 127.0.0.1 until `close`; `answer` is called with each request."""

    def __init__(self) -> None:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def answer(self, request: BaseHTTPRequestHandler) -> None:
        raise NotImplementedError(f"{type(self).__name__} answers no request")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server API)
                server.answer(self)

            def log_message(self, *args: object) -> None:
                return None

        return Handler
