"""The openai SDK's reply objects as the tests that drive the real client read them and send them back: typed
views (a message's function calls) and the client's own dumps of what the server sent, passed back as requests."""

from __future__ import annotations

from typing import cast

from openai.types.chat import ChatCompletionMessage, ChatCompletionMessageFunctionToolCall, ChatCompletionMessageParam
from openai.types.responses import ResponseInputItemParam, ResponseOutputItem


def function_calls(message: ChatCompletionMessage) -> list[ChatCompletionMessageFunctionToolCall]:
    """The tool calls of `message`, each a function call."""
    assert message.tool_calls is not None
    calls = [call for call in message.tool_calls if isinstance(call, ChatCompletionMessageFunctionToolCall)]
    assert len(calls) == len(message.tool_calls), message.tool_calls
    return calls


def sent_back(message: ChatCompletionMessage) -> ChatCompletionMessageParam:
    """An assistant message as a client sends it back in the history: the client's own dump of the JSON the
    server sent (the SDK has no typed conversion from a reply's message to a request's)."""
    return cast(ChatCompletionMessageParam, message.model_dump(exclude_none=True))


def item_sent_back(item: ResponseOutputItem) -> ResponseInputItemParam:
    """A Responses output item as a client sends it back in the next input: the client's own dump of its JSON."""
    return cast(ResponseInputItemParam, item.model_dump(exclude_none=True))
