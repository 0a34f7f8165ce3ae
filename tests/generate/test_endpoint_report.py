"""What an endpoint says of itself is read as hostile: bounded, total, only the declared kinds kept."""

from __future__ import annotations

import hashlib

import pytest

from stages.generate.endpoint_report import describe
from stages.generate.server import ModelReply, ModelServer
from stages.records.endpoint import (
    SELF_REPORT_TEXT_CHARS,
    TEMPLATE_CHARS,
    EndpointRecord,
    endpoint_url,
    endpoint_uses,
    read_self_reports,
)
from stages.storage.json_values import JSONObject, freeze_object

MODEL = "acme-coder-1"


def serve(**options: object) -> ModelServer:
    return ModelServer(lambda request: ModelReply(text="ok"), **options).start()  # type: ignore[arg-type]


def test_a_llama_cpp_server_is_described_by_its_props_and_model_entry() -> None:
    entry: JSONObject = {
        "id": MODEL,
        "object": "model",
        "owned_by": "llamacpp",
        "meta": {"n_ctx_train": 8192, "n_params": 1.35e8},
    }
    props = {
        "chat_template": "{{ messages }}",
        "model_path": "/m/acme.gguf",
        "default_generation_settings": {"n_ctx": 4096},
    }
    server = serve(models=(MODEL,), pages={"/props": props})
    try:
        server.models = None  # replaced below by a page with the full entry
        server.pages["/v1/models"] = {"object": "list", "data": [{"id": "other"}, entry]}
        found = describe(server.base_url, MODEL, None)
    finally:
        server.stop()
    assert found.served_model == MODEL
    assert dict(found.server) == {
        "chat_template": "{{ messages }}",
        "chat_template_sha256": hashlib.sha256(b"{{ messages }}").hexdigest(),
        "chat_template_chars": 14,
        "model_file": "/m/acme.gguf",
        "context": 4096,
        "owned_by": "llamacpp",
        "n_ctx_train": 8192,
        "n_params": 135_000_000,
    }
    assert "model file /m/acme.gguf; context 4096; chat template sha256" in found.shown()


@pytest.mark.parametrize(
    "props",
    [
        None,
        [],
        "text",
        {"chat_template": ["a"], "model_path": {"x": 1}, "default_generation_settings": {"n_ctx": "8192"}},
        {"chat_template": "", "model_path": 5, "default_generation_settings": {"n_ctx": -1}},
        {"default_generation_settings": {"n_ctx": float("1e300")}, "build_info": True},
        {"default_generation_settings": {"n_ctx": 2.5}},
    ],
)
def test_replies_of_the_wrong_shape_say_nothing(props: object) -> None:
    assert read_self_reports(props, {"root": 7, "max_model_len": "big", "meta": [1]}) == {}


def test_long_text_is_bounded_and_a_template_keeps_its_digest() -> None:
    template = "x" * (TEMPLATE_CHARS * 3)
    found = read_self_reports({"chat_template": template, "model_path": "\x1b[2J" + "p" * 10_000}, None)
    assert len(str(found["chat_template"])) == TEMPLATE_CHARS
    assert found["chat_template_sha256"] == hashlib.sha256(template.encode()).hexdigest()
    assert found["chat_template_chars"] == len(template)
    assert len(str(found["model_file"])) <= SELF_REPORT_TEXT_CHARS and "\x1b" not in str(found["model_file"])


def test_an_oversized_or_unreadable_reply_says_nothing() -> None:
    huge = {"chat_template": "t" * (9 * 1024 * 1024)}  # over the endpoint reply bound
    server = serve(models=(MODEL,), pages={"/props": huge})
    try:
        found = describe(server.base_url, MODEL, None)
    finally:
        server.stop()
    assert found.served_model == MODEL and dict(found.server) == {"owned_by": "local"}


def test_a_dead_endpoint_is_described_by_its_url_alone() -> None:
    found = describe("http://user:pw@127.0.0.1:9/v1/?api-key=abc#x", MODEL, "sk-secret")
    assert found == EndpointRecord("http://127.0.0.1:9/v1")
    assert "pw" not in found.key and "abc" not in found.key and "sk-secret" not in found.key


def test_the_url_is_recorded_without_credentials_query_or_fragment() -> None:
    assert endpoint_url("https://k:s@api.example/v1/?key=1#f") == "https://api.example/v1"
    assert endpoint_url("") == "https://api.openai.com/v1"


def test_steps_are_counted_per_endpoint_in_order_of_first_answer() -> None:
    a = EndpointRecord("http://a/v1", "m", freeze_object({"context": 1}))
    b = EndpointRecord("http://b/v1", None)
    uses = endpoint_uses([(a, 3), (b, 1), (EndpointRecord("http://a/v1", "m", freeze_object({"context": 1})), 2)])
    assert [(use.endpoint.base_url, use.steps) for use in uses] == [("http://a/v1", 5), ("http://b/v1", 1)]
    assert uses[1].shown() == "http://b/v1 (model not listed): 1 step(s)"
