"""What voids cached verdicts: the code that decides a verdict (the test process, the checker, what both use, the
kernel confinement, the verdict record), found from the layout of stages/score/, not the code that schedules
steps (the parent side)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from stages.score.parent import cache
from stages.score.parent.script import CodeSection, StepScript

VERDICT_PACKAGES = ("test_process", "checker", "shared")


@pytest.fixture
def scoring_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of stages/score/, stages/execution/confinement/ and the verdict record that the hashes read instead."""
    project = tmp_path / "project"
    stages_copy = project / "stages"
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(cache.SCORE_DIR, stages_copy / "score", ignore=ignore)
    shutil.copytree(cache.CONFINEMENT_DIR, stages_copy / "confinement", ignore=ignore)
    for source in cache.VERDICT_RECORD_SOURCES:
        shutil.copyfile(source, stages_copy / source.name)
    monkeypatch.setattr(cache, "SCORE_DIR", stages_copy / "score")
    monkeypatch.setattr(cache, "PROJECT_DIR", project)
    monkeypatch.setattr(cache, "CONFINEMENT_DIR", stages_copy / "confinement")
    monkeypatch.setattr(
        cache, "VERDICT_RECORD_SOURCES", tuple(stages_copy / source.name for source in cache.VERDICT_RECORD_SOURCES)
    )
    return stages_copy


def _hashes() -> tuple[str, str]:
    cache.verdict_sources_hash.cache_clear()
    cache.scoring_code_hash.cache_clear()
    return cache.verdict_sources_hash(), cache.scoring_code_hash()


@pytest.fixture(autouse=True)
def fresh_hashes() -> Iterator[None]:
    yield
    cache.verdict_sources_hash.cache_clear()
    cache.scoring_code_hash.cache_clear()


def _sources_under(folder: Path) -> list[str]:
    """The sources of `folder`, relative to stages/."""
    return sorted(path.relative_to(cache.SCORE_DIR.parent).as_posix() for path in folder.rglob("*.py"))


def _append(path: Path) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("\n# edited\n")


def test_the_verdict_packages_are_every_sub_package_but_the_parent_side() -> None:
    assert [folder.name for folder in cache.verdict_packages()] == sorted(VERDICT_PACKAGES)
    sources = set(cache.verdict_sources())
    for name in VERDICT_PACKAGES:
        assert set((cache.SCORE_DIR / name).rglob("*.py")) <= sources
    assert not sources & set((cache.SCORE_DIR / cache.PARENT_PACKAGE).rglob("*.py"))


@pytest.mark.parametrize("edited", _sources_under(cache.SCORE_DIR / cache.PARENT_PACKAGE) + ["score/__init__.py"])
def test_editing_the_parent_side_keeps_cached_verdicts_and_rewrites_details(scoring_copy: Path, edited: str) -> None:
    verdicts, details = _hashes()
    _append(scoring_copy / edited)
    assert _hashes()[0] == verdicts
    assert _hashes()[1] != details


@pytest.mark.parametrize(
    "edited",
    [source for name in VERDICT_PACKAGES for source in _sources_under(cache.SCORE_DIR / name)]
    + ["confinement/confine.py", "confinement/__init__.py", "verdict.py", "statuses.py"],
)
def test_editing_what_decides_a_verdict_voids_cached_verdicts(scoring_copy: Path, edited: str) -> None:
    verdicts, details = _hashes()
    _append(scoring_copy / edited)
    assert _hashes()[0] != verdicts
    assert _hashes()[1] != details


@pytest.mark.parametrize(
    "added", ["score/test_process/helper.py", "score/checker/rule.py", "score/shared/runtime/scicode/extra.py"]
)
def test_a_new_file_of_a_verdict_package_is_in_the_key(scoring_copy: Path, added: str) -> None:
    verdicts, details = _hashes()
    (scoring_copy / added).write_text("VALUE = 1\n", encoding="utf-8")
    assert _hashes()[0] != verdicts
    assert _hashes()[1] != details


def test_a_new_sub_package_is_in_the_key_unless_it_is_the_parent_side(scoring_copy: Path) -> None:
    verdicts, _ = _hashes()
    (scoring_copy / "score" / "parent" / "planner.py").write_text("VALUE = 1\n", encoding="utf-8")
    assert _hashes()[0] == verdicts
    package = scoring_copy / "score" / "judges"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    assert _hashes()[0] != verdicts


def _script(*sections: tuple[str, str]) -> StepScript:
    return StepScript("19", "19.2", "import numpy as np\n", tuple(CodeSection(*s) for s in sections), ("assert 1",))


def test_the_verdict_key_is_made_of_the_parts_as_sent_and_the_limits() -> None:
    from stages.score.parent.limits import StepLimits
    from stages.storage.artifacts import fingerprint

    limits = StepLimits("/usr/bin/python3", 60.0, 2048, "landlock+seccomp+namespaces", scratch_limit_mb=512)
    versions = {"numpy": "1.26.4", "python": "3.11.7"}
    script = _script(("step 19.1 code", "x = 1\n"), ("step 19.2 code", "y = 2\n"))
    expected = fingerprint(
        {
            "format": cache.CACHE_FORMAT,
            "script": {
                "step_id": "19.2",
                "deps": "import numpy as np\n",
                "sections": [
                    {"label": "step 19.1 code", "code": "x = 1\n"},
                    {"label": "step 19.2 code", "code": "y = 2\n"},
                ],
                "tests": ["assert 1"],
            },
            "targets": "ab" * 32,
            "versions": versions,
            "timeout": 60.0,
            "memory_mb": 2048,
            "scratch_limit_mb": 512,
            "confinement": "landlock+seccomp+namespaces",
            "verdict_sources": cache.verdict_sources_hash(),
        }
    )
    assert cache.verdict_key(script, "ab" * 32, versions, limits) == expected
    other_interpreter = StepLimits("/opt/python", 60.0, 2048, "landlock+seccomp+namespaces", scratch_limit_mb=512)
    assert cache.verdict_key(script, "ab" * 32, versions, other_interpreter) == expected  # versions name it


BLOCK = "if 'step 19.2' in __import__('sys')._getframe().f_code.co_filename:\n    tensor = None\n"
AT_THE_END = (("step 19.1 code", "x = 1\n\n\n" + BLOCK), ("step 19.2 code", "y = 2\n"))
AT_THE_START = (("step 19.1 code", "x = 1\n"), ("step 19.2 code", BLOCK + "\n\ny = 2\n"))
TWO = (("step 19.1 code", "x = 1\n"), ("step 19.2 code", "y = 2\n"))
RELABELLED = (("step 19.0 code", "x = 1\n"), ("step 19.2 code", "y = 2\n"))
MERGED = (("step 19.2 code", "x = 1\n\n\ny = 2\n"),)


@pytest.mark.parametrize(
    ("first", "second"),
    [(AT_THE_END, AT_THE_START), (TWO, RELABELLED), (TWO, MERGED)],
    ids=["a block moved to the end of the step before", "another label", "one section for two"],
)
def test_scripts_rendered_alike_whose_sections_differ_have_different_keys(
    first: tuple[tuple[str, str], ...], second: tuple[tuple[str, str], ...]
) -> None:
    from stages.score.parent.limits import StepLimits

    limits = StepLimits("/usr/bin/python3", 60.0, 2048, "none (test)")
    one, other = _script(*first), _script(*second)
    assert one.official_text("<targets>") == other.official_text("<targets>")  # what the key was before
    assert cache.verdict_key(one, None, {}, limits) != cache.verdict_key(other, None, {}, limits)
    assert cache.verdict_key(other, None, {}, limits) == cache.verdict_key(_script(*second), None, {}, limits)
