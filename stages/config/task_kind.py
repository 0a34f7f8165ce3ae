"""The shape of a doit task kind (a stage, the targets, the preflight, or a task run on request such as `runs`):
its action, its up-to-date check and what that check compares. Each stage package declares its own in its `task`
module; the registry and `explain` are `stages/pipeline/tasks.py`.

`run(settings, *key)` is the doit action and `is_up_to_date(settings, *key)` its up-to-date check, where `key` is
`()` for a run-level task and `(problem_id,)` for `generate:<id>` / `score:<id>` (the generate action also takes
the problem's admission priority). `artifacts(settings, *key)` names the artifacts the check compares and the
fingerprint parts they must carry, so `explain` can say why a task will run.

A stage's `task` module imports its stage inside these functions only: listing tasks or a no-op rerun must not
import the model client or the scoring engine unless a check needs it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from stages.config.fingerprints import FingerprintParts, changed_parts, run_relative

if TYPE_CHECKING:
    from stages.config.settings import Settings

ProblemKey = tuple[str, ...]  # () for a run-level task, (problem_id,) for a per-problem task


@dataclass(frozen=True)
class ArtifactCheck:
    """One artifact an up-to-date check compares: its file, its kind and the fingerprint parts it must carry."""

    path: Path
    kind: str
    expected: Callable[[], FingerprintParts]

    def reasons(self, settings: Settings, named: bool = False) -> list[str]:
        """Why this artifact is not current (empty when it carries the expected fingerprint); `named` puts the
        file's name before each changed part (for a task with several artifacts)."""
        from stages.storage.artifacts import read_artifact

        where = run_relative(settings, self.path)
        if not self.path.exists():
            return [f"no artifact yet ({where})"]
        record = read_artifact(self.path, self.kind)
        if record is None:
            return [f"artifact invalid ({where} does not validate against schemas/{self.kind}.schema.json)"]
        return [f"{where}: {line}" if named else line for line in changed_parts(record, self.expected())]


def no_artifacts(settings: Settings, *key: str) -> list[ArtifactCheck]:
    return []


def no_other_reason(settings: Settings, *key: str) -> list[str]:
    return ["its up-to-date condition is not met although its artifacts are current"]


def never_up_to_date(settings: Settings, *key: str) -> bool:
    """The check of a task that runs whenever it is named (an index, a comparison, an export, an environment build:
    never a default task)."""
    return False


def run_whenever_named(settings: Settings, *key: str) -> list[str]:
    return ["it runs whenever it is named (never up to date)"]


@dataclass(frozen=True)
class TaskKind:
    """A doit task kind: `run` is its action, `is_up_to_date` its check, both called as `(settings, *key)`.

    `artifacts` lists what the check compares; `other_reasons` says why the task runs when every artifact is
    current (a generation that ended in error, a run with failed problems, ...)."""

    name: str
    run: Callable[..., object]
    is_up_to_date: Callable[..., bool]
    artifacts: Callable[..., list[ArtifactCheck]] = no_artifacts
    other_reasons: Callable[..., list[str]] = no_other_reason
    per_problem: bool = False
