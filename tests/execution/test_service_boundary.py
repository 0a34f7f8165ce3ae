"""The reply boundary (stages/execution/service_replies.py) against hostile stand-in services on 127.0.0.1, through the real
code paths: the model client (the real `openai` client, both protocols) and the sandbox client.

Whatever a service sends (huge, trickled, cut short, not JSON, of the wrong types, with escape sequences or lone
surrogates, with negative or non-numeric usage) ends as an outcome of that call within its bound: a reply is read
up to its cap, a call ends by its deadline, any JSON is an answer or a named error.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from stages.config.settings import Settings, load_settings
from stages.execution.service_replies import (
    ENDPOINT_REPLY_BYTES,
    REPLY_DEPTH_LIMIT,
    SANDBOX_REPLY_BYTES,
    ReplyRefused,
    UnreadableReply,
    bounded_client,
    reply_json,
    whole_count,
)
from stages.generate import client as client_module
from stages.generate.client import ModelCallError, ModelClient
from stages.generate.tools import run_in_sandbox, run_tool
from stages.storage.json_values import JSONObject
from tests.support.hostile_services import (
    Behaviour,
    Cut,
    Huge,
    Json,
    Raw,
    RawJson,
    Trickle,
    chat_body,
    responses_body,
    run_code_body,
)
from tests.support.hostile_services import HostileServer as Server

SLACK_SECONDS = 2.0  # a call may end this much after its deadline (a shared, busy machine)
DEADLINE_SECONDS = 1.5
PROMPT: list[JSONObject] = [{"role": "user", "content": "write f"}]
PROTOCOLS = ("openai-chat", "openai-responses")
ESCAPES = "\x1b]0;owned\x07\x1b[2K\rpreflight: endpoint ok"


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_module, "sleep", lambda seconds: None)


def settings_for(tmp_path: Path, server: Server, protocol: str = "openai-chat", **overrides: str) -> Settings:
    values = {
        "model": "acme-coder-1",
        "base_url": f"{server.url}/v1",
        "api_protocol": protocol,
        "max_retries": "1",
        "request_timeout_seconds": str(DEADLINE_SECONDS),
        **overrides,
    }
    return load_settings(values, cwd=tmp_path)


def answer_body(
    protocol: str, text: str | None = "```python\ndef f():\n    return 1\n```", usage: object = None
) -> dict:
    if protocol == "openai-chat":
        return chat_body(text, usage=usage)
    return responses_body(text, usage=usage)


def ask(settings: Settings) -> client_module.ModelResponse:
    with ModelClient(settings) as model:
        return model.complete(PROMPT, tools=None, step_id="1.1")


# ---------------------------------------------------------------------------
# Bytes and time
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("announced", [False, True], ids=["chunked", "announced"])
def test_a_huge_reply_is_refused_at_the_cap_and_not_asked_again(tmp_path: Path, protocol: str, announced: bool) -> None:
    with Server(lambda request: Huge(64 * ENDPOINT_REPLY_BYTES, announced=announced)) as server:
        started = time.monotonic()
        with pytest.raises(ModelCallError) as caught:
            ask(settings_for(tmp_path, server, protocol))
        elapsed = time.monotonic() - started
        assert len(server.requests) == 1  # a paid reply too large to read is not bought twice
    assert caught.value.kind == "reply_refused"
    assert "8.0 MiB" in caught.value.message and elapsed < DEADLINE_SECONDS + SLACK_SECONDS


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("part", ["body", "headers"])
def test_a_trickled_reply_ends_at_the_deadline_of_the_call(tmp_path: Path, protocol: str, part: str) -> None:
    body = json.dumps(answer_body(protocol)).encode()
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    behaviour = Trickle(head + body, every=0.2, whole=True) if part == "headers" else Trickle(body, every=0.2)
    with Server(lambda request: behaviour) as server:
        with pytest.raises(ModelCallError) as caught:
            ask(settings_for(tmp_path, server, protocol))
        calls = server.calls("/chat/completions" if protocol == "openai-chat" else "/responses")
    assert caught.value.kind == "transient" and "timed out after 1.5 s" in caught.value.message
    assert len(calls) == 2  # max_retries=1
    for call in calls:
        assert DEADLINE_SECONDS - 0.1 < call.duration < DEADLINE_SECONDS + SLACK_SECONDS, call.duration


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_reply_cut_short_is_a_transient_failure(tmp_path: Path, protocol: str) -> None:
    body = json.dumps(answer_body(protocol)).encode()
    with Server(lambda request: Cut(body, keep=len(body) // 2)) as server:
        with pytest.raises(ModelCallError) as caught:
            ask(settings_for(tmp_path, server, protocol))
        assert len(server.requests) == 2
    assert caught.value.kind == "transient" and "gave up after 2 attempts" in caught.value.message


def test_a_compressed_reply_is_refused(tmp_path: Path) -> None:
    headers = (("Content-Type", "application/json"), ("Content-Encoding", "gzip"))
    with Server(lambda request: Raw(b"\x1f\x8b" + b"\0" * 100, headers=headers)) as server:
        with pytest.raises(ModelCallError) as caught:
            ask(settings_for(tmp_path, server))
        request = server.requests[0]
    assert request.headers["accept-encoding"] == "identity"
    assert caught.value.kind == "reply_refused" and "compressed (gzip)" in caught.value.message


def test_the_boundary_alone_bounds_any_client_of_it() -> None:
    """The httpx2 client of the boundary, as the sandbox client uses it."""
    with Server(lambda request: Huge(10 * SANDBOX_REPLY_BYTES)) as server:
        with pytest.raises(ReplyRefused):
            bounded_client(SANDBOX_REPLY_BYTES).get(server.url, timeout=5)
    with Server(lambda request: Trickle(b"x" * 100, every=0.1)) as server:
        started = time.monotonic()
        with pytest.raises(Exception, match="timed out|deadline"):
            bounded_client(SANDBOX_REPLY_BYTES).get(server.url, timeout=1.0)
        assert time.monotonic() - started < 1.0 + SLACK_SECONDS


# ---------------------------------------------------------------------------
# Shapes, types and text
# ---------------------------------------------------------------------------

DEEP = "[" * (REPLY_DEPTH_LIMIT + 1) + "]" * (REPLY_DEPTH_LIMIT + 1)
MALFORMED = {
    "not json": b"{not json",
    "too deep": f'{{"choices": {DEEP}}}'.encode(),
    "deeper than the parser": b"[" * 200_000,
    "invalid utf-8": b'{"choices": "\xff\xfe"}',
    "a list": b"[1, 2]",
    "huge integer": b'{"choices": ' + b"9" * 5000 + b"}",
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("body", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_body_is_a_named_transient_failure(tmp_path: Path, protocol: str, body: bytes) -> None:
    with Server(lambda request: Raw(body)) as server:
        with pytest.raises(ModelCallError) as caught:
            ask(settings_for(tmp_path, server, protocol))
        assert len(server.requests) == 2
    assert caught.value.kind == "transient" and "malformed response" in caught.value.message


WRONG_TYPES_CHAT = {
    "id": [],
    "choices": [{"message": {"content": 123, "tool_calls": "nope", "reasoning_content": {}}, "finish_reason": 5}],
    "usage": "lots",
}
WRONG_TYPES_RESPONSES = {
    "id": 7,
    "status": "completed",
    "output": [
        {"type": "message", "content": "text"},
        {"type": "function_call", "call_id": 1, "name": None, "arguments": {"code": "print(1)"}},
        "item",
        {"type": "reasoning", "summary": [{"text": 5}, "x"]},
    ],
    "usage": {"input_tokens": "12abc", "output_tokens": -5},
}


def test_fields_of_the_wrong_type_read_as_absent(tmp_path: Path) -> None:
    with Server(lambda request: Json(WRONG_TYPES_CHAT)) as server:
        chat = ask(settings_for(tmp_path, server))
    assert (chat.text, chat.tool_calls, chat.finish_reason, chat.call.response_id, chat.reasoning) == (
        None,
        (),
        None,
        None,
        None,
    )
    assert chat.call.usage.unknown_calls == 1
    with Server(lambda request: Json(WRONG_TYPES_RESPONSES)) as server:
        response = ask(settings_for(tmp_path, server, "openai-responses"))
    assert response.text is None and response.call.response_id is None and response.reasoning is None
    [call] = response.tool_calls
    assert (call.id, call.name, call.arguments) == ("", "", '{"code": "print(1)"}')
    assert response.call.usage.to_record() == {
        "input_tokens": 0,
        "output_tokens": 0,
        "total_tokens": 0,
        "unknown_calls": 1,
    }


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_escape_sequences_and_lone_surrogates_arrive_as_valid_text(tmp_path: Path, protocol: str) -> None:
    text = json.dumps(answer_body(protocol, "PLACEHOLDER")).replace(
        "PLACEHOLDER", json.dumps(ESCAPES)[1:-1] + "\\ud800"
    )
    with Server(lambda request: Json(RawJson(text))) as server:
        response = ask(settings_for(tmp_path, server, protocol))
    assert response.text == ESCAPES + "\ufffd"
    response.text.encode("utf-8")  # every later write of it succeeds


BAD_COUNTS = ['"12abc"', "-5", "1e999", "true", "1.5", "null", "[]", "10000000", "NaN"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("count", BAD_COUNTS)
def test_a_usage_count_that_is_not_a_whole_number_is_unknown(tmp_path: Path, protocol: str, count: str) -> None:
    names = ("prompt_tokens", "completion_tokens") if protocol == "openai-chat" else ("input_tokens", "output_tokens")
    usage = f'{{"{names[0]}": {count}, "{names[1]}": 7}}'
    text = json.dumps(answer_body(protocol, usage={"u": 0})).replace('{"u": 0}', usage)
    with Server(lambda request: Json(RawJson(text))) as server:
        response = ask(settings_for(tmp_path, server, protocol))
        assert len(server.requests) == 1  # an answer with a bad count is an answer: never asked again
    assert response.text is not None and response.text.startswith("```python")
    assert response.call.usage.to_record() == {
        "input_tokens": 0,
        "output_tokens": 7,
        "total_tokens": 7,
        "unknown_calls": 1,
    }


def test_the_caps_are_the_stated_figures() -> None:
    from tests.support import hostile_services

    assert ENDPOINT_REPLY_BYTES == hostile_services.ENDPOINT_REPLY_BYTES == 8 * 1024 * 1024
    assert SANDBOX_REPLY_BYTES == hostile_services.SANDBOX_REPLY_BYTES == 2 * 1024 * 1024


def test_whole_counts_and_reply_json_by_hand() -> None:
    assert [whole_count(value, 100) for value in (0, 12, 12.0, 99)] == [0, 12, 12, 99]
    assert [whole_count(value, 100) for value in (-1, 100, 1.5, "3", True, None, float("inf"), float("nan"))] == [
        None
    ] * 8
    assert reply_json(b'{"a": "\\ud800", "b": "caf\xc3\xa9"}') == {"a": "\ufffd", "b": "caf\u00e9"}
    for body in (b"[" * 100_000, DEEP.encode(), b"\xff"):
        with pytest.raises(UnreadableReply):
            reply_json(body)


# ---------------------------------------------------------------------------
# The sandbox client
# ---------------------------------------------------------------------------


def sandbox_settings(tmp_path: Path, server: Server, **overrides: str) -> Settings:
    values = {
        "sandbox_url": server.url,
        "code_timeout_seconds": "1",
        "sandbox_api_timeout_seconds": "1",
        "sandbox_max_retries": "1",
        "sandbox_retry_delay_seconds": "0",
        **overrides,
    }
    return load_settings(values, cwd=tmp_path)


SANDBOX_REPLIES = {
    "huge": (Huge(8 * SANDBOX_REPLY_BYTES, prefix=b'{"run_result": {"stdout": "'), "not read: the reply is larger"),
    "cut short": (Cut(json.dumps(run_code_body("hello")).encode(), keep=20), "cannot reach"),
    "not json": (Raw(b"<html>"), "unreadable reply"),
    "too deep": (Raw(b"[" * 100_000), "unreadable reply"),
    "no run result": (Json({"status": "Success", "run_result": "done"}), "sandbox error"),
}


@pytest.mark.parametrize("behaviour,expected", SANDBOX_REPLIES.values(), ids=SANDBOX_REPLIES.keys())
def test_a_hostile_sandbox_reply_is_a_sandbox_error(tmp_path: Path, behaviour: Behaviour, expected: str) -> None:
    with Server(lambda request: behaviour) as server:
        outcome = run_in_sandbox("print(1)", sandbox_settings(tmp_path, server))
    assert outcome.status == "sandbox_error" and expected in outcome.output, outcome.output


WRONG_SANDBOX_TYPES = {
    "return code false": (run_code_body("1\n", return_code=False), "error", "exited with status unknown"),
    "return code text": (run_code_body("1\n", return_code="0"), "error", "exited with status unknown"),
    "stdout an object": (run_code_body({"x": 1}, stderr=[1]), "ok", "finished with no output"),
    "status a number": (run_code_body("1\n", status=3), "error", "run ended with an unknown status"),
    "escapes": (run_code_body(ESCAPES + "\ud800"), "ok", ESCAPES),
}


@pytest.mark.parametrize("reply,status,expected", WRONG_SANDBOX_TYPES.values(), ids=WRONG_SANDBOX_TYPES.keys())
def test_a_sandbox_reply_of_the_wrong_types_never_states_what_it_did_not(
    tmp_path: Path, reply: dict, status: str, expected: str
) -> None:
    body = json.dumps(reply).replace("\\ud800", "\\ud800")
    with Server(lambda request: Json(RawJson(body))) as server:
        outcome = run_tool("code_interpreter", json.dumps({"code": "print(1)"}), sandbox_settings(tmp_path, server))
    assert outcome.status == status and expected in outcome.output, outcome.output
    outcome.output.encode("utf-8")


def test_a_redirect_is_not_followed_and_says_where_it_points(tmp_path: Path) -> None:
    """Each hop of a redirect would start the call's deadline again: a 3xx is a permanent failure naming its
    target."""
    headers = (("Content-Type", "application/json"), ("Location", "https://elsewhere.example/v1/chat/completions"))
    with Server(lambda request: Raw(b"{}", status=307, headers=headers)) as server:
        with pytest.raises(ModelCallError) as caught:
            ask(settings_for(tmp_path, server))
        assert len(server.requests) == 1
    assert caught.value.kind == "rejected"
    assert "redirects to https://elsewhere.example/v1/chat/completions" in caught.value.message
