"""ModelClient: the real `openai` client against the local scripted ModelServer."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from pathlib import Path

import pytest

from stages.config.settings import load_settings
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
from stages.storage.json_values import JSONObject
from tests.generate.scripted import FakeTime, InFlightCounter, Script
from tests.support.run_artifacts import json_number

TOOLS_CHAT: list[JSONObject] = [
    {
        "type": "function",
        "function": {
            "name": "code_interpreter",
            "description": "run",
            "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
        },
    }
]
TOOLS_RESPONSES: list[JSONObject] = [
    {
        "type": "function",
        "name": "code_interpreter",
        "description": "run",
        "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
    }
]
PROMPT: list[JSONObject] = [{"role": "user", "content": "write f"}]


@pytest.fixture()
def sleeps(monkeypatch) -> list[float]:
    return FakeTime().install(monkeypatch).sleeps


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
    assert response.call.response_id is not None
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
        messages: list[JSONObject] = [
            *PROMPT,
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
        assert one.call.response_id is not None
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
    with ModelServer(Script(ErrorReply(502, "bad gateway"))) as server:
        with pytest.raises(ModelCallError) as caught:
            ModelClient(make_settings(tmp_path, server, max_retries=2)).complete(PROMPT, tools=None, step_id="1.1")
    error = caught.value
    assert error.transient and error.status == 502 and not error.model_level
    assert "gave up after 3 attempts" in str(error) and "HTTP 502" in str(error) and "bad gateway" in str(error)
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


def test_connection_refused_waits_server_wait_seconds_then_fails(tmp_path, sleeps):
    server = ModelServer(Script(ModelReply(text="x"))).start()
    settings = make_settings(tmp_path, server, max_retries=1, server_wait_seconds=60)
    server.stop()
    with pytest.raises(ModelCallError, match="the server was unavailable for 60 s .server_wait_seconds.: cannot reach"):
        ModelClient(settings).complete(PROMPT, tools=None, step_id="1.1")
    assert sum(sleeps) == pytest.approx(60) and max(sleeps) <= client_module.UNAVAILABLE_POLL_CAP_SECONDS
    assert len(sleeps) > 2  # not bounded by max_retries=1: by the time the server is given to come back
    started = len(sleeps)
    with pytest.raises(ModelCallError, match="cannot reach"):  # the same outage: no second wait
        ModelClient(settings).complete(PROMPT, tools=None, step_id="1.2")
    assert len(sleeps) == started


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


# ---------------------------------------------------------------------------
# Interoperable requests (issue: real model servers)
# ---------------------------------------------------------------------------


def strict_server(request):
    """As llama-cpp-python validates requests: an assistant turn's content must be a string, even with tool calls."""
    for index, message in enumerate(request.messages):
        if message["role"] == "assistant" and message["content"] is None:
            refusals = "".join(
                f"  {{'type': 'literal_error', 'loc': ('body', 'messages', {index}, 'ChatCompletionRequest{role}"
                f"Message', 'role'), 'msg': \"Input should be '{role.lower()}'\", 'input': 'assistant'}}\n"
                for role in ("System", "User", "Tool", "Function", "Developer")
            )
            last = (
                f"  {{'type': 'string_type', 'loc': ('body', 'messages', {index}, "
                "'ChatCompletionRequestAssistantMessage', 'content'), 'msg': 'Input should be a valid string'}"
            )
            return ErrorReply(500, "7 validation errors:\n" + refusals + last, code=None)
    return ModelReply(text="```python\ndef f(): pass\n```")


TOOL_TURN: JSONObject = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "code_interpreter", "arguments": "{}"}}],
}


def test_an_assistant_turn_with_tool_calls_is_sent_with_empty_content(tmp_path, sleeps):
    with ModelServer(strict_server) as server:
        messages: list[JSONObject] = [
            *PROMPT,
            TOOL_TURN,
            {"role": "tool", "tool_call_id": "c1", "content": "out"},
        ]
        response = ModelClient(make_settings(tmp_path, server)).complete(messages, tools=TOOLS_CHAT, step_id="1.1")
    assert response.text is not None and response.text.startswith("```python")
    assert server.requests[0].messages[1]["content"] == "" and messages[1]["content"] is None  # kept as answered
    assert sleeps == []


def test_a_500_that_is_a_request_validation_error_is_permanent_and_keeps_the_message(tmp_path, sleeps):
    null_content = {**PROMPT[0], "role": "assistant", "content": None}
    refusal = strict_server(type("Request", (), {"messages": (null_content,)})())
    with ModelServer(Script(refusal)) as server:
        with pytest.raises(ModelCallError) as caught:
            ModelClient(make_settings(tmp_path, server)).complete(PROMPT, tools=TOOLS_CHAT, step_id="1.1")
    error = caught.value
    assert error.kind == "rejected" and error.status == 500 and not error.transient
    assert len(server.requests) == 1 and sleeps == []
    assert "'ChatCompletionRequestAssistantMessage', 'content'" in str(error)  # past the first 500 characters
    assert len(str(error)) > 600
    with ModelServer(Script(ErrorReply(500, ""), ModelReply(text="ok"))) as server:  # a bare 500 is transient
        assert ModelClient(make_settings(tmp_path, server)).complete(PROMPT, tools=None, step_id="1.1").text == "ok"


def test_a_4xx_message_is_kept_up_to_4_kb(tmp_path, sleeps):
    long_message = "field " + "x" * 6000
    with ModelServer(Script(ErrorReply(400, long_message))) as server:
        with pytest.raises(ModelCallError) as caught:
            ModelClient(make_settings(tmp_path, server)).complete(PROMPT, tools=None, step_id="1.1")
    assert caught.value.kind == "rejected" and len(server.requests) == 1
    assert len(caught.value.detail) == 4096 and caught.value.detail.endswith("...")


@pytest.mark.parametrize(
    "reply",
    [
        ErrorReply(
            400,
            "This model's maximum context length is 8192 tokens. However, you requested 9026 tokens "
            "(9010 in the messages, 16 in the completion).",
            code="context_length_exceeded",
        ),
        ErrorReply(400, "the request exceeds the available context size, try increasing it", code=None),
    ],
)
def test_a_prompt_longer_than_the_context_is_a_context_length_failure(tmp_path, sleeps, reply):
    with ModelServer(Script(reply)) as server:
        with pytest.raises(ModelCallError) as caught:
            ModelClient(make_settings(tmp_path, server)).complete(PROMPT, tools=None, step_id="1.1")
    assert caught.value.context_length and not caught.value.transient and len(server.requests) == 1


def test_503_honours_retry_after_and_is_waited_for_within_server_wait_seconds(tmp_path, sleeps):
    busy = ErrorReply(503, "Loading model", {"Retry-After": "4"})
    with ModelServer(Script(busy, busy, ModelReply(text="ready"))) as server:
        settings = make_settings(tmp_path, server, max_retries=0, server_wait_seconds=30)
        response = ModelClient(settings).complete(PROMPT, tools=None, step_id="1.1")
    assert response.text == "ready" and sleeps == [4.0, 4.0]  # max_retries=0 does not bound a server's 503
    with ModelServer(Script(busy)) as server:
        settings = make_settings(tmp_path, server, max_retries=0, server_wait_seconds=10)
        with pytest.raises(ModelCallError, match="unavailable for 10 s .server_wait_seconds.: HTTP 503"):
            ModelClient(settings).complete(PROMPT, tools=None, step_id="1.1")


def test_a_server_that_restarts_mid_run_is_waited_for(tmp_path):
    """Real time: the server goes away, a call waits, the server comes back on the same port, the call succeeds."""
    client_module.OUTAGES.reset()
    first = ModelServer(Script(ModelReply(text="before"))).start()
    port = int(first.base_url.rsplit(":", 1)[1].split("/")[0])
    settings = make_settings(tmp_path, first, max_retries=0, server_wait_seconds=30)
    model = ModelClient(settings)
    assert model.complete(PROMPT, tools=None, step_id="1.1").text == "before"
    first.stop()
    second = ModelServer(Script(ModelReply(text="after")), port=port)
    timer = threading.Timer(1.5, second.start)
    timer.start()
    try:
        started = time.monotonic()
        response = model.complete(PROMPT, tools=None, step_id="1.2")
        waited = time.monotonic() - started
    finally:
        timer.join()
        second.stop()
    assert response.text == "after" and waited >= 1.0
    assert response.call.retries and all("cannot reach" in retry.error for retry in response.call.retries)


def request_params(tmp_path, **settings_values):
    """The parameters of one chat request (and of one responses request) made with these settings."""
    found = {}
    for protocol in ("openai-chat", "openai-responses"):
        with ModelServer(Script(ModelReply(text="ok"))) as server:
            settings = make_settings(tmp_path, server, api_protocol=protocol, **settings_values)
            tools = TOOLS_CHAT if protocol == "openai-chat" else TOOLS_RESPONSES
            ModelClient(settings).complete(PROMPT, tools=tools, step_id="1.1", tool_choice=settings.tool_choice or None)
        found[protocol] = server.requests[0].params
    return found


def test_tool_choice_is_sent_when_set_a_tool_in_the_named_function_form(tmp_path, sleeps):
    unset = request_params(tmp_path)
    assert "tool_choice" not in unset["openai-chat"] and "tool_choice" not in unset["openai-responses"]
    named = request_params(tmp_path, tool_choice="code_interpreter")
    assert named["openai-chat"]["tool_choice"] == {"type": "function", "function": {"name": "code_interpreter"}}
    assert named["openai-responses"]["tool_choice"] == {"type": "function", "name": "code_interpreter"}
    assert request_params(tmp_path, tool_choice="required")["openai-chat"]["tool_choice"] == "required"


def test_max_tokens_is_sent_under_the_name_of_the_protocol(tmp_path, sleeps):
    assert all(not {"max_tokens", "max_output_tokens"} & set(params) for params in request_params(tmp_path).values())
    capped = request_params(tmp_path, max_tokens=128)
    assert capped["openai-chat"]["max_tokens"] == 128 and "max_completion_tokens" not in capped["openai-chat"]
    assert capped["openai-responses"]["max_output_tokens"] == 128 and "max_tokens" not in capped["openai-responses"]
    assert client_module.output_cap_name("openai-chat", "") == "max_completion_tokens"  # OpenAI's own endpoint
    assert client_module.output_cap_name("openai-chat", "https://api.openai.com/v1") == "max_completion_tokens"
    assert client_module.output_cap_name("openai-chat", "http://127.0.0.1:8080/v1") == "max_tokens"


def test_a_server_that_refuses_the_cap_name_gets_the_other_one_once(tmp_path, sleeps):
    def responder(request):
        if "max_tokens" in request.params:
            return ErrorReply(
                400,
                "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' "
                "instead.",
                code="unsupported_parameter",
            )
        return ModelReply(text="ok")

    with ModelServer(responder) as server:
        model = ModelClient(make_settings(tmp_path, server, max_tokens=64))
        assert model.complete(PROMPT, tools=None, step_id="1.1").text == "ok"
        assert model.complete(PROMPT, tools=None, step_id="1.2").text == "ok"
    sent = [request.params for request in server.requests]
    assert [("max_tokens" in p, p.get("max_completion_tokens")) for p in sent] == [
        (True, None),
        (False, 64),
        (False, 64),
    ]
    assert sleeps == []


def test_the_servers_own_timings_are_recorded(tmp_path, sleeps):
    timings: JSONObject = {"prompt_n": 950, "prompt_ms": 812.5, "predicted_n": 128, "predicted_ms": 1290.0, "junk": "x"}
    reply = ModelReply(text="ok", extra={"timings": timings}, headers={"openai-processing-ms": "2150"})
    with ModelServer(Script(reply)) as server:
        response = ModelClient(make_settings(tmp_path, server)).complete(PROMPT, tools=None, step_id="1.1")
    assert response.call.to_record()["server"] == {
        "prompt_tokens": 950.0,
        "prompt_ms": 812.5,
        "predicted_tokens": 128.0,
        "predicted_ms": 1290.0,
        "processing_ms": 2150.0,
    }
    # llama.cpp's timings hold its time without queueing: the rest of the latency was the wait in its queue
    quick = ModelReply(text="ok", extra={"timings": {"prompt_ms": 20.0, "predicted_ms": 30.0}})
    with ModelServer(Script(quick), latency_seconds=0.3) as server:
        queued = ModelClient(make_settings(tmp_path, server)).complete(PROMPT, tools=None, step_id="1.1")
    recorded = queued.call.to_record()
    assert recorded["service_s"] == pytest.approx(0.05) and json_number(recorded["queued_s"]) >= 0.25
    assert recorded["queued_s"] == pytest.approx(json_number(recorded["latency_s"]) - 0.05, abs=1e-5)
    # a server that claims more time than the call took: its claim is cut to the latency (nothing queued)
    assert response.call.service_s == response.call.latency_s and response.call.to_record()["queued_s"] == 0
    with ModelServer(Script(ModelReply(text="ok", headers={"openai-processing-ms": "2150"}))) as server:
        header_only = ModelClient(make_settings(tmp_path, server)).complete(PROMPT, tools=None, step_id="1.1")
    assert "service_s" not in header_only.call.to_record()  # that header includes the queue (llama-cpp-python)
    with ModelServer(Script(ModelReply(text="ok", extra={"timings": {"prompt_ms": float("nan")}}))) as server:
        plain = ModelClient(make_settings(tmp_path, server)).complete(PROMPT, tools=None, step_id="1.1")
    assert "server" not in plain.call.to_record()


def test_a_remote_endpoint_needs_a_key_a_local_one_does_not(tmp_path, monkeypatch):
    monkeypatch.delenv("SCICODE_TEST_NO_KEY", raising=False)
    remote = load_settings(
        {"model": "m", "base_url": "https://api.example.invalid/v1", "api_key_env": "SCICODE_TEST_NO_KEY"}, cwd=tmp_path
    )
    with pytest.raises(ModelCallError) as caught:
        ModelClient(remote)
    assert caught.value.kind == "no_key" and "SCICODE_TEST_NO_KEY" in str(caught.value)
    assert client_module.is_local_endpoint("http://localhost:8080/v1")
    assert client_module.is_local_endpoint("http://127.4.5.6:8080/v1") and client_module.is_local_endpoint(
        "http://[::1]:80"
    )
    assert not client_module.is_local_endpoint("http://10.0.0.2:8080/v1") and not client_module.is_local_endpoint("")
    with ModelServer(Script(ErrorReply(401, "Invalid API Key"))) as server:
        local = make_settings(tmp_path, server, api_key_env="SCICODE_TEST_NO_KEY")
        with pytest.raises(ModelCallError) as refused:
            ModelClient(local).complete(PROMPT, tools=None, step_id="1.1")
    assert (
        refused.value.auth
        and "no API key was set" in str(refused.value)
        and "SCICODE_TEST_NO_KEY" in str(refused.value)
    )


def test_list_models(tmp_path, sleeps):
    with ModelServer(Script(ModelReply(text="ok")), models=("m-a", "m-b")) as server:
        assert ModelClient(make_settings(tmp_path, server)).list_models() == ["m-a", "m-b"]
    with ModelServer(Script(ModelReply(text="ok")), models=None) as server:
        assert ModelClient(make_settings(tmp_path, server)).list_models() is None


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_chat_reasoning_text_is_read_from_either_field_and_never_sent_back(tmp_path, sleeps, field):
    reply = ModelReply(text="done", reasoning="first I think\n\nthen I answer", reasoning_field=field)
    with ModelServer(Script(reply, ModelReply(text="again"))) as server:
        client = ModelClient(make_settings(tmp_path, server))
        response = client.complete(PROMPT, tools=None, step_id="1.1")
        message = response.assistant_message()
        client.complete([*PROMPT, message, {"role": "user", "content": "more"}], tools=None, step_id="1.1")
    assert response.reasoning == "first I think\n\nthen I answer"
    assert message == {"role": "assistant", "content": "done", "reasoning": "first I think\n\nthen I answer"}
    assert server.requests[1].messages[1] == {"role": "assistant", "content": "done"}  # reasoning stays here


def test_an_answer_without_reasoning_records_none(tmp_path, sleeps):
    with ModelServer(Script(ModelReply(text="plain"))) as server:
        response = ModelClient(make_settings(tmp_path, server)).complete(PROMPT, tools=None, step_id="1.1")
    assert response.reasoning is None and "reasoning" not in response.assistant_message()


@pytest.mark.parametrize("parts", ["summary", "content"])
def test_responses_reasoning_items_give_their_summary_or_text(tmp_path, sleeps, parts):
    reply = ModelReply(
        text="done",
        tool_calls=(ToolCallSpec("c1", "code_interpreter", '{"code": "1"}'),),
        reasoning="weigh the options\n\npick one",
        reasoning_parts=parts,
    )
    with ModelServer(Script(reply)) as server:
        settings = make_settings(tmp_path, server, api_protocol="openai-responses")
        response = ModelClient(settings).complete(PROMPT, tools=TOOLS_RESPONSES, step_id="1.1")
    assert response.reasoning == "weigh the options\n\npick one"
    assert response.output_items[0]["type"] == "reasoning"  # replayed verbatim in later requests
    assert response.assistant_message()["reasoning"] == "weigh the options\n\npick one"
