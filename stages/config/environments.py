"""Grading environments: `environments=NAME:PYTHON,...`, the interpreters every scored step runs in.

Unset (the default), a step runs in `python_binary` only, as it always has. Set, every scored step runs in each
named interpreter, in the order given, each under the full confinement; the step passes when any environment
passes it (SciCode-Verified's multi-environment protocol). The setting's value is kept as its canonical text
(`NAME:PYTHON` pairs joined by commas), so it enters fingerprints, config.json and the run identity as one string;
`parse_environments` gives the typed records.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from stages.config.values import fail

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,31}")
ALLOWED = (
    "NAME:PYTHON[,NAME:PYTHON...] with distinct names of letters, digits, '.', '_', '-' (at most 32) and a python path"
)


@dataclass(frozen=True)
class Environment:
    """One grading environment: its name (as reports show it) and its interpreter (as given: a venv's `bin/python`
    runs with that venv's packages)."""

    name: str
    python: str

    @property
    def text(self) -> str:
        return f"{self.name}:{self.python}"


class EnvironmentsError(ValueError):
    """An `environments=` value that cannot be read; one line naming the bad part."""


def parse_environments(text: str) -> tuple[Environment, ...]:
    """The environments of a canonical or raw `environments=` text ("" -> none); EnvironmentsError when a part is
    not NAME:PYTHON, a name is malformed or repeated, or a python path is empty."""
    found: list[Environment] = []
    for part in (piece.strip() for piece in text.split(",")):
        if not part:
            continue
        name, colon, python = part.partition(":")
        name, python = name.strip(), python.strip()
        if not colon or not python:
            raise EnvironmentsError(f"{part!r} is not NAME:PYTHON")
        if not NAME_PATTERN.fullmatch(name):
            raise EnvironmentsError(f"environment name {name!r} is malformed")
        if any(known.name == name for known in found):
            raise EnvironmentsError(f"environment name {name!r} is given twice")
        found.append(Environment(name, python))
    return tuple(found)


def environments_text(environments: tuple[Environment, ...]) -> str:
    """The canonical `environments=` text of `environments`."""
    return ",".join(environment.text for environment in environments)


def to_environments(name: str, value: Any) -> str:
    """The coercer of `environments=`: its canonical text; ConfigError naming the bad part and the allowed form."""
    if isinstance(value, (list, tuple)):
        value = ",".join(str(item) for item in value)
    if not isinstance(value, str):
        raise fail(name, value, ALLOWED)
    try:
        return environments_text(parse_environments(value))
    except EnvironmentsError as error:
        raise fail(name, value, f"{ALLOWED} ({error})") from None
