"""Reading one raw setting value as a typed one: a string from the command line, or a typed value from TOML/JSON.

Each coercer is called as `(name, value)` and returns the typed value, or raises `ConfigError` with one line
naming the variable, the bad value (cut to 80 characters) and what is allowed. `stages.config.settings` maps every
setting to its coercer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from stages.errors import PipelineError


class ConfigError(PipelineError, ValueError):
    """A configuration problem, stated in one line."""


SUGGESTIONS = 3  # the closest names or values a "did you mean" offers at most
SUGGESTION_CUTOFF = 0.6  # how alike (difflib's ratio, 0 to 1) a name must be to be offered


def closest(word: str, names: Iterable[str]) -> list[str]:
    """The names most like `word` (case ignored), closest first; empty when none is alike."""
    import difflib

    by_folded = {name.lower(): name for name in names}
    found = difflib.get_close_matches(word.strip().lower(), list(by_folded), SUGGESTIONS, SUGGESTION_CUTOFF)
    return [by_folded[folded] for folded in found]


def did_you_mean(word: str, names: Iterable[str]) -> str:
    """ "did you mean a or b? " for the names closest to `word`, else ""."""
    found = closest(word, names)
    return f"did you mean {' or '.join(found)}? " if found else ""


SHOWN_VALUE_CHARS = 80  # characters of a bad value an error shows


def shown_path(path: str) -> str:
    """A file path as an error line shows it: escaped like any bad value, and a long one keeps its end (the part that
    names the file), after "...", within SHOWN_VALUE_CHARS characters."""
    if len(path) <= SHOWN_VALUE_CHARS:
        return shown_value(path)
    return "..." + shown_value(path[-(SHOWN_VALUE_CHARS - 3) :])


def shown_value(value: Any) -> str:
    """A bad value as an error line shows it: JSON for what is not text, at most SHOWN_VALUE_CHARS characters, on
    one line with every control character, lone surrogate or invisible character escaped (it may be anything)."""
    from stages.execution.untrusted import shown

    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, default=str)
        except (ValueError, RecursionError):
            text = f"<{type(value).__name__}>"
    escaped = text[: SHOWN_VALUE_CHARS * 2].encode("utf-8", "backslashreplace").decode("utf-8")
    return shown(escaped, limit=SHOWN_VALUE_CHARS)


def fail(name: str, value: Any, allowed: str, choices: Iterable[str] = (), word: str | None = None) -> ConfigError:
    """The one-line error of a bad value; with `choices`, the ones closest to the bad word (`word`, else the value)
    come first."""
    word = word if word is not None else value if isinstance(value, str) else None
    hint = did_you_mean(word, choices) if word is not None and is_plain_text(word) else ""
    return ConfigError(f"invalid {name}={shown_value(value)}: {hint}expected {allowed}")


# ---------------------------------------------------------------------------
# Plain values: what every raw value must be before it is read as a setting
# ---------------------------------------------------------------------------

MAX_NESTING = 32  # levels of lists and tables a value (a JSON block, model_params) may nest
MAX_WHOLE_NUMBER = 2**64  # the largest whole number a value may hold (a 64-bit seed), either sign
PLAIN_VALUE = (
    f"text in valid UTF-8 without NUL, finite numbers, whole numbers within +-2^64, true/false, and lists and "
    f"tables of them nested at most {MAX_NESTING} levels (no TOML date or time)"
)


def is_plain_text(text: str) -> bool:
    """Text every writer takes: valid UTF-8 (no lone surrogate, which a byte that is not UTF-8 on the command line
    becomes) and no NUL."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


def plain_problem(value: Any) -> str | None:
    """What keeps `value` from being written, sent and fingerprinted (see PLAIN_VALUE); None when nothing does.
    Walked without recursion, so no nesting depth raises."""
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, str):
            if not is_plain_text(item):
                return "text that is not valid UTF-8 (a lone surrogate or a byte that is not UTF-8) or holds NUL"
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if abs(item) > MAX_WHOLE_NUMBER:
                return "a whole number beyond +-2^64"
        elif isinstance(item, float):
            if item != item or item in (float("inf"), float("-inf")):
                return "a number that is not finite (inf, NaN, or beyond the float range like 1e999)"
        elif isinstance(item, (list, tuple, Mapping)):
            if depth >= MAX_NESTING:
                return f"lists or tables nested deeper than {MAX_NESTING} levels"
            children = list(item.items()) if isinstance(item, Mapping) else [(None, child) for child in item]
            for key, child in children:
                if key is not None:
                    pending.append((key if isinstance(key, str) else str(key), depth + 1))
                pending.append((child, depth + 1))
        else:
            return f"a {type(item).__name__} (a TOML date or time is not a setting's value)"
    return None


def check_plain(name: str, value: Any) -> None:
    """ConfigError naming `name` unless `value` is plain (see PLAIN_VALUE)."""
    problem = plain_problem(value)
    if problem is not None:
        raise ConfigError(f"invalid {name}={shown_value(value)}: it holds {problem}; expected {PLAIN_VALUE}")


def to_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in {"true", "1", "yes", "on"}:
        return True
    if isinstance(value, str) and value.strip().lower() in {"false", "0", "no", "off"}:
        return False
    raise fail(name, value, "true or false")


def number_words(kind: type[int] | type[float], minimum: float, exclusive: bool, maximum: float) -> str:
    """What a number setting accepts, as its error and the configuration page say it ("a whole number >= 1 and
    <= 100")."""
    bound = f"> {minimum:g}" if exclusive else f">= {minimum:g}"
    return f"{'a whole number' if kind is int else 'a number'} {bound} and <= {maximum:g}"


def to_number(
    name: str, value: Any, kind: type[int] | type[float], minimum: float, exclusive: bool, maximum: float
) -> int | float:
    expected = number_words(kind, minimum, exclusive, maximum)
    if isinstance(value, bool):
        raise fail(name, value, expected)
    try:
        raw = kind(value.strip()) if isinstance(value, str) else value
        if kind is int and isinstance(raw, float):
            if not raw.is_integer():
                raise ValueError
            raw = int(raw)
        if not isinstance(raw, (int, float)):
            raise ValueError
        number = kind(raw)
    except (TypeError, ValueError, OverflowError):  # OverflowError: int(inf)
        raise fail(name, value, expected) from None
    if not (minimum < number <= maximum if exclusive else minimum <= number <= maximum):  # NaN fails too
        raise fail(name, value, expected)
    return number


def to_str_list(name: str, value: Any) -> tuple[str, ...]:
    """A comma list (`a,b`), a JSON list (`["a","b"]`), or a TOML/JSON list."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except ValueError:
                raise fail(name, value, "a comma list or a JSON list of strings") from None
        else:
            return tuple(part.strip() for part in text.split(",") if part.strip())
    if isinstance(value, (list, tuple)) and all(
        isinstance(item, (str, int)) and not isinstance(item, bool) for item in value
    ):
        return tuple(str(item).strip() for item in value)
    raise fail(name, value, "a comma list or a JSON list of strings")


def to_choice(choices: tuple[str, ...]) -> Callable[[str, Any], str]:
    def coerce(name: str, value: Any) -> str:
        if isinstance(value, str) and value.strip() in choices:
            return value.strip()
        raise fail(name, value, "one of " + ", ".join(choices), choices)

    return coerce


def to_text(name: str, value: Any) -> str:
    if isinstance(value, str):
        return value
    raise fail(name, value, "a string")


def to_dict(name: str, value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
            raise fail(name, value, "a JSON object") from None
    if isinstance(value, Mapping):
        return dict(value)
    raise fail(name, value, "a JSON object")


@dataclass(frozen=True)
class NumberCoercer:
    """The coercer of a number setting with a lower and an upper bound; `accepts` says which numbers."""

    kind: type[int] | type[float]
    minimum: float
    maximum: float
    exclusive: bool = False

    def __call__(self, name: str, value: Any) -> int | float:
        return to_number(name, value, self.kind, self.minimum, self.exclusive, self.maximum)

    @property
    def accepts(self) -> str:
        return number_words(self.kind, self.minimum, self.exclusive, self.maximum)


def number(kind: type[int] | type[float], minimum: float, maximum: float, exclusive: bool = False) -> NumberCoercer:
    return NumberCoercer(kind, minimum, maximum, exclusive)
