"""ModelClient: the real `openai` client against the local scripted ModelServer."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from pathlib import Path

import pytest
from scripted import InFlightCounter, Script

from stages.config import load_settings
from stages.generate import client as client_module
from stages.generate.client import (
    BACKOFF_CAP_SECONDS,
    RETRY_AFTER_CAP_SECONDS,
    ModelCallError,
    ModelClient,
    backoff_seconds,
    retry_after_seconds,
)
from stages.generate.server import ErrorReply, ModelReply, ModelServer, RawReply, StallReply, ToolCallSpec

TOOLS_CHAT = [
    {
        "type": "function",
        "function": {
            "name": "code_interpreter",
            "description": "run",
            "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
        },
    }
]
TOOLS_RESPONSES = [
    {
        "type": "function",
        "name": "code_interpreter",
        "description": "run",
        "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
    }
]
PROMPT = [{"role": "user", "content": "write f"}]


@pytest.fixture()
def sleeps(monkeypatch) -> list[float]:
    recorded: list[float] = []
    monkeypatch.setattr(client_module, "sleep", recorded.append)
    return recorded


def make_settings(tmp_path: Path, server: ModelServer, **overrides):
    values = {"model": "test-model", "base_url": server.base_url, "max_retries": "3", "request_timeout_seconds": "5"}
    values.update({name: str(value) if not isinstance(value, str) else value for name, value in overrides.items()})
    return load_settings(values, cwd=tmp_path)


def test_chat_answer_with_tool_calls_usage_and_params(tmp_path, sleeps):
    reply = ModelReply(
        text="thinking",
        tool_calls=(
            ToolCallSpec("c1", "code_interpreter", '{"code": "1"}'),
            ToolCallSpec("c2", "code_interpreter", '{"code": "2"}'),
        ),
        prompt_tokens=11,
        completion_tokens=7,
    )
    with ModelServer(Script(reply)) as server:
        settings = make_settings(tmp_path, server, model_params='{"temperature": 0.2, "max_tokens": 300, "seed": 7}')
        response = ModelClient(settings).complete(PROMPT, tools=TOOLS_CHAT, step_id="1.1")
    assert response.text == "thinking"
    assert [(c.id, c.arguments) for c in response.tool_calls] == [("c1", '{"code": "1"}'), ("c2", '{"code": "2"}')]
    assert response.finish_reason == "tool_calls"
    assert response.call.usage.to_record() == {"input_tokens": 11, "output_tokens": 7, "total_tokens": 18}
    assert response.call.response_id.startswith("chatcmpl-") and response.call.retries == ()
    request = server.requests[0]
    assert request.protocol == "openai-chat" and request.model == "test-model"
    assert request.params["temperature"] == 0.2 and request.params["max_tokens"] == 300 and request.params["seed"] == 7
    assert request.tools == ("code_interpreter",)
    assert "x-scicode-step" not in request.headers  # real models never see the step header
    assert sleeps == []


def test_chat_conversation_with_tool_results_round_trips(tmp_path):
    with ModelServer(Script(ModelReply(text="```python\ndef f(): pass\n```"))) as server:
        settings = make_settings(tmp_path, server)
        messages = PROMPT + [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "code_interpreter", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "out"},
        ]
        response = ModelClient(settings).complete(messages, tools=None, step_id="1.1")
    assert response.finish_reason == "stop" and response.tool_calls == ()
    sent = server.requests[0]
    assert sent.tools == ()
    assert sent.messages[1]["tool_calls"] == [{"id": "c1", "name": "code_interpreter", "arguments": "{}"}]
    assert sent.messages[2] == {"role": "tool", "content": "out", "tool_call_id": "c1"}


def test_responses_protocol_items_and_function_call_outputs(tmp_path):
    first = ModelReply(
        text=None,
        tool_calls=(ToolCallSpec("call_a", "code_interpreter", '{"code": "x"}'),),
        prompt_tokens=5,
        completion_tokens=3,
    )
    second = ModelReply(text="done", finish_reason="length", prompt_tokens=9, completion_tokens=2)
    with ModelServer(Script(first, second)) as server:
        settings = make_settings(
            tmp_path,
            server,
            api_protocol="openai-responses",
            model_params='{"max_output_tokens": 64, "reasoning": {"effort": "low"}}',
        )
        model = ModelClient(settings)
        one = model.complete(PROMPT, tools=TOOLS_RESPONSES, step_id="1.1")
        assert one.text is None and one.finish_reason == "tool_calls"
        assert [c.id for c in one.tool_calls] == ["call_a"]
        assert one.call.response_id.startswith("resp_") and one.call.usage.input_tokens == 5
        conversation = PROMPT + [
            one.assistant_message(),
            {"role": "tool", "tool_call_id": "call_a", "content": "printed"},
        ]
        two = model.complete(conversation, tools=TOOLS_RESPONSES, step_id="1.1")
    assert two.text == "done" and two.finish_reason == "length"
    first_request, second_request = server.requests
    assert first_request.protocol == "openai-responses"
    assert first_request.params["max_output_tokens"] == 64 and first_request.params["reasoning"] == {"effort": "low"}
    assert second_request.messages[1]["tool_calls"] == [
        {"id": "call_a", "name": "code_interpreter", "arguments": '{"code": "x"}'}
    ]
    assert second_request.messages[2] == {"role": "tool", "content": "printed", "tool_call_id": "call_a"}


def test_429_is_retried_honouring_retry_after(tmp_path, sleeps):
    with ModelServer(Script(ErrorReply(429, "slow down", {"Retry-After": "7"}), ModelReply(text="ok"))) as server:
        response = ModelClient(make_settings(tmp_path, server)).complete(PROMPT, tools=None, step_id="1.1")
    assert response.text == "ok"
    assert sleeps == [7.0]
    assert len(response.call.retries) == 1
    assert "HTTP 429" in response.call.retries[0].error and response.call.retries[0].delay_s == 7.0
    assert response.call.to_record()["retries"] == 1
    assert len(server.requests) == 2


def test_retry_after_http_date_ms_and_cap():
    now = datetime(2025, 1, 1, tzinfo=timezone.utc)
    assert retry_after_seconds(
        {"Retry-After": format_datetime(now + timedelta(seconds=30), usegmt=True)}, now
    ) == pytest.approx(30)
    assert retry_after_seconds({"retry-after-ms": "1500", "retry-after": "9"}, now) == 1.5
    assert retry_after_seconds({"Retry-After": "100000"}, now) == RETRY_AFTER_CAP_SECONDS
    assert retry_after_seconds({"Retry-After": format_datetime(now - timedelta(seconds=5), usegmt=True)}, now) == 0.0
    assert retry_after_seconds({"Retry-After": "soon"}, now) is None
    assert retry_after_seconds({}, now) is None


def test_backoff_is_exponential_with_full_jitter(monkeypatch):
    monkeypatch.setattr(client_module, "jitter", lambda low, high: high)
    assert [backoff_seconds(n, None) for n in range(4)] == [1.0, 2.0, 4.0, 8.0]
    assert backoff_seconds(30, None) == BACKOFF_CAP_SECONDS
    monkeypatch.setattr(client_module, "jitter", lambda low, high: low)
    assert backoff_seconds(3, None) == 0.0
    assert backoff_seconds(3, 2.5) == 2.5


def test_5xx_exhausts_retries_then_raises(tmp_path, sleeps):
    with ModelServer(Script(ErrorReply(503, "overloaded"))) as server:
        with pytest.raises(ModelCallError) as caught:
            ModelClient(make_settings(tmp_path, server, max_retries=2)).complete(PROMPT, tools=None, step_id="1.1")
    error = caught.value
    assert error.transient and error.status == 503 and not error.model_level
    assert "gave up after 3 attempts" in str(error) and "HTTP 503" in str(error) and "overloaded" in str(error)
    assert len(error.retries) == 2 and len(sleeps) == 2 and len(server.requests) == 3


@pytest.mark.parametrize("status,model_level", [(400, False), (401, True), (403, True), (404, True), (422, False)])
def test_permanent_errors_raise_at_once(tmp_path, sleeps, status, model_level):
    with ModelServer(Script(ErrorReply(status, f"bad thing {status}", code="model_not_found"))) as server:
        with pytest.raises(ModelCallError, match=f"HTTP {status} from http://127.0.0.1:.*bad thing {status}") as caught:
            ModelClient(make_settings(tmp_path, server)).complete(PROMPT, tools=None, step_id="1.1")
    assert not caught.value.transient and caught.value.model_level is model_level
    assert len(server.requests) == 1 and sleeps == []


@pytest.mark.parametrize("status", [408, 409, 500, 502])
def test_other_transient_statuses_are_retried(tmp_path, sleeps, status):
    with ModelServer(Script(ErrorReply(status), ModelReply(text="fine"))) as server:
        response = ModelClient(make_settings(tmp_path, server)).complete(PROMPT, tools=None, step_id="1.1")
    assert response.text == "fine" and len(sleeps) == 1


def test_client_timeout_is_transient(tmp_path, sleeps):
    with ModelServer(Script(StallReply(1.5, ModelReply(text="late")), ModelReply(text="fast"))) as server:
        settings = make_settings(tmp_path, server, request_timeout_seconds=0.3)
        started = time.monotonic()
        response = ModelClient(settings).complete(PROMPT, tools=None, step_id="1.1")
    assert response.text == "fast"
    assert "timed out after 0.3 s" in response.call.retries[0].error
    assert time.monotonic() - started < 1.5


def test_timeouts_every_time_end_in_an_error(tmp_path, sleeps):
    with ModelServer(Script(StallReply(1.0, ModelReply(text="late")))) as server:
        settings = make_settings(tmp_path, server, request_timeout_seconds=0.2, max_retries=1)
        with pytest.raises(ModelCallError, match="gave up after 2 attempts: request to .* timed out"):
            ModelClient(settings).complete(PROMPT, tools=None, step_id="1.1")


@pytest.mark.parametrize("protocol", ["openai-chat", "openai-responses"])
def test_malformed_bodies_are_retried_then_fail(tmp_path, sleeps, protocol):
    malformed = [
        RawReply(200, b"not json"),
        RawReply(200, b'{"id": "x"}'),
        RawReply(200, b"<html>proxy</html>", "text/html"),
    ]
    with ModelServer(Script(*malformed, ModelReply(text="finally"))) as server:
        response = ModelClient(make_settings(tmp_path, server, api_protocol=protocol)).complete(
            PROMPT, tools=None, step_id="1.1"
        )
    assert response.text == "finally"
    assert len(response.call.retries) == 3
    assert all("malformed response" in retry.error for retry in response.call.retries)
    with ModelServer(Script(RawReply(200, b'{"id": "x"}'))) as server:
        with pytest.raises(ModelCallError, match="gave up after 4 attempts: malformed response"):
            ModelClient(make_settings(tmp_path, server, api_protocol=protocol)).complete(
                PROMPT, tools=None, step_id="1.1"
            )


def test_connection_refused_is_transient(tmp_path, sleeps):
    server = ModelServer(Script(ModelReply(text="x"))).start()
    settings = make_settings(tmp_path, server, max_retries=1)
    server.stop()
    with pytest.raises(ModelCallError, match="gave up after 2 attempts: cannot reach http://127.0.0.1"):
        ModelClient(settings).complete(PROMPT, tools=None, step_id="1.1")


def test_at_most_concurrency_calls_in_flight(tmp_path):
    responder = InFlightCounter(lambda request: ModelReply(text="ok"), hold_seconds=0.15)
    with ModelServer(responder) as server:
        settings = make_settings(tmp_path, server, concurrency=2)
        model = ModelClient(settings)
        threads = [
            threading.Thread(target=model.complete, args=(PROMPT,), kwargs={"tools": None, "step_id": "1.1"})
            for _ in range(6)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert len(server.requests) == 6
    assert responder.peak == 2


def test_missing_api_key_for_the_default_endpoint_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("SCICODE_TEST_NO_KEY", raising=False)
    settings = load_settings({"model": "gpt-x", "api_key_env": "SCICODE_TEST_NO_KEY"}, cwd=tmp_path)
    with pytest.raises(ModelCallError, match="set the environment variable SCICODE_TEST_NO_KEY"):
        ModelClient(settings)


def test_api_key_from_the_named_environment_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("SCICODE_TEST_KEY", "sk-test-123")
    with ModelServer(Script(ModelReply(text="ok"))) as server:
        settings = make_settings(tmp_path, server, api_key_env="SCICODE_TEST_KEY")
        ModelClient(settings).complete(PROMPT, tools=None, step_id="1.1")
    assert server.requests[0].headers["authorization"] == "Bearer sk-test-123"
