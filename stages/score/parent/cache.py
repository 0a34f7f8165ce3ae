"""The verdict cache: one JSON file per step verdict, keyed by everything that can change it.

Key = sha256 of (what the engine sends of the step's script: its id, dependencies, every code section with its label
and every test cell, each whole and apart in canonical JSON (`StepScript.sent_parts`; the official rendering, which
joins sections with blank lines, would let two answers whose sections differ share a key), the targets file's sha256, the interpreter
and library versions, the timeout, the memory and scratch limits, the confinement the test process runs
under (its one-line description: a verdict reached without the seccomp filter is not reused with it), the
verdict sources hash: the sources of the packages that decide a verdict (`verdict_packages`: the test
process, the checker, what both use), of the kernel confinement and of the verdict record). The parent side
(this package) is not in it. Regenerating one step changes only the scripts that contain its code; rescoring
unchanged generations runs no test process. `durations.json` keeps each step's last measured duration
(for longest-first scheduling). Infrastructure failures (eval_error) are never cached.
"""

from __future__ import annotations

import hashlib
import json
import threading
from functools import lru_cache
from pathlib import Path

from stages.records.verdict import StepVerdict
from stages.score.parent.limits import StepLimits
from stages.score.parent.script import StepScript
from stages.storage.artifacts import atomic_write_text, fingerprint

CACHE_FORMAT = 2  # 2: keyed on the sections as sent, not the rendered script (format 1)
CACHEABLE = ("pass", "fail", "timeout")
DEFAULT_EXPECTED_SECONDS = 1.0
SCORE_DIR = Path(__file__).resolve().parents[1]  # stages/score/
PROJECT_DIR = SCORE_DIR.parents[1]
PARENT_PACKAGE = "parent"  # this package: schedules steps and writes details, decides no verdict
CONFINEMENT_DIR = SCORE_DIR.parent / "execution" / "confinement"
# Outside stages/score/, the verdict record and its status vocabulary decide what a cached verdict holds.
VERDICT_RECORD_SOURCES = (SCORE_DIR.parent / "records" / "verdict.py", SCORE_DIR.parent / "statuses.py")


def _python_files(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.py"))


def verdict_packages() -> list[Path]:
    """The sub-packages of stages/score/ whose code decides a verdict: all but the parent side (today
    test_process/, checker/ and shared/)."""
    return sorted(
        folder for folder in SCORE_DIR.iterdir() if (folder / "__init__.py").is_file() and folder.name != PARENT_PACKAGE
    )


def verdict_sources() -> list[Path]:
    """The files a verdict depends on besides its script: every source of the `verdict_packages` (the test
    process, the checker and the rules of a verdict, the wire format, framing, zygote and runtime shims), the
    kernel confinement, and the verdict record."""
    packages = [path for folder in verdict_packages() for path in _python_files(folder)]
    return [*packages, *_python_files(CONFINEMENT_DIR), *VERDICT_RECORD_SOURCES]


def scoring_sources() -> list[Path]:
    """Every source of the scoring code: the parent side, `verdict_sources`, and the package's own `__init__`."""
    return sorted({*_python_files(SCORE_DIR), *verdict_sources()})


@lru_cache(maxsize=1)
def verdict_sources_hash() -> str:
    """sha256 over `verdict_sources`: part of every verdict cache key."""
    return _sources_hash(verdict_sources())


@lru_cache(maxsize=1)
def scoring_code_hash() -> str:
    """sha256 over all the scoring code, the parent side included: part of the details' fingerprint, so a
    changed stage rewrites the details (from cached verdicts when `verdict_sources_hash` is unchanged)."""
    return _sources_hash(scoring_sources())


def _sources_hash(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.relative_to(PROJECT_DIR).as_posix().encode("utf-8"))
        digest.update(path.read_bytes())
    return digest.hexdigest()


def verdict_key(script: StepScript, targets_sha256: str | None, versions: dict[str, str], limits: StepLimits) -> str:
    """The key of a step's verdict: its script's parts as the engine sends them, targets and interpreter versions,
    the limits it ran under and the sources that decide verdicts (the test process, the checker and the rewriting
    of each test cell into what each of them receives)."""
    return fingerprint(
        {
            "format": CACHE_FORMAT,
            "script": script.sent_parts(),
            "targets": targets_sha256,
            "versions": versions,
            **limits.key_parts(),
            "verdict_sources": verdict_sources_hash(),
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
        record = {**verdict.to_cache(), "key": key}
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
