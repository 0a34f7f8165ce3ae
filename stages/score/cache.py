"""The verdict cache: one JSON file per step verdict, keyed by everything that can change it.

Key = sha256 of (the step's official test script text, the targets file's sha256, the interpreter
and library versions, the timeout, the memory and scratch limits, the confinement the test process runs
under (its one-line description: a verdict reached without the seccomp filter is not reused with it), the
harness source hash). Regenerating one step changes only the scripts that contain its code; rescoring
unchanged generations runs no test process. `durations.json` keeps each step's last measured duration
(for longest-first scheduling). Infrastructure failures (eval_error) are never cached.
"""

from __future__ import annotations

import hashlib
import json
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

from stages.artifacts import atomic_write_text, fingerprint
from stages.verdict import StepVerdict

CACHE_FORMAT = 1
CACHEABLE = ("pass", "fail", "timeout")
DEFAULT_EXPECTED_SECONDS = 1.0
SOURCE_DIR = Path(__file__).resolve().parent
CONFINEMENT_DIR = SOURCE_DIR.parent / "confinement"
# Outside stages/score/, the verdict record and its status vocabulary decide what a cached verdict holds.
VERDICT_SOURCES = (SOURCE_DIR.parent / "verdict.py", SOURCE_DIR.parent / "statuses.py")
# Modules of stages/score/ that only schedule steps and write details: they cannot change a verdict, so
# editing them does not void the cache (the test script itself is part of every key).
ORCHESTRATION = frozenset({"stage.py", "executor.py", "dask_executor.py", "request.py", "pool.py"})


def verdict_sources() -> list[Path]:
    """The files a verdict depends on besides its script: the engine, test process, checker, wire format,
    rewrite, launch and runtime shims, the confinement code, and the verdict record."""
    scoring = [
        path
        for path in sorted(SOURCE_DIR.rglob("*.py"))
        if path.relative_to(SOURCE_DIR).as_posix() not in ORCHESTRATION
    ]
    return [*scoring, *sorted(CONFINEMENT_DIR.rglob("*.py")), *VERDICT_SOURCES]


@lru_cache(maxsize=1)
def harness_hash() -> str:
    """sha256 over `verdict_sources`: part of every verdict cache key."""
    return _sources_hash(verdict_sources())


@lru_cache(maxsize=1)
def scoring_code_hash() -> str:
    """sha256 over all the scoring code, orchestration included: part of the details' fingerprint, so a
    changed stage rewrites the details (from cached verdicts when `harness_hash` is unchanged)."""
    return _sources_hash([*sorted(SOURCE_DIR.rglob("*.py")), *sorted(CONFINEMENT_DIR.rglob("*.py")), *VERDICT_SOURCES])


def _sources_hash(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(str(path.relative_to(SOURCE_DIR.parent.parent)).encode("utf-8"))
        digest.update(path.read_bytes())
    return digest.hexdigest()


def verdict_key(
    script_text: str,
    targets_sha256: str | None,
    versions: dict[str, str],
    timeout_seconds: float,
    memory_mb: int | None,
    scratch_limit_mb: int,
    confinement: str,
) -> str:
    return fingerprint(
        {
            "format": CACHE_FORMAT,
            "script": script_text,
            "targets": targets_sha256,
            "versions": versions,
            "timeout": timeout_seconds,
            "memory_mb": memory_mb,
            "scratch_limit_mb": scratch_limit_mb,
            "confinement": confinement,
            "harness": harness_hash(),
        }
    )


class VerdictCache:
    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self._lock = threading.Lock()
        self._durations: dict[str, float] | None = None

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> StepVerdict | None:
        try:
            record = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict) or record.get("key") != key or record.get("status") not in CACHEABLE:
            return None
        try:
            return StepVerdict.from_cache(record)
        except TypeError:
            return None

    def put(self, key: str, verdict: StepVerdict) -> None:
        if verdict.status not in CACHEABLE:
            return
        record: dict[str, Any] = {**verdict.to_cache(), "key": key}
        record.pop("cached", None)
        atomic_write_text(self._path(key), json.dumps(record, ensure_ascii=False) + "\n")
        self.record_duration(verdict.step_id, verdict.duration_s)

    # -- durations ----------------------------------------------------------------
    @property
    def durations_path(self) -> Path:
        return self.folder / "durations.json"

    def _load_durations(self) -> dict[str, float]:
        if self._durations is None:
            try:
                loaded = json.loads(self.durations_path.read_text(encoding="utf-8"))
                self._durations = {str(k): float(v) for k, v in loaded.items()} if isinstance(loaded, dict) else {}
            except (OSError, ValueError, TypeError):
                self._durations = {}
        return self._durations

    def expected_seconds(self, step_id: str, default: float = DEFAULT_EXPECTED_SECONDS) -> float:
        """The step's last measured duration; `default` when it never ran here."""
        with self._lock:
            return self._load_durations().get(step_id, default)

    def record_duration(self, step_id: str, seconds: float) -> None:
        with self._lock:
            durations = self._load_durations()
            durations[step_id] = round(float(seconds), 3)
            atomic_write_text(self.durations_path, json.dumps(durations, sort_keys=True, indent=0) + "\n")


_CACHES: dict[Path, VerdictCache] = {}
_CACHES_LOCK = threading.Lock()


def cache_at(folder: Path) -> VerdictCache:
    """One cache object per folder and process (its locks are shared by all threads)."""
    key = Path(folder).resolve()
    with _CACHES_LOCK:
        if key not in _CACHES:
            _CACHES[key] = VerdictCache(key)
        return _CACHES[key]
