"""Text that came from the model or from a process that ran model code (answers, tool arguments and output,
test output, exception messages, frames).

Such text may hold anything a Python `str` can: lone surrogates (from a JSON `\\ud800` escape or a
`surrogateescape` decode), NUL bytes, any size. The trusted side passes it through `valid_text` where it
enters, so that every later write of it (UTF-8 files, JSON, the terminal) succeeds.

Before a reader sees it, `shown` neutralises it: every Markdown and terminal writer (summary.md,
compare.md, the failure lines and the final recap of a run, `doit explain`) shows model-derived text only
through it, so no escape sequence reaches a terminal (nothing can rewrite "(fail)" into "(pass)", set the
clipboard or the window title) and no Markdown or HTML of the model's is rendered (no forged table or
heading). report.html needs none of this: Jinja2 escapes every value it shows.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import unicodedata
from typing import Any, TypeVar, cast

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


MAX_DATA_DEPTH = 100
TOO_DEEP = f"[nested deeper than {MAX_DATA_DEPTH} levels: not kept]"


def valid_data(value: T) -> T:
    """`value` with `valid_text` applied to every `str` inside it: dict keys and values, list and tuple items,
    fields of dataclass instances (the records of a model response). A container nested deeper than
    MAX_DATA_DEPTH levels becomes the string TOO_DEEP (every JSON writer can then write it: the encoders
    recurse), and a non-finite float its text (`inf`, `-inf`, `nan`: a strict JSON writer refuses the number, and
    a reply's `1e999`, `NaN` or `-Infinity` parses to one). Other values are kept as they are; the same object comes
    back when nothing had to change."""
    # _valid rebuilds each container as its own type, so T holds but for the TOO_DEEP text, which every JSON
    # writer the result goes to accepts in place of the container.
    return cast(T, _valid(value, 0))


def _valid(value: Any, depth: int) -> Any:
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # `inf`, `-inf`, `nan`: JSON has no such number (`1e999`, `NaN` parse to them)
    if depth >= MAX_DATA_DEPTH and isinstance(value, (dict, list, tuple)):
        return TOO_DEEP
    if isinstance(value, dict):
        items = [(_valid(key, depth + 1), _valid(item, depth + 1)) for key, item in value.items()]
        changed = any(
            new_key is not key or new is not item for (new_key, new), (key, item) in zip(items, value.items())
        )
        return dict(items) if changed else value
    if isinstance(value, (list, tuple)):
        cleaned = [_valid(item, depth + 1) for item in value]
        if all(new is old for new, old in zip(cleaned, value)):
            return value
        if isinstance(value, list):
            return cleaned
        return type(value)(*cleaned) if hasattr(value, "_fields") else tuple(cleaned)  # a named tuple, or a tuple
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {
            field.name: new
            for field in dataclasses.fields(value)
            if field.init and (new := _valid(getattr(value, field.name), depth + 1)) is not getattr(value, field.name)
        }
        return dataclasses.replace(value, **changes) if changes else value
    return value


class UntrustedJSONError(ValueError):
    """Untrusted JSON text that is not accepted: too long, too deeply nested, or not JSON (one line)."""


def parse_json(text: str, max_chars: int, *, strict: bool = True) -> Any:
    """`json.loads` of untrusted `text`, never another exception: UntrustedJSONError when `text` is longer than
    `max_chars` characters, nested deeper than the parser allows (RecursionError) or not valid JSON (with
    `strict=False`, raw control characters inside strings are valid). Strings in the result may hold lone
    surrogates (from `\\ud800` escapes): pass what is kept through `valid_text`."""
    if len(text) > max_chars:
        raise UntrustedJSONError(f"{len(text)} characters, more than the {max_chars} accepted")
    try:
        return json.loads(text, strict=strict)
    except ValueError as error:
        raise UntrustedJSONError(f"not valid JSON ({error})") from None
    except (RecursionError, MemoryError):
        raise UntrustedJSONError("nested too deeply to be read") from None


SHOWN_LIMIT = 300
SHOWN_LINES_LIMIT = 20_000
ELLIPSIS = "..."
# Control characters (C0, DEL, C1: escape sequences start with ESC or CSI), format characters (bidirectional
# overrides, zero-width characters), line and paragraph separators, surrogates, private and unassigned code
# points: shown as visible escapes.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})
_KEPT_IN_LINES = frozenset("\n\t")


def _visible(char: str, keep: frozenset[str]) -> str:
    if char in keep or unicodedata.category(char) not in _HIDDEN_CATEGORIES:
        return char
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _bounded(text: str, limit: int, keep: frozenset[str]) -> str:
    """`text` with hidden characters escaped, cut to at most `limit` characters (an escape is never cut)."""
    if text.isascii() and text.isprintable() and len(text) <= limit:
        return text
    pieces: list[str] = []
    size = 0
    for char in text:
        piece = _visible(char, keep)
        if size + len(piece) > limit:
            while pieces and size + len(ELLIPSIS) > limit:
                size -= len(pieces.pop())
            return "".join(pieces) + ELLIPSIS
        pieces.append(piece)
        size += len(piece)
    return "".join(pieces)


def _bounded_tail(text: str, limit: int, keep: frozenset[str]) -> str:
    """Like `_bounded`, but keeping the end of a long `text` (a traceback ends with its error): "..." first."""
    if len(text) <= limit and text.isascii() and text.replace("\n", "").replace("\t", "").isprintable():
        return text
    escaped = "".join(_visible(char, keep) for char in text[-limit:])  # escaping only lengthens: enough
    if len(text) <= limit and len(escaped) <= limit:
        return escaped
    return ELLIPSIS + escaped[len(escaped) - (limit - len(ELLIPSIS)) :]


def _code_span(text: str) -> str:
    """`text` as a Markdown code span: nothing inside is Markdown or HTML; its delimiter is longer than any run
    of backticks inside, padded with a space when the text starts or ends with a backtick or a space."""
    if not text:
        return "(empty)"
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text[0] in "` " or text[-1] in "` " else ""
    return f"{fence}{pad}{text}{pad}{fence}"


_WORD = re.compile(r"\S+")


def flattened(text: str, limit: int) -> str:
    """`text` on one line (runs of whitespace as one space), only as far as `limit` characters can show: a text of
    any size costs no more than what is kept."""
    words: list[str] = []
    size = -1
    for match in _WORD.finditer(text):
        words.append(match.group())
        size += len(words[-1]) + 1
        if size > limit:
            break
    return " ".join(words)


def shown(value: object, *, limit: int | None = None, markdown: bool = False, lines: bool = False) -> str:
    """Model-derived `value` as a reader may see it, in a Markdown file or on a terminal: valid text (see
    `valid_text`) on one line (runs of whitespace, line breaks included, become one space; with `lines`, line
    breaks and tabs are kept), every control or invisible character as a visible escape (`\\x1b`, `\\u202e`),
    at most `limit` characters (default SHOWN_LIMIT: longer text ends with "..."; with `lines`,
    SHOWN_LINES_LIMIT, and longer text keeps its end: "..." first). With `markdown`, the result is a code span, so no Markdown or HTML inside it is rendered (place it
    after other text on its line, never at a line's start; a table writer escapes `|` in its cells)."""
    text = valid_text(value)
    if lines:
        text = text.replace("\r\n", "\n")
        bounded = _bounded_tail(text, SHOWN_LINES_LIMIT if limit is None else limit, _KEPT_IN_LINES)
    else:
        limit = SHOWN_LIMIT if limit is None else limit
        bounded = _bounded(flattened(text, limit), limit, frozenset())
    return _code_span(bounded) if markdown else bounded
