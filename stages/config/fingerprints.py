"""Fingerprints by named part: what each artifact's `fingerprint` covers, kept beside it so a stale task says why.

Every stage computes its fingerprint as it always has (the value decides staleness); `FingerprintParts` holds that
value together with the same inputs sorted into four named parts, each a small mapping of names to JSON values:

- `settings`: the stage's settings slice, by setting name, as `config.json` shows it (secrets redacted);
- `inputs`: a digest per input file or record (`generations/10.json`, `problem 10`, `targets`, ...);
- `code`: a digest per piece of the project's code the output depends on (the scoring harness, ...);
- `libraries`: the version of each library (and interpreter) the output depends on.

An artifact stores them as `fingerprint_parts`; `changed_parts` compares a stored record with the parts computed
now and says, in one line per part, what changed ("settings changed (step_timeout_seconds 60 -> 120)").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from stages.storage.artifacts import fingerprint
from stages.storage.json_values import JSONObject, JSONValue

if TYPE_CHECKING:
    from stages.config.settings import Settings, Stage

PartName = Literal["settings", "inputs", "code", "libraries"]
PART_NAMES: tuple[PartName, ...] = ("settings", "inputs", "code", "libraries")
_INPUT_VERBS: dict[bool, str] = {True: "was rewritten", False: "changed"}


@dataclass(frozen=True)
class FingerprintParts:
    """A stage's fingerprint (`value`, as the stage computes it) and what it covers, by named part."""

    value: str
    settings: Mapping[str, JSONValue] = field(default_factory=dict)
    inputs: Mapping[str, JSONValue] = field(default_factory=dict)
    code: Mapping[str, JSONValue] = field(default_factory=dict)
    libraries: Mapping[str, JSONValue] = field(default_factory=dict)

    def part(self, name: PartName) -> Mapping[str, JSONValue]:
        return {"settings": self.settings, "inputs": self.inputs, "code": self.code, "libraries": self.libraries}[name]

    def parts(self) -> JSONObject:
        return {name: dict(self.part(name)) for name in PART_NAMES}

    def record(self) -> JSONObject:
        """The two fields an artifact carries: `fingerprint` and `fingerprint_parts`."""
        return {"fingerprint": self.value, "fingerprint_parts": self.parts()}


def digest(value: Any) -> str:
    """A short digest of an input's identity (enough to tell that it changed)."""
    return fingerprint(value)[:16]


def settings_slice(settings: Settings, stage: Stage) -> JSONObject:
    """The settings `stage`'s fingerprint covers, by name, with the values config.json shows (no secret)."""
    shown = settings.redacted()
    return {name: shown[name] for name in settings.stage_inputs(stage)}


def run_relative(settings: Settings, path: Path) -> str:
    """`path` relative to the run folder when inside it (`generations/10.json`), else as given."""
    try:
        return str(Path(path).relative_to(settings.run_paths.run_dir))
    except ValueError:
        return str(path)


# ---------------------------------------------------------------------------
# Explaining a stored record against the parts computed now
# ---------------------------------------------------------------------------


def changed_parts(stored: JSONObject, current: FingerprintParts) -> list[str]:
    """One line per named part that differs between a stored artifact record and `current`; empty when the
    fingerprint is the current one. A record written before parts were stored says so."""
    if stored.get("fingerprint") == current.value:
        return []
    recorded = stored.get("fingerprint_parts")
    if not isinstance(recorded, dict):
        return ["fingerprint changed (the artifact predates fingerprint parts, so which part changed is not recorded)"]
    lines = [
        line for name in PART_NAMES if (line := _part_line(name, _stored_part(recorded, name), current.part(name)))
    ]
    return lines or ["fingerprint changed (no recorded part differs: the fingerprint covers more than its parts)"]


def _stored_part(parts: JSONObject, name: PartName) -> JSONObject:
    part = parts.get(name)
    return part if isinstance(part, dict) else {}


def _part_line(part: PartName, before: Mapping[str, JSONValue], after: Mapping[str, JSONValue]) -> str | None:
    names = sorted(set(before) | set(after))
    changed = [name for name in names if before.get(name) != after.get(name)]
    if not changed:
        return None
    if part == "settings":
        return (
            "settings changed ("
            + ", ".join(f"{name} {_shown(before.get(name))} -> {_shown(after.get(name))}" for name in changed)
            + ")"
        )
    if part == "inputs":
        return "inputs changed: " + ", ".join(
            _input_change(name, before.get(name), after.get(name)) for name in changed
        )
    return f"{part} changed: " + ", ".join(
        f"{name} {_shown(before.get(name))} -> {_shown(after.get(name))}" if part == "libraries" else name
        for name in changed
    )


def _input_change(name: str, before: JSONValue, after: JSONValue) -> str:
    if before is None:
        return f"{name} appeared"
    if after is None:
        return f"{name} is gone"
    return f"{name} {_INPUT_VERBS[name.endswith('.json')]}"


def _shown(value: JSONValue) -> str:
    import json

    return "(unset)" if value is None else json.dumps(value, ensure_ascii=False, sort_keys=True)
