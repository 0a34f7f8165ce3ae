"""How a setting is declared: once, as a field of `Settings` whose metadata is a `Declared` record.

A field's name, type annotation and default are the setting's name, type and default; its `Declared` record holds
the rest: how a raw value is read (its coercer), the allowed values, one line of documentation, which stages'
fingerprints cover it (always, or only while a condition holds), whether summary.md records it, and how its value
is kept out of the recorded configuration when it may hold a secret. Everything else is derived from these
records: the coercers, the stage-input lists, summary.md's recorded list and the configuration page
(`scripts/configuration_page.py`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from stages.config.values import to_choice

T = TypeVar("T")
Stage = Literal["download", "select", "generate", "score"]
STAGES: tuple[Stage, ...] = ("download", "select", "generate", "score")
Coercer = Callable[[str, Any], Any]
# A condition over the whole `Settings`. Typed over Any here, because the declaration cannot import the `Settings` it
# declares without an import circle: each condition is a function of stages/config/settings.py whose parameter is
# annotated `Settings` (so mypy checks its body there; tests/config/test_configuration_page.py keeps it so).
InEffect = Callable[[Any], bool]
# How a value that may hold a secret is shown in config.json: "" never holds one.
Secrecy = Literal["", "url credentials", "secret-named keys"]
METADATA_KEY = "declared"


@dataclass(frozen=True)
class Declared:
    """Everything about one setting but its name, type and default (those are the field's)."""

    coerce: Coercer
    doc: str
    allowed: tuple[str, ...] = ()  # the values it accepts, where they are a fixed list (errors suggest the closest)
    stages: tuple[Stage, ...] = ()  # the stages whose fingerprint always covers it
    # Stages whose fingerprint covers it only while the condition holds: a setting added later enters a
    # fingerprint only when set, so artifacts written before it existed stay current (nothing is re-billed).
    stages_when: Mapping[Stage, InEffect] = field(default_factory=dict)
    recorded: bool = False  # summary.md lists it among the settings that shape the scores
    secrecy: Secrecy = ""
    shown_default: str = ""  # the default as the page shows it, where it is computed (the CPU count, ...)
    group: str = "run"  # the section of the configuration page


def choice(allowed: tuple[str, ...], doc: str, **declared: Any) -> Declared:
    """The declaration of a setting that takes one of `allowed` (its coercer reads exactly those)."""
    return Declared(to_choice(allowed), doc, allowed=allowed, **declared)


def setting(default: T, declared: Declared) -> T:
    """A `Settings` field with an immutable default."""
    made: T = dataclasses.field(default=default, metadata={METADATA_KEY: declared})
    return made


def setting_from(factory: Callable[[], T], declared: Declared) -> T:
    """A `Settings` field whose default is made per instance (a mapping)."""
    made: T = dataclasses.field(default_factory=factory, metadata={METADATA_KEY: declared})
    return made


def declared_of(fields: tuple[dataclasses.Field[Any], ...]) -> dict[str, Declared]:
    """Each field's `Declared` record, by setting name, in declaration order; every field must have one."""
    records: dict[str, Declared] = {}
    for item in fields:
        record = item.metadata.get(METADATA_KEY)
        if not isinstance(record, Declared):
            raise TypeError(f"setting {item.name} has no declaration")
        records[item.name] = record
    return records


def stage_inputs_of(records: Mapping[str, Declared]) -> dict[Stage, tuple[str, ...]]:
    """The settings each stage's fingerprint always covers, in declaration order."""
    return {stage: tuple(name for name, record in records.items() if stage in record.stages) for stage in STAGES}


def optional_stage_inputs_of(records: Mapping[str, Declared]) -> dict[Stage, dict[str, InEffect]]:
    """The settings each stage's fingerprint covers while their condition holds, in declaration order."""
    found: dict[Stage, dict[str, InEffect]] = {}
    for name, record in records.items():
        for stage, in_effect in record.stages_when.items():
            found.setdefault(stage, {})[name] = in_effect
    return found
