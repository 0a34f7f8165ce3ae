"""What voids cached verdicts: the code that decides a verdict, not the code that schedules steps."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from stages.score import cache


@pytest.fixture
def scoring_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of stages/score/, stages/confinement/ and the verdict record that the hashes read instead."""
    stages_copy = tmp_path / "project" / "stages"
    shutil.copytree(cache.SOURCE_DIR, stages_copy / "score")
    shutil.copytree(cache.CONFINEMENT_DIR, stages_copy / "confinement")
    for source in cache.VERDICT_SOURCES:
        shutil.copyfile(source, stages_copy / source.name)
    monkeypatch.setattr(cache, "SOURCE_DIR", stages_copy / "score")
    monkeypatch.setattr(cache, "CONFINEMENT_DIR", stages_copy / "confinement")
    monkeypatch.setattr(cache, "VERDICT_SOURCES", tuple(stages_copy / source.name for source in cache.VERDICT_SOURCES))
    return stages_copy


def _hashes() -> tuple[str, str]:
    cache.harness_hash.cache_clear()
    cache.scoring_code_hash.cache_clear()
    return cache.harness_hash(), cache.scoring_code_hash()


@pytest.fixture(autouse=True)
def fresh_hashes():
    yield
    cache.harness_hash.cache_clear()
    cache.scoring_code_hash.cache_clear()


@pytest.mark.parametrize("edited", ["score/stage.py", "score/executor.py", "score/pool.py"])
def test_editing_orchestration_keeps_cached_verdicts_and_rewrites_details(scoring_copy: Path, edited: str) -> None:
    verdicts, details = _hashes()
    with open(scoring_copy / edited, "a", encoding="utf-8") as handle:
        handle.write("\n# edited\n")
    assert _hashes()[0] == verdicts
    assert _hashes()[1] != details


@pytest.mark.parametrize(
    "edited",
    [
        "score/engine.py",
        "score/checker.py",
        "score/wire.py",
        "score/harness.py",
        "confinement/confine.py",
        "verdict.py",
        "statuses.py",
    ],
)
def test_editing_what_decides_a_verdict_voids_cached_verdicts(scoring_copy: Path, edited: str) -> None:
    verdicts, details = _hashes()
    with open(scoring_copy / edited, "a", encoding="utf-8") as handle:
        handle.write("\n# edited\n")
    assert _hashes()[0] != verdicts
    assert _hashes()[1] != details
