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


def fail(name: str, value: Any, allowed: str, choices: Iterable[str] = (), word: str | None = None) -> ConfigError:
    """The one-line error of a bad value; with `choices`, the ones closest to the bad word (`word`, else the value)
    come first."""
    shown = value if isinstance(value, str) else json.dumps(value, default=str)
    if isinstance(shown, str) and len(shown) > 80:
        shown = shown[:77] + "..."
    word = word if word is not None else value if isinstance(value, str) else None
    hint = did_you_mean(word, choices) if word is not None else ""
    return ConfigError(f"invalid {name}={shown!s}: {hint}expected {allowed}")


def to_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in {"true", "1", "yes", "on"}:
        return True
    if isinstance(value, str) and value.strip().lower() in {"false", "0", "no", "off"}:
        return False
    raise fail(name, value, "true or false")


def number_words(kind: type[int] | type[float], minimum: float, exclusive: bool) -> str:
    """What a number setting accepts, as its error and the configuration page say it ("a whole number >= 1")."""
    bound = f"> {minimum:g}" if exclusive else f">= {minimum:g}"
    return f"{'a whole number' if kind is int else 'a number'} {bound}"


def to_number(name: str, value: Any, kind: type[int] | type[float], minimum: float, exclusive: bool) -> int | float:
    expected = number_words(kind, minimum, exclusive)
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
    except (TypeError, ValueError):
        raise fail(name, value, expected) from None
    if number != number or (number <= minimum if exclusive else number < minimum):
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
        except ValueError:
            raise fail(name, value, "a JSON object") from None
    if isinstance(value, Mapping):
        return dict(value)
    raise fail(name, value, "a JSON object")


@dataclass(frozen=True)
class NumberCoercer:
    """The coercer of a number setting with a lower bound; `accepts` says which numbers."""

    kind: type[int] | type[float]
    minimum: float
    exclusive: bool = False

    def __call__(self, name: str, value: Any) -> int | float:
        return to_number(name, value, self.kind, self.minimum, self.exclusive)

    @property
    def accepts(self) -> str:
        return number_words(self.kind, self.minimum, self.exclusive)


def number(kind: type[int] | type[float], minimum: float, exclusive: bool = False) -> NumberCoercer:
    return NumberCoercer(kind, minimum, exclusive)
