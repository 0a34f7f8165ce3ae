"""The endpoint preflight's help for local servers, and its advice when a server refuses the run's tool_choice:
`check_endpoint` against real HTTP servers on 127.0.0.1 (stages.generate.server.ModelServer), replies scripted as
llama.cpp and llama-cpp-python answer (and as a hostile server might)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from stages.config.settings import Settings, load_settings
from stages.exit_codes import TOOLS_REFUSED
from stages.generate.server import ErrorReply, ModelReply, ModelRequest, ModelServer, Reply
from stages.preflight.endpoint import EndpointCheckFailed, check_endpoint
from stages.preflight.local_server import is_local_server, served_at_once_from_walls

MODEL = "local-model"
PROBE_ANSWER = ModelReply(text="ok", prompt_tokens=8, completion_tokens=1)
SERVICE_SECONDS = 0.4  # one probe's time in a scripted server that serves one request at a time


def answer(request: ModelRequest) -> Reply:
    return PROBE_ANSWER


def settings_for(server: ModelServer, tmp_path: Path, **values: str) -> Settings:
    given = {"model": MODEL, "base_url": server.base_url, "mode": "naive", "max_tokens": "256", **values}
    return load_settings({**given, "code_workdir": str(tmp_path / "interpreter")}, cwd=tmp_path)


def notes(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("note: ")]


@pytest.mark.parametrize(
    ("base_url", "local"),
    [
        ("http://127.0.0.1:8080/v1", True),
        ("http://localhost:11434/v1", True),
        ("http://[::1]:8000/v1", True),
        ("http://192.168.1.20:8000/v1", True),
        ("http://10.0.0.7/v1", True),
        ("http://169.254.3.4/v1", True),
        ("https://api.example.com/v1", False),
        ("http://8.8.8.8/v1", False),
        ("", False),  # the default (OpenAI) endpoint
        ("http://[bad/v1", False),
    ],
)
def test_which_endpoints_are_local_servers(base_url: str, local: bool) -> None:
    assert is_local_server(base_url) is local


def test_max_tokens_unset_on_a_local_server_is_one_note(tmp_path: Path) -> None:
    with ModelServer(answer, models=(MODEL,)) as server:
        unset = check_endpoint(settings_for(server, tmp_path, max_tokens="", concurrency="1"))
        capped = check_endpoint(settings_for(server, tmp_path, concurrency="1"))
    assert len(notes(unset)) == 1, unset
    assert "max_tokens is unset" in unset[1] and "set max_tokens=" in unset[1] and "\n" not in unset[1]
    assert notes(capped) == [], capped


@pytest.mark.parametrize(
    ("pages", "said"),
    [
        ({"/props": {"total_slots": 1, "default_generation_settings": {}}}, "1 request(s) at once (GET /props)"),
        ({"/slots": [{"id": 0}, {"id": 1}]}, "2 request(s) at once (GET /slots)"),
        ({"/props": {"total_slots": "many"}, "/slots": [{"id": 0}]}, "1 request(s) at once (GET /slots)"),
    ],
)
def test_a_server_that_says_it_serves_fewer_requests_than_concurrency_gets_a_note(
    tmp_path: Path, pages: dict[str, Any], said: str
) -> None:
    with ModelServer(answer, models=(MODEL,), pages=pages) as server:
        lines = check_endpoint(settings_for(server, tmp_path, concurrency="4"))
        probes = len(server.requests)
    (note,) = notes(lines)
    assert said in note and "concurrency=4" in note and "set concurrency=" in note, note
    assert probes == 1  # the server said it: no request was sent to measure it


@pytest.mark.parametrize(
    "props",
    [
        {"total_slots": -1},
        {"total_slots": 1.5},
        {"total_slots": True},
        {"total_slots": 10**12},
        {"total_slots": None},
        [1, 2, 3],
        {
            "a": [
                [
                    [
                        [
                            [
                                [
                                    [
                                        [
                                            [
                                                [
                                                    [
                                                        [
                                                            [
                                                                [
                                                                    [
                                                                        [
                                                                            [
                                                                                [
                                                                                    [
                                                                                        [
                                                                                            [
                                                                                                [
                                                                                                    [
                                                                                                        [
                                                                                                            [
                                                                                                                [
                                                                                                                    [
                                                                                                                        [
                                                                                                                            [
                                                                                                                                [
                                                                                                                                    [
                                                                                                                                        [
                                                                                                                                            [
                                                                                                                                                [
                                                                                                                                                    [
                                                                                                                                                        [
                                                                                                                                                            [
                                                                                                                                                                [
                                                                                                                                                                    [
                                                                                                                                                                        [
                                                                                                                                                                            [
                                                                                                                                                                                [
                                                                                                                                                                                    [
                                                                                                                                                                                        [
                                                                                                                                                                                            [
                                                                                                                                                                                                [
                                                                                                                                                                                                    [
                                                                                                                                                                                                        [
                                                                                                                                                                                                            [
                                                                                                                                                                                                                [
                                                                                                                                                                                                                    [
                                                                                                                                                                                                                        [
                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                    [
                                                                                                                                                                                                                                        [
                                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                                    [
                                                                                                                                                                                                                                                        [
                                                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                                                    [
                                                                                                                                                                                                                                                                        [
                                                                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                                                                    [
                                                                                                                                                                                                                                                                                        [
                                                                                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                                                                                    []
                                                                                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                ]
                                                                                                                                                                                                            ]
                                                                                                                                                                                                        ]
                                                                                                                                                                                                    ]
                                                                                                                                                                                                ]
                                                                                                                                                                                            ]
                                                                                                                                                                                        ]
                                                                                                                                                                                    ]
                                                                                                                                                                                ]
                                                                                                                                                                            ]
                                                                                                                                                                        ]
                                                                                                                                                                    ]
                                                                                                                                                                ]
                                                                                                                                                            ]
                                                                                                                                                        ]
                                                                                                                                                    ]
                                                                                                                                                ]
                                                                                                                                            ]
                                                                                                                                        ]
                                                                                                                                    ]
                                                                                                                                ]
                                                                                                                            ]
                                                                                                                        ]
                                                                                                                    ]
                                                                                                                ]
                                                                                                            ]
                                                                                                        ]
                                                                                                    ]
                                                                                                ]
                                                                                            ]
                                                                                        ]
                                                                                    ]
                                                                                ]
                                                                            ]
                                                                        ]
                                                                    ]
                                                                ]
                                                            ]
                                                        ]
                                                    ]
                                                ]
                                            ]
                                        ]
                                    ]
                                ]
                            ]
                        ]
                    ]
                ]
            ]
        },
    ],
)
def test_what_a_server_says_about_its_slots_is_untrusted(tmp_path: Path, props: Any) -> None:
    """A report that is no count is "not said": the run is measured instead (this server serves in parallel)."""
    parallel = OneAtATime(serial=False)
    with ModelServer(parallel, models=(MODEL,), pages={"/props": props, "/slots": {"slots": 3}}) as server:
        lines = check_endpoint(settings_for(server, tmp_path, concurrency="4"))
    assert notes(lines) == [], lines


class OneAtATime:
    """A server's model that serves one request at a time (as llama-cpp-python does), each taking a while."""

    def __init__(self, serial: bool) -> None:
        self.serial = serial
        self._lock = threading.Lock()

    def __call__(self, request: ModelRequest) -> Reply:
        if self.serial:
            with self._lock:
                time.sleep(SERVICE_SECONDS)
        else:
            time.sleep(SERVICE_SECONDS)
        return PROBE_ANSWER


def test_queueing_seen_in_the_first_calls_gets_a_note(tmp_path: Path) -> None:
    with ModelServer(OneAtATime(serial=True), models=(MODEL,)) as server:
        lines = check_endpoint(settings_for(server, tmp_path, concurrency="16"))
    (note,) = notes(lines)
    assert "serves about 1 request(s) at once" in note and "4 requests sent together took" in note, note
    assert "concurrency=16" in note and "set concurrency=1" in note


def test_a_server_that_serves_requests_together_gets_no_note(tmp_path: Path) -> None:
    with ModelServer(OneAtATime(serial=False), models=(MODEL,)) as server:
        lines = check_endpoint(settings_for(server, tmp_path, concurrency="16"))
    assert notes(lines) == [], lines


def test_served_at_once_from_walls() -> None:
    assert served_at_once_from_walls([1.0, 2.0, 3.0, 4.0]) == 1
    assert served_at_once_from_walls([1.0, 1.0, 2.0, 2.0]) == 2
    assert served_at_once_from_walls([1.0, 1.1, 1.2, 1.3]) is None
    assert served_at_once_from_walls([0.0, 1.0]) is None
    assert served_at_once_from_walls([2.0]) is None
    assert served_at_once_from_walls([0.002, 0.004, 0.009, 0.01]) is None  # jitter between instant answers


def refuses_required(request: ModelRequest) -> Reply:
    """As llama-cpp-python's chatml-function-calling format answers tool_choice=required: HTTP 500, no message."""
    return ErrorReply(500, "") if request.params.get("tool_choice") == "required" else PROBE_ANSWER


def refuses_tools(request: ModelRequest) -> Reply:
    """A server that takes no request with tools (as vLLM without --enable-auto-tool-choice)."""
    return ErrorReply(400, '"auto" tool choice requires --enable-auto-tool-choice') if request.tools else PROBE_ANSWER


def test_a_server_that_serves_tool_calls_is_not_told_to_start_with_tool_calling(tmp_path: Path) -> None:
    with ModelServer(refuses_required, models=(MODEL,)) as server:
        with pytest.raises(EndpointCheckFailed) as refused:
            check_endpoint(settings_for(server, tmp_path, mode="tool_use", tool_choice="required", max_retries="0"))
    line = str(refused.value)
    assert refused.value.exit_code == TOOLS_REFUSED.code
    assert "refuses a request that offers tools with tool_choice=required" in line
    assert "serves tool calls but not that choice" in line and "tool_choice=code_interpreter" in line, line
    assert "chatml-function-calling" not in line and "--jinja" not in line


def test_a_server_that_refuses_tools_is_told_how_to_serve_them(tmp_path: Path) -> None:
    with ModelServer(refuses_tools, models=(MODEL,)) as server:
        with pytest.raises(EndpointCheckFailed) as refused:
            check_endpoint(settings_for(server, tmp_path, mode="tool_use", tool_choice="required", max_retries="0"))
    line = str(refused.value)
    assert "chatml-function-calling" in line and "mode=naive" in line, line
    assert "serves tool calls" not in line
