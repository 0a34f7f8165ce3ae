"""Where a run's numbers come from: when the run started (its recorded invocations), and which version of this project
wrote them (the summary, the export). The targets its verdicts were scored against are the summarize stage's
(`stages.summarize.targets_info`)."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from datetime import datetime, timezone
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from stages.records.invocations import invocations
from stages.records.summary import ProjectVersion, RecordedInvocation
from stages.storage.json_values import JSONObject
from stages.storage.paths import IMPORT_ROOT, RunPaths

PROJECT_NAME = "scicode-pipeline"
GIT_TIMEOUT_SECONDS = 5.0


def _utc(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def recorded_invocations(paths: RunPaths, problem_ids: Sequence[str]) -> tuple[RecordedInvocation, ...]:
    """The run's invocations that generated or scored the problems, as the summary records them."""
    return tuple(
        RecordedInvocation(
            found.started_text(), found.ended_text(), round(found.seconds, 3), found.stages, found.problems
        )
        for found in invocations(paths, frozenset(problem_ids))
    )


def run_started(paths: RunPaths, problem_ids: Sequence[str]) -> str | None:
    """When the run's first invocation started (`stages.records.invocations`). For a run recorded before
    invocations were: the earliest generation or details file time (when its first problem finished), else
    config.json's time; None when neither exists."""
    recorded = invocations(paths, frozenset(problem_ids))
    if recorded:
        return recorded[0].started_text()
    times = []
    for problem_id in problem_ids:
        for path in (paths.generation(problem_id), paths.details(problem_id)):
            try:
                times.append(path.stat().st_mtime)
            except FileNotFoundError:
                continue
    if not times:
        try:
            times.append(paths.config.stat().st_mtime)
        except FileNotFoundError:
            return None
    return _utc(min(times))


def _git(*args: str) -> str | None:
    """The output of a git command in the folder stages/ is imported from; None when git or a repository is not
    there."""
    try:
        done = subprocess.run(
            ["git", "-C", str(IMPORT_ROOT), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _runs_from_its_checkout() -> bool:
    """Whether stages/ is imported from the top of a git work tree: this project's checkout. An installed package
    (site-packages of a venv) may lie inside some other repository, a user's project, whose commit is not this
    project's."""
    top = _git("rev-parse", "--show-toplevel")
    return top is not None and Path(top).resolve() == IMPORT_ROOT.resolve()


@lru_cache(maxsize=1)
def project_version() -> ProjectVersion:
    """This project's name, installed version and git commit (None outside its checkout; `dirty` when tracked files
    differ from it)."""
    try:
        version: str | None = metadata.version(PROJECT_NAME)
    except metadata.PackageNotFoundError:
        version = None
    commit = _git("rev-parse", "HEAD") if _runs_from_its_checkout() else None
    changes = _git("status", "--porcelain", "--untracked-files=no") if commit else None
    return ProjectVersion(PROJECT_NAME, version, commit, bool(changes) if commit else None)


def project_record() -> JSONObject:
    """`project_version` as a JSON object (the export's header records it)."""
    return project_version().to_record()
