"""What each protocol sends and returns: a conversation kept in chat form as Chat Completions messages or
Responses API input items, and an answer of either API as a `ParsedAnswer` (text, tool calls, finish reason,
usage, reasoning text, and the server's own timings when it reports them).

`stages.generate.client` sends the requests and retries them; nothing here does I/O. Answers are untrusted: they
are parsed from the reply's JSON data (`stages.execution.service_replies.reply_json`), never from the client's models, and
every field is read by its type (a field of the wrong type is absent; a token count that is not a whole number is
unknown); a body that is not an answer at all raises `MalformedResponse` (a transient failure the client retries).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType

from stages.execution.service_replies import whole_count
from stages.generate.api_errors import MalformedResponse, one_line
from stages.records.usage import Tokens
from stages.storage.json_values import JSONObject, JSONValue

PROCESSING_HEADER = "openai-processing-ms"  # OpenAI, llama-cpp-python: the server's time for the request
# llama.cpp's server answers with `timings`: its own prompt and generation times, without any queueing.
TIMING_FIELDS: tuple[tuple[str, str], ...] = (
    ("prompt_n", "prompt_tokens"),
    ("prompt_ms", "prompt_ms"),
    ("predicted_n", "predicted_tokens"),
    ("predicted_ms", "predicted_ms"),
)
# Where chat servers put reasoning text: `reasoning_content` (DeepSeek, vLLM, llama.cpp's server), `reasoning`
# (OpenRouter, Ollama's OpenAI endpoint, newer vLLM).
CHAT_REASONING_FIELDS: tuple[str, ...] = ("reasoning_content", "reasoning")


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str


def openai_package() -> ModuleType:
    """The openai package, imported on first use: it takes about a second, which no-op reruns and task
    listings (that never call a model) should not pay."""
    import openai

    return openai


# ---------------------------------------------------------------------------
# Conversation conversion
# ---------------------------------------------------------------------------


def _chat_message(message: JSONObject) -> JSONObject:
    """A trajectory message as a Chat Completions message (local bookkeeping keys dropped); an assistant turn
    without text (tool calls only) carries `""`, which every server accepts, where `null` is refused by some."""
    content = message.get("content")
    if content is None and message["role"] == "assistant":
        content = ""
    converted: JSONObject = {"role": message["role"], "content": content}
    if message.get("tool_calls"):
        converted["tool_calls"] = message["tool_calls"]
    if message["role"] == "tool":
        converted["tool_call_id"] = message["tool_call_id"]
    return converted


def to_chat_messages(messages: Sequence[JSONObject]) -> list[JSONObject]:
    return [_chat_message(message) for message in messages]


def to_responses_input(messages: Sequence[JSONObject]) -> list[JSONObject]:
    """A chat-form conversation as Responses API input items (message / function_call / function_call_output)."""
    items: list[JSONObject] = []
    for message in messages:
        role = message["role"]
        if role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message["tool_call_id"],
                    "output": message.get("content") or "",
                }
            )
        elif role == "assistant" and message.get("output_items"):
            items.extend(dict(item) for item in _objects(message["output_items"]))
        elif role == "assistant":
            if message.get("content") is not None:
                items.append({"role": "assistant", "content": message["content"]})
            for call in _objects(message.get("tool_calls")):
                function = _object(call["function"])
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call["id"],
                        "name": function["name"],
                        "arguments": function["arguments"],
                    }
                )
        else:
            items.append({"role": role, "content": message.get("content") or ""})
    return items


# ---------------------------------------------------------------------------
# Response parsing: total over any JSON (stages.execution.service_replies.reply_json gives the data)
# ---------------------------------------------------------------------------

USAGE_LIMIT = 10_000_000  # tokens of one call: ten times the largest context window any model offers


def _object(value: JSONValue) -> JSONObject:
    return value if isinstance(value, dict) else {}


def _items(value: JSONValue) -> list[JSONValue]:
    return value if isinstance(value, list) else []


def _objects(value: JSONValue) -> list[JSONObject]:
    return [item for item in _items(value) if isinstance(item, dict)]


def _text(value: JSONValue) -> str | None:
    return value if isinstance(value, str) else None


def usage_from(raw_usage: JSONValue, input_name: str, output_name: str) -> Tokens:
    """The token counts of a reply's `usage`; a count that is missing or not a whole number in [0, USAGE_LIMIT)
    (text, a negative number, 1e999) is unknown: counted as 0, the call counted in `unknown_calls`."""
    usage = _object(raw_usage)
    counts = [whole_count(usage.get(name), USAGE_LIMIT) for name in (input_name, output_name)]
    return Tokens(counts[0] or 0, counts[1] or 0, unknown_calls=int(None in counts))


def _finite(value: JSONValue) -> float | None:
    """A finite, non-negative number from untrusted JSON or a header; None for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) and number >= 0 else None


def server_timings(body: JSONValue, headers: Mapping[str, str] | None) -> dict[str, float] | None:
    """The server's own account of a request: llama.cpp's `timings` (prompt and generation, no queueing) and the
    `openai-processing-ms` header (OpenAI; llama-cpp-python, where it includes the wait for its one slot)."""
    found: dict[str, float] = {}
    timings = _object(_object(body).get("timings"))
    for source, name in TIMING_FIELDS:
        value = _finite(timings.get(source))
        if value is not None:
            found[name] = round(value, 3)
    processing = _finite((headers or {}).get(PROCESSING_HEADER))
    if processing is not None:
        found["processing_ms"] = processing
    return found or None


@dataclass(frozen=True)
class ParsedAnswer:
    text: str | None
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str | None
    response_id: str | None
    usage: Tokens
    output_items: tuple[JSONObject, ...] = ()
    reasoning: str | None = None


def chat_reasoning(message: JSONObject) -> str | None:
    """The reasoning text of a chat answer: the first of `CHAT_REASONING_FIELDS` that holds text; None when there
    is none."""
    for name in CHAT_REASONING_FIELDS:
        value = message.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def _reasoning_item_texts(item: JSONObject) -> list[str]:
    """The summary texts of one Responses API reasoning item, then its reasoning text parts (where a server
    returns them)."""
    parts = _items(item.get("summary")) + _items(item.get("content"))
    return [text for part in parts if (text := _text(_object(part).get("text")))]


def responses_reasoning(output: Sequence[JSONObject]) -> str | None:
    """The reasoning text of a Responses API answer: every reasoning item's texts in order, one paragraph each;
    None when there is none (encrypted reasoning carries no text)."""
    texts = [text for item in output if item.get("type") == "reasoning" for text in _reasoning_item_texts(item)]
    return "\n\n".join(texts) if texts else None


def _arguments(value: JSONValue) -> str:
    """A tool call's arguments as JSON text (some servers send an object instead of its text)."""
    if isinstance(value, str):
        return value
    return json.dumps(value) if isinstance(value, (dict, list)) else ""


def _content_text(content: JSONValue) -> str | None:
    """A chat message's content: its text, or the text of its parts (servers that send a list of parts)."""
    if isinstance(content, list):
        texts = [text for part in content if (text := _text(_object(part).get("text"))) is not None]
        return "".join(texts) if texts else None
    return _text(content)


def _chat_tool_call(call: JSONValue) -> ToolCall | None:
    function = _object(call).get("function")
    if not isinstance(function, dict):
        return None
    return ToolCall(
        _text(_object(call).get("id")) or "", _text(function.get("name")) or "", _arguments(function.get("arguments"))
    )


def parse_chat_completion(body: JSONValue) -> ParsedAnswer:
    """A Chat Completions reply; MalformedResponse when it is not an object with a first choice holding a
    message (any other field of the wrong type is read as absent)."""
    if not isinstance(body, dict):
        raise MalformedResponse(f"expected a chat completion object, got {one_line(repr(body), 200)}")
    choices = _items(body.get("choices"))
    choice = _object(choices[0]) if choices else {}
    message = choice.get("message")
    if not isinstance(message, dict):
        raise MalformedResponse(f"chat completion {one_line(repr(body.get('id')), 100)} has no choice with a message")
    calls = tuple(parsed for call in _items(message.get("tool_calls")) if (parsed := _chat_tool_call(call)))
    return ParsedAnswer(
        _content_text(message.get("content")),
        calls,
        _text(choice.get("finish_reason")),
        _text(body.get("id")),
        usage_from(body.get("usage"), "prompt_tokens", "completion_tokens"),
        reasoning=chat_reasoning(message),
    )


def _responses_finish_reason(body: JSONObject, has_calls: bool) -> str:
    if body.get("status") == "incomplete":
        reason = _text(_object(body.get("incomplete_details")).get("reason"))
        return "length" if reason == "max_output_tokens" else (reason or "incomplete")
    return "tool_calls" if has_calls else "stop"


def without_nulls(value: JSONValue) -> JSONValue:
    """`value` with every null field of its objects left out (nesting is bounded by the reply's reader)."""
    if isinstance(value, dict):
        return without_null_fields(value)
    if isinstance(value, list):
        return [without_nulls(item) for item in value]
    return value


def without_null_fields(value: JSONObject) -> JSONObject:
    return {key: without_nulls(item) for key, item in value.items() if item is not None}


def _message_texts(item: JSONObject) -> list[str]:
    parts = [_object(part) for part in _items(item.get("content"))]
    return [
        text for part in parts if part.get("type") == "output_text" and (text := _text(part.get("text"))) is not None
    ]


def parse_responses_response(body: JSONValue) -> ParsedAnswer:
    """A Responses API reply; MalformedResponse when it is not an object with a list of output items, or when the
    response failed."""
    if not isinstance(body, dict):
        raise MalformedResponse(f"expected a response object, got {one_line(repr(body), 200)}")
    response_id = _text(body.get("id"))
    if body.get("status") == "failed":
        detail = _text(_object(body.get("error")).get("message")) or "no detail"
        raise MalformedResponse(f"response {response_id!r} failed: {one_line(detail, 500)}")
    if not isinstance(body.get("output"), list):
        raise MalformedResponse(f"response {response_id!r} has no output")
    output = _objects(body["output"])
    texts = [text for item in output if item.get("type") == "message" for text in _message_texts(item)]
    calls = tuple(
        ToolCall(_text(item.get("call_id")) or "", _text(item.get("name")) or "", _arguments(item.get("arguments")))
        for item in output
        if item.get("type") == "function_call"
    )
    return ParsedAnswer(
        "".join(texts) if texts else None,
        calls,
        _responses_finish_reason(body, bool(calls)),
        response_id,
        usage_from(body.get("usage"), "input_tokens", "output_tokens"),
        tuple(without_null_fields(item) for item in output),
        responses_reasoning(output),
    )
