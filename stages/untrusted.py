"""Text that came from the model or from a process that ran model code (answers, tool arguments and output,
test output, exception messages, frames).

Such text may hold anything a Python `str` can: lone surrogates (from a JSON `\\ud800` escape or a
`surrogateescape` decode), NUL bytes, any size. The trusted side passes it through `valid_text` where it
enters, so that every later write of it (UTF-8 files, JSON, the terminal) succeeds.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, TypeVar

T = TypeVar("T")
REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(value: object) -> str:
    """`value` as a `str` that encodes to UTF-8: each lone surrogate becomes U+FFFD; anything not a `str`
    is converted with `str()` first (a value whose `str()` fails becomes a placeholder naming its type)."""
    if not isinstance(value, str):
        try:
            value = str(value)
        except Exception:  # noqa: BLE001 - untrusted objects may raise anything from __str__
            return f"<unprintable {type(value).__name__}>"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub(REPLACEMENT, value)
    return value


def valid_data(value: T) -> T:
    """`value` with `valid_text` applied to every `str` inside it: dict keys and values, list and tuple items,
    fields of dataclass instances (the records of a model response). Other values are kept as they are; the
    same object comes back when nothing had to change. Structures nested beyond the interpreter's recursion
    limit come back unchanged (every writer applies `valid_text` again: `stages.artifacts.atomic_write_text`)."""
    try:
        return _valid(value)
    except RecursionError:
        return value


def _valid(value: Any) -> Any:
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, dict):
        items = [(_valid(key), _valid(item)) for key, item in value.items()]
        changed = any(
            new_key is not key or new is not item for (new_key, new), (key, item) in zip(items, value.items())
        )
        return dict(items) if changed else value
    if isinstance(value, (list, tuple)):
        cleaned = [_valid(item) for item in value]
        if all(new is old for new, old in zip(cleaned, value)):
            return value
        if isinstance(value, list):
            return cleaned
        return type(value)(*cleaned) if hasattr(value, "_fields") else tuple(cleaned)  # a named tuple, or a tuple
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {
            field.name: new
            for field in dataclasses.fields(value)
            if field.init and (new := _valid(getattr(value, field.name))) is not getattr(value, field.name)
        }
        return dataclasses.replace(value, **changes) if changes else value
    return value


class UntrustedJSONError(ValueError):
    """Untrusted JSON text that is not accepted: too long, too deeply nested, or not JSON (one line)."""


def parse_json(text: str, max_chars: int) -> Any:
    """`json.loads` of untrusted `text`, never another exception: UntrustedJSONError when `text` is longer than
    `max_chars` characters, nested deeper than the parser allows (RecursionError) or not valid JSON. Strings in
    the result may hold lone surrogates (from `\\ud800` escapes): pass what is kept through `valid_text`."""
    if len(text) > max_chars:
        raise UntrustedJSONError(f"{len(text)} characters, more than the {max_chars} accepted")
    try:
        return json.loads(text)
    except ValueError as error:
        raise UntrustedJSONError(f"not valid JSON ({error})") from None
    except (RecursionError, MemoryError):
        raise UntrustedJSONError("nested too deeply to be read") from None
