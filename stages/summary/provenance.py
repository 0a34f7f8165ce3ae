"""Where a run's verdicts come from: the targets they were scored against, and when the run started."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Literal

from stages.config import Settings
from stages.paths import RunPaths

TargetsKind = Literal["official", "explicit", "derived", "missing", "unknown"]


@dataclass(frozen=True)
class TargetsInfo:
    kind: TargetsKind
    note: str


def resolve_targets_info(settings: Settings) -> TargetsInfo:
    """Which targets the steps were scored against (official, explicit file, derived, missing)."""
    try:
        from stages.targets import resolve_targets
    except ImportError as error:
        return TargetsInfo("unknown", f"targets could not be resolved: {error}")
    try:
        resolved = resolve_targets(settings)
    except Exception as error:  # a summary is still written; the reason is shown in its first lines
        return TargetsInfo("unknown", f"targets could not be resolved: {type(error).__name__}: {error}")
    return TargetsInfo(resolved.kind, str(resolved.note or ""))


def _utc(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_started(paths: RunPaths, problem_ids: Sequence[str]) -> str | None:
    """Earliest generation or details file time of the run; else config.json's time; None when neither exists."""
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
