"""Text that came from the model or from a process that ran model code (answers, tool arguments and output,
test output, exception messages, frames).

Such text may hold anything a Python `str` can: lone surrogates (from a JSON `\\ud800` escape or a
`surrogateescape` decode), NUL bytes, any size. The trusted side passes it through `valid_text` where it
enters, so that every later write of it (UTF-8 files, JSON, the terminal) succeeds.
"""

from __future__ import annotations

import re

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
