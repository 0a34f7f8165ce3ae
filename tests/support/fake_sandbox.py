"""A SandboxFusion-compatible /run_code service on 127.0.0.1 for tests: it answers from a script."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeSandbox:
    """A /run_code service answering from a script of (HTTP status, JSON body) pairs; the last one repeats."""

    def __init__(self, script: list[tuple[int, dict]]) -> None:
        self.script = script
        self.received: list[dict] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                return

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.received.append({"path": self.path, **body})
                status, reply = fake.script[min(len(fake.received), len(fake.script)) - 1]
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> FakeSandbox:
        self.thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def run_result(status: str = "Finished", stdout: str = "", stderr: str = "", return_code: int = 0) -> dict:
    return {
        "status": "Success" if status == "Finished" and return_code == 0 else "Failed",
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
