"""The one list of secret markers: a name containing any of them is never written to a file nor passed to a
process that runs model code (config.json, summaries, isolated environments all use `is_secret_name`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SECRET_MARKERS: tuple[str, ...] = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL", "PASSWD", "AUTH")
REDACTED = "<redacted>"


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    return any(marker in upper for marker in SECRET_MARKERS)


def redact_mapping(value: Any) -> Any:
    """`value` with the value of every secret-looking key (at any depth) replaced by REDACTED."""
    if isinstance(value, Mapping):
        return {key: REDACTED if is_secret_name(str(key)) else redact_mapping(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_mapping(item) for item in value]
    return value
