"""The endpoint a generation's answers came from: part of what was measured.

For a local model the server's chat template, model file and context are as much a part of the result as the
model's name, so each generation records, for every endpoint that answered one of its steps, an `EndpointRecord`:

- `base_url`: where the run sent its requests, without credentials, query or fragment (`BUILTIN_ENDPOINT` for the
  built-in models, which answer inside this process);
- `served_model`: the id the server lists for `model=` in `GET /models` (None where it lists none);
- `server`: what the server says of itself where it says it (SELF_REPORTS: llama.cpp's `GET /props` chat
  template, model file and context; the `GET /models` entry's metadata, as vLLM and llama.cpp give it), each value
  bounded (SELF_REPORT_TEXT_CHARS, the chat template TEMPLATE_CHARS with its sha256 over the whole text).

Everything in a record was read from a hostile reply (`stages.generate.endpoint_report`) and is kept only as the
scalar kinds declared here; the records are read back totally (a malformed one becomes an empty part).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

from stages.execution.untrusted import shown, valid_text
from stages.records.declared import Declared, key
from stages.storage.json_values import EMPTY, FrozenObject, JSONObject, text

BUILTIN_ENDPOINT = "built-in"  # the built-in models (gold, replay:) answer inside this process
DEFAULT_ENDPOINT = "https://api.openai.com/v1"  # what an empty base_url means to the client
SELF_REPORT_TEXT_CHARS = 300
TEMPLATE_CHARS = 16_000  # of a chat template kept verbatim (real ones are 1-8 KB); its sha256 covers all of it
COUNT_LIMIT = 10**12
Source = Literal["props", "model entry"]
Kind = Literal["text", "count", "template"]


@dataclass(frozen=True)
class SelfReport:
    """One fact a server may say of itself: where it says it (llama.cpp's /props at the server's root, or its own
    entry in GET /models), the path of keys to it, the name it is recorded under, and its kind."""

    source: Source
    keys: tuple[str, ...]
    name: str
    kind: Kind
    label: str  # how a summary names it


SELF_REPORTS: tuple[SelfReport, ...] = (
    SelfReport("props", ("chat_template",), "chat_template", "template", "chat template"),
    SelfReport("props", ("model_path",), "model_file", "text", "model file"),
    SelfReport("props", ("default_generation_settings", "n_ctx"), "context", "count", "context"),
    SelfReport("props", ("build_info",), "build", "text", "build"),
    SelfReport("model entry", ("root",), "model_root", "text", "model"),
    SelfReport("model entry", ("max_model_len",), "max_model_len", "count", "max_model_len"),
    SelfReport("model entry", ("owned_by",), "owned_by", "text", "owned by"),
    SelfReport("model entry", ("meta", "n_ctx_train"), "n_ctx_train", "count", "trained context"),
    SelfReport("model entry", ("meta", "n_params"), "n_params", "count", "parameters"),
)
SHOWN_REPORTS: tuple[str, ...] = ("model_file", "model_root", "context", "max_model_len", "chat_template")


def endpoint_url(base_url: str) -> str:
    """`base_url` as the run records it: without user credentials, query or fragment (a key may ride in any of
    them); the default OpenAI endpoint for an empty one."""
    if not base_url:
        return DEFAULT_ENDPOINT
    try:
        parts = urlsplit(base_url)
        host = parts.netloc.rsplit("@", 1)[-1]
        return urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))
    except ValueError:
        return shown(base_url.split("?", 1)[0].split("#", 1)[0], limit=SELF_REPORT_TEXT_CHARS)


def _at(data: object, keys: Sequence[str]) -> object:
    for name in keys:
        if not isinstance(data, Mapping):
            return None
        data = data.get(name)
    return data


def _count(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None
    return int(value) if 0 <= value < COUNT_LIMIT else None


def _template_facts(value: object) -> JSONObject:
    if not isinstance(value, str) or not value:
        return {}
    whole = valid_text(value)
    return {
        "chat_template": whole[:TEMPLATE_CHARS],
        "chat_template_sha256": hashlib.sha256(whole.encode("utf-8")).hexdigest(),
        "chat_template_chars": len(whole),
    }


def read_self_reports(props: object, model_entry: object) -> JSONObject:
    """The facts of SELF_REPORTS found in a /props reply and the server's /models entry (any JSON, or None):
    each kept only when it has its declared kind, text bounded."""
    found: JSONObject = {}
    for report in SELF_REPORTS:
        value = _at(props if report.source == "props" else model_entry, report.keys)
        if report.kind == "template":
            found.update(_template_facts(value))
        elif report.kind == "count" and (count := _count(value)) is not None:
            found[report.name] = count
        elif report.kind == "text" and isinstance(value, str) and value:
            found[report.name] = shown(value, limit=SELF_REPORT_TEXT_CHARS)
    return found


@dataclass(frozen=True)
class EndpointRecord(Declared):
    """One endpoint that answered (module docstring); `server` holds only the SELF_REPORTS facts, each of its
    declared kind, under names that depend on the server (free-form to the record)."""

    base_url: str
    served_model: str | None = None
    server: FrozenObject = field(
        default_factory=lambda: EMPTY, metadata=key(schema={"additionalProperties": {"type": ["string", "integer"]}})
    )

    @property
    def key(self) -> str:
        """The record as canonical JSON: two records are the same endpoint when their keys are equal."""
        return json.dumps(self.to_record(), sort_keys=True, ensure_ascii=False)

    def facts(self) -> list[str]:
        """What the server said of itself, as short phrases (`model file x.gguf`, `chat template sha256 1a2b..`)."""
        labels = {report.name: report.label for report in SELF_REPORTS}
        phrases = []
        for name in SHOWN_REPORTS:
            if name == "chat_template":
                digest = self.server.get("chat_template_sha256")
                if isinstance(digest, str):
                    phrases.append(f"chat template sha256 {digest[:12]}")
            elif name in self.server:
                phrases.append(f"{labels[name]} {text(self.server[name])}")
        return phrases

    def shown(self) -> str:
        """One phrase: `http://127.0.0.1:8080/v1 (serves smollm2-135m; model file m.gguf; context 8192)`."""
        if self.base_url == BUILTIN_ENDPOINT:
            return f"{BUILTIN_ENDPOINT} ({self.served_model})" if self.served_model else BUILTIN_ENDPOINT
        said = ([f"serves {self.served_model}"] if self.served_model else ["model not listed"]) + self.facts()
        return shown(f"{self.base_url} ({'; '.join(said)})", limit=2 * SELF_REPORT_TEXT_CHARS)


@dataclass(frozen=True)
class EndpointUse(Declared):
    """An endpoint and how many steps it answered (a summary's line)."""

    # Its schema is every endpoint's (common.schema.json#/$defs/endpoint): a generation's carry no steps.
    record_schema = {
        "description": "an endpoint that answered (stages/records/endpoint.py): base_url without credentials or query, "
        "the id GET /models lists for the model, what the server says of itself (llama.cpp's /props, the /models entry)"
    }

    endpoint: EndpointRecord = field(metadata=key(flatten=True))
    steps: int = field(
        metadata=key(required=False, schema={"minimum": 0, "description": "in a summary: the steps it answered"})
    )

    def shown(self) -> str:
        return f"{self.endpoint.shown()}: {self.steps} step(s)"


def endpoint_uses(pairs: Iterable[tuple[EndpointRecord, int]]) -> tuple[EndpointUse, ...]:
    """Steps per endpoint, summed over `pairs` (an endpoint, steps it answered), in order of first appearance."""
    found: dict[str, EndpointUse] = {}
    for endpoint, steps in pairs:
        earlier = found.get(endpoint.key)
        found[endpoint.key] = EndpointUse(endpoint, steps + (earlier.steps if earlier else 0))
    return tuple(found.values())
