"""A run folder is one configuration: the generation settings it was made with, recorded at its first run.

The identity is the generate stage's settings slice (`stages.config.fingerprints.settings_slice(settings, "generate")`, the
very settings the generation fingerprint covers, so the two never disagree), plus the replay file's digest under
`model=replay:<file>` (the file is the model), plus, for a manifest-bound dataset, the md5 its manifest states
for the problem file (added to identity.json once the files are staged), plus, in tool_use without a sandbox, the
library versions of the interpreter local snippets run in (`python_binary` by what it holds, not by its path: a moved
virtualenv with the same libraries is the same configuration), plus the endpoint (`ENDPOINT_KEY`: base_url without
credentials or query, `built-in` for the built-in models): for a local model the server's template and weights are
part of what is measured, so answers of one endpoint are not resumed against another unless `endpoint_change=resume`
says so (the identity then takes the new endpoint). An identity recorded before endpoints were part of it takes the
current one.

`identity.json` is written at the folder's first run. A folder from before identities existed adopts the settings
its generations were made with (each generation records its settings slice), so nothing is asked again. Commands
that run tasks refuse with one line when a generation setting differs (`IdentityMismatch`); the others print the
difference and go on. Scoring-only settings are not part of the identity: they change within a folder freely.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from stages.config.fingerprints import settings_slice
from stages.config.run_command import clean_generations_command
from stages.config.settings import ConfigError, Settings
from stages.execution.versions import package_versions
from stages.records.endpoint import BUILTIN_ENDPOINT, endpoint_url
from stages.records.generation import read_generation_file
from stages.storage.artifacts import read_frozen, sha256_file, write_artifact
from stages.storage.json_values import FrozenObject, JSONObject, JSONValue, obj, thaw_object

Origin = Literal["first run", "adopted from generations"]
REPLAY_KEY = "replay file"
ENDPOINT_KEY = "endpoint"
# Parts an identity recorded before they existed lacks: such an identity takes the current value (nothing to compare).
ADDED_PARTS: tuple[str, ...] = (ENDPOINT_KEY,)
INTERPRETER_KEY = "snippet interpreter"
PROBLEMS_MD5_KEY = "problems md5"  # a manifest-bound dataset: the md5 its manifest states for the problem file
# Parts known only once the data is staged: compared when both sides have them, and added to identity.json when it
# lacks them (a first run records its identity before the download).
FILLED_LATER: frozenset[str] = frozenset({PROBLEMS_MD5_KEY})
INTERPRETER_LIBRARIES: tuple[str, ...] = ("numpy", "scipy", "sympy", "mpmath", "h5py")
_VERSIONS_PROBE = (
    "import json, platform; from importlib import metadata\n"
    "def version(name):\n"
    "    try:\n"
    "        return metadata.version(name)\n"
    "    except metadata.PackageNotFoundError:\n"
    "        return 'absent'\n"
    "print(json.dumps({'python': platform.python_version(), 'implementation': platform.python_implementation(), "
    "**{name: version(name) for name in NAMES}}))\n"
)
_INTERPRETERS: dict[str, dict[str, str]] = {}


class IdentityMismatch(ConfigError):
    """A command that would generate or score under other generation settings than the run folder's."""


@dataclass(frozen=True)
class IdentityDifference:
    """The generation settings that differ between a run folder's identity and the current settings."""

    run_dir: str
    changes: tuple[tuple[str, JSONValue, JSONValue], ...]  # (setting, recorded value, current value)
    clean_command: str = "doit clean generate"  # spelled with the run's variables (stages/config/run_command.py)

    def names(self) -> str:
        return ", ".join(name for name, _, _ in self.changes)

    def shown(self) -> str:
        return ", ".join(
            f"{name} {_shown(name, before)} -> {_shown(name, after)}" for name, before, after in self.changes
        )

    def refusal(self) -> str:
        endpoint = (
            ", or endpoint_change=resume to continue this run against the new endpoint on purpose"
            if any(name == ENDPOINT_KEY for name, _, _ in self.changes)
            else ""
        )
        return (
            f"run folder {self.run_dir} was generated with other generation settings ({self.shown()}): "
            f"choose a new run=<name> for this configuration, or `{self.clean_command}` first to replace this "
            f"folder's generations (they cost model calls){endpoint}"
        )

    def note(self) -> str:
        return f"note: run folder {self.run_dir} was generated with other generation settings ({self.shown()})"


def _shown(name: str, value: JSONValue) -> str:
    if value is None:
        return "(unset)"
    if name == INTERPRETER_KEY and isinstance(value, str):
        return value  # already one phrase: `CPython 3.11.7 (numpy 2.4.6, ...)`
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def interpreter_versions(python_binary: str) -> dict[str, str]:
    """Interpreter and library versions of `python_binary`, read from package metadata (nothing imported, so a
    fraction of a second); {"python": "unavailable"} when it cannot run."""
    if python_binary not in _INTERPRETERS and _is_this_interpreter(python_binary):
        _INTERPRETERS[python_binary] = {
            "python": platform.python_version(),
            "implementation": platform.python_implementation(),
            **package_versions(INTERPRETER_LIBRARIES),
        }
    if python_binary not in _INTERPRETERS:
        code = f"NAMES = {list(INTERPRETER_LIBRARIES)!r}\n" + _VERSIONS_PROBE
        try:
            result = subprocess.run(
                [python_binary, "-I", "-c", code],
                capture_output=True,
                timeout=60,
                check=False,
                stdin=subprocess.DEVNULL,
            )
            versions = json.loads(result.stdout.decode("utf-8")) if result.returncode == 0 else None
        except (OSError, subprocess.SubprocessError, ValueError):
            versions = None
        valid = isinstance(versions, dict) and all(isinstance(v, str) for v in versions.values())
        _INTERPRETERS[python_binary] = dict(versions) if valid and versions else {"python": "unavailable"}
    return dict(_INTERPRETERS[python_binary])


def interpreter_text(versions: Mapping[str, str]) -> str:
    """`CPython 3.11.7 (h5py 3.16.0, numpy 2.4.6, ...)`: an interpreter by what it holds."""
    libraries = ", ".join(f"{name} {version}" for name, version in sorted(versions.items()) if name not in _HEAD)
    head = " ".join(versions[name] for name in _HEAD if name in versions)
    return f"{head} ({libraries})" if libraries else head


_HEAD: tuple[str, ...] = ("implementation", "python")


def _is_this_interpreter(python_binary: str) -> bool:
    """The path this process runs as (not resolved: a virtualenv's python links to its base interpreter, whose
    libraries differ)."""
    return os.path.abspath(python_binary) == os.path.abspath(sys.executable)


def _replay_digest(model: str) -> str:
    """The replay file's content digest (the file is the model), as the generation fingerprint covers it."""
    from stages.generate.builtin import replay_file

    try:
        return sha256_file(replay_file(model))[:16]
    except OSError:
        return "missing"


def snippets_run_locally(settings: Settings) -> bool:
    return settings.mode == "tool_use" and not settings.sandbox_url


def identity_of(settings: Settings) -> JSONObject:
    """The run identity of `settings` (see the module docstring)."""
    identity = settings_slice(settings, "generate")
    identity.update(_extra_parts(settings))
    return identity


def endpoint_part(settings: Settings) -> str:
    """The endpoint as the identity records it (module docstring)."""
    from stages.generate.builtin import is_builtin_model

    return BUILTIN_ENDPOINT if is_builtin_model(settings.model) else endpoint_url(settings.base_url)


def _extra_parts(settings: Settings) -> dict[str, str]:
    parts: dict[str, str] = {ENDPOINT_KEY: endpoint_part(settings)}
    if settings.model.startswith("replay:"):
        parts[REPLAY_KEY] = _replay_digest(settings.model)
    if snippets_run_locally(settings):
        parts[INTERPRETER_KEY] = interpreter_text(interpreter_versions(settings.python_binary))
    problems_md5 = _problems_md5(settings)
    if problems_md5 is not None:
        parts[PROBLEMS_MD5_KEY] = problems_md5
    return parts


def _problems_md5(settings: Settings) -> str | None:
    """The md5 the dataset's manifest states for its problem file; None when not bound or not staged yet."""
    from stages.benchmark.datasets import ProblemDataError

    try:
        return settings.benchmark.problems_md5()
    except ProblemDataError:
        return None


def recorded_identity(settings: Settings) -> JSONObject | None:
    """The folder's identity.json settings, else those its generations were made with (a folder from before
    identities existed), else None (a new folder)."""
    recorded = _identity_file_settings(settings)
    if recorded is None:
        return _adopted(settings)
    if ENDPOINT_KEY not in recorded and (answered := _answered_endpoint(settings)) is not None:
        recorded[ENDPOINT_KEY] = answered
    return recorded


def _answered_endpoint(settings: Settings) -> str | None:
    """The base_url of the endpoint that answered last in the folder's first generation that records one."""
    generations = settings.run_paths.generations_dir
    for path in sorted(generations.glob("*.json")) if generations.is_dir() else ():
        generation = read_generation_file(path)
        if generation is not None and generation.endpoints:
            return generation.endpoints[-1].base_url
    return None


def _adopted(settings: Settings) -> JSONObject | None:
    """The settings slice recorded by the folder's generations, with the parts generations do not record (the
    replay digest, the snippet interpreter) taken from the current settings."""
    generations = settings.run_paths.generations_dir
    for path in sorted(generations.glob("*.json")) if generations.is_dir() else ():
        generation = read_generation_file(path)
        parts = generation.stamp.parts if generation else None
        recorded = thaw_object(obj(parts.get("settings"))) if parts is not None else {}
        if recorded:
            answered = _answered_endpoint(settings)
            return {**recorded, **_extra_parts(settings), **({ENDPOINT_KEY: answered} if answered else {})}
    return None


def difference(
    recorded: JSONObject, current: JSONObject, run_dir: str, clean_command: str = "doit clean generate"
) -> IdentityDifference | None:
    """The settings whose values differ (a setting absent on one side is unset there); None when none does."""
    recorded = {**{name: current[name] for name in ADDED_PARTS if name in current}, **recorded}
    names = sorted(set(recorded) | set(current))
    compared = [name for name in names if name not in FILLED_LATER or (name in recorded and name in current)]
    changes = tuple(
        (name, recorded.get(name), current.get(name)) for name in compared if recorded.get(name) != current.get(name)
    )
    return IdentityDifference(run_dir, changes, clean_command) if changes else None


def _identity_file_settings(settings: Settings) -> JSONObject | None:
    record = read_frozen(settings.run_paths.identity, "identity")
    recorded = record.get("settings") if record is not None else None
    return thaw_object(recorded) if isinstance(recorded, Mapping) else None


def holds_generations(settings: Settings) -> bool:
    """Whether the folder holds a generation file: only answers pin its configuration (a run that stopped before
    any, e.g. in the endpoint preflight, leaves the folder free)."""
    generations = settings.run_paths.generations_dir
    return generations.is_dir() and any(generations.glob("*.json"))


def check_identity(settings: Settings, *, record: bool) -> IdentityDifference | None:
    """The difference between the folder's identity and `settings` (None: the same configuration, or a folder
    without generations). With `record`, the folder's identity.json is written when it has none (the adopted
    identity, else the current one) and rewritten with the current one while no generation exists."""
    recorded = recorded_identity(settings) if holds_generations(settings) else None
    if recorded is None and not record:
        return None
    current = identity_of(settings)
    if recorded is None:
        if record and _identity_file_settings(settings) != current:
            write_identity(settings, current, "first run")
        return None
    if record and not settings.run_paths.identity.is_file():
        write_identity(settings, recorded, "adopted from generations")
    elif record and ENDPOINT_KEY not in (_identity_file_settings(settings) or {}):
        # an identity from before endpoints were part of it: the endpoint its answers name, else this one
        recorded = {ENDPOINT_KEY: current[ENDPOINT_KEY], **recorded}
        write_identity(settings, recorded, _identity_origin(settings))
    found = difference(recorded, current, str(settings.run_paths.run_dir), clean_generations_command(settings))
    if found is not None and settings.endpoint_change == "resume":
        found = _resumed_endpoint(settings, found, recorded, record=record)
    filled = {name: current[name] for name in FILLED_LATER if name in current and name not in recorded}
    if record and found is None and filled and settings.run_paths.identity.is_file():
        write_identity(settings, {**recorded, **filled}, _identity_origin(settings))
    return found


def _resumed_endpoint(
    settings: Settings, found: IdentityDifference, recorded: JSONObject, *, record: bool
) -> IdentityDifference | None:
    """Under endpoint_change=resume: the difference without the endpoint; with `record`, the folder's identity
    takes the current endpoint (its answers so far keep the endpoint they name)."""
    others = tuple(change for change in found.changes if change[0] != ENDPOINT_KEY)
    if len(others) == len(found.changes):
        return found
    if record and not others:
        origin = _identity_origin(settings)
        write_identity(settings, {**recorded, ENDPOINT_KEY: endpoint_part(settings)}, origin)
    return IdentityDifference(found.run_dir, others, found.clean_command) if others else None


def _identity_origin(settings: Settings) -> Origin:
    """How identity.json came to be, as it says (kept when it is written again with parts known later)."""
    record = read_frozen(settings.run_paths.identity, "identity")
    return "adopted from generations" if record and record.get("origin") == "adopted from generations" else "first run"


def write_identity(settings: Settings, identity: JSONObject, origin: Origin) -> None:
    settings.run_paths.run_dir.mkdir(parents=True, exist_ok=True)
    write_artifact(
        settings.run_paths.identity, "identity", {"status": "complete", "settings": dict(identity), "origin": origin}
    )


def forget_identity(settings: Settings) -> bool:
    """Remove identity.json (after `doit clean generate` removed every generation); True when it existed."""
    path = settings.run_paths.identity
    if path.is_file():
        path.unlink()
        return True
    return False


def where_snippets_ran(config_settings: FrozenObject) -> str:
    """One phrase for the summary and report header: where tool snippets ran, from config.json's settings."""
    if config_settings.get("mode") != "tool_use":
        return "no snippets (naive mode)"
    sandbox = config_settings.get("sandbox_url") or ""
    if sandbox:
        return f"sandbox {sandbox}"
    return f"local ({config_settings.get('python_binary') or 'python'})"
