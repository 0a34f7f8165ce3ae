"""Published SciCode protocols and results, as data with their sources.

`protocols.json` names each published protocol (`protocol=NAME`): the settings it fixes, by setting name (any
declared setting; `model_params` fixes only the request parameters it names), and where that comes from.
`published.json` holds published results, one row per model and setting: the figures as published (percent), the
protocol they were made under, the denominators of that protocol's split, the source, and the exact model ids
(aliases) a run's `model=` must equal for the row to be shown beside it. Both are this package's own files, read
once; the settings module checks every fixed value with the setting's own coercer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType

from stages.storage.json_values import JSONValue

PROTOCOLS_FILE = Path(__file__).with_name("protocols.json")
PUBLISHED_FILE = Path(__file__).with_name("published.json")
REQUEST_PARAMS_SETTING = "model_params"  # the setting whose fixed part is the request parameters a protocol names


@dataclass(frozen=True)
class Protocol:
    """A published protocol: the settings it fixes and its sources."""

    name: str
    title: str
    sources: tuple[str, ...]
    settings: Mapping[str, JSONValue]  # setting name -> the value the protocol fixes
    notes: str = ""

    @property
    def request_params(self) -> Mapping[str, JSONValue]:
        """The request parameters (model_params keys) the protocol fixes."""
        fixed = self.settings.get(REQUEST_PARAMS_SETTING)
        return fixed if isinstance(fixed, Mapping) else {}


@dataclass(frozen=True)
class PublishedResult:
    """One published row: a model's figures (percent) under a protocol, over its split's denominators."""

    model: str
    aliases: tuple[str, ...]
    protocol: str
    source: str
    problems: int
    steps: int
    main_problem_resolve_rate: float
    subproblem: float

    @property
    def label(self) -> str:
        """`GPT-4o: 1.5% resolved, 25.0% of steps (scicode-paper)`."""
        return (
            f"{self.model}: {self.main_problem_resolve_rate:.1f}% resolved, {self.subproblem:.1f}% of steps "
            f"({self.protocol})"
        )


def _text(record: Mapping[str, object], key: str) -> str:
    value = record.get(key)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{key} must be a non-empty string in {record}")
    return value


def _texts(record: Mapping[str, object], key: str) -> tuple[str, ...]:
    value = record.get(key)
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise ValueError(f"{key} must be a list of non-empty strings in {record}")
    return tuple(str(item) for item in value)


def _protocol(record: Mapping[str, object]) -> Protocol:
    settings = record.get("settings")
    if not isinstance(settings, dict) or not settings:
        raise ValueError(f"settings must be a non-empty object in protocol {record.get('name')}")
    notes = record.get("notes", "")
    return Protocol(
        name=_text(record, "name"),
        title=_text(record, "title"),
        sources=_texts(record, "sources"),
        settings=MappingProxyType(dict(settings)),
        notes=notes if isinstance(notes, str) else "",
    )


def _number(record: Mapping[str, object], key: str) -> float:
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 100:
        raise ValueError(f"{key} must be a percentage in {record}")
    return float(value)


def _count(record: Mapping[str, object], key: str) -> int:
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{key} must be a whole number >= 1 in {record}")
    return value


def _result(record: Mapping[str, object]) -> PublishedResult:
    return PublishedResult(
        model=_text(record, "model"),
        aliases=_texts(record, "aliases"),
        protocol=_text(record, "protocol"),
        source=_text(record, "source"),
        problems=_count(record, "problems"),
        steps=_count(record, "steps"),
        main_problem_resolve_rate=_number(record, "main_problem_resolve_rate"),
        subproblem=_number(record, "subproblem"),
    )


@lru_cache(maxsize=1)
def protocols() -> tuple[Protocol, ...]:
    """Every published protocol, in the file's order (names unique)."""
    table = json.loads(PROTOCOLS_FILE.read_text(encoding="utf-8"))  # this package's own file
    found = tuple(_protocol(record) for record in table["protocols"])
    names = [entry.name for entry in found]
    if len(set(names)) != len(names):
        raise ValueError(f"protocol names must be unique in {PROTOCOLS_FILE.name}: {names}")
    return found


def protocol_names() -> tuple[str, ...]:
    return tuple(entry.name for entry in protocols())


def protocol_named(name: str) -> Protocol | None:
    return next((entry for entry in protocols() if entry.name == name), None)


@lru_cache(maxsize=1)
def published_results() -> tuple[PublishedResult, ...]:
    """Every published row, in the file's order; each names a known protocol."""
    table = json.loads(PUBLISHED_FILE.read_text(encoding="utf-8"))  # this package's own file
    rows = tuple(_result(record) for record in table["results"])
    unknown = sorted({row.protocol for row in rows} - set(protocol_names()))
    if unknown:
        raise ValueError(f"{PUBLISHED_FILE.name} names unknown protocols: {', '.join(unknown)}")
    return rows


def published_tables_digest() -> str:
    """A digest of both tables (summaries judge against them and show their figures, so their fingerprint covers
    them: a changed table rewrites the summaries, never a model call)."""
    import hashlib

    return hashlib.sha256(PROTOCOLS_FILE.read_bytes() + b"\0" + PUBLISHED_FILE.read_bytes()).hexdigest()


def published_for(model: str) -> tuple[PublishedResult, ...]:
    """The published rows one of whose aliases is exactly `model` (no other matching)."""
    return tuple(row for row in published_results() if model in row.aliases)
