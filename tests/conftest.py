"""Shared fixtures: the read-only official data beside the project, and staged copies of it."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[1]
SHARED_SCICODE = PROJECT_ROOT.parent / "shared" / "scicode"
STAGED_FILES = (
    "problems_dev.jsonl",
    "problems_test.jsonl",
    "multistep_template.txt",
    "background_comment_template.txt",
    "13.6.txt",
    "62.1.txt",
    "76.3.txt",
)


@pytest.fixture(scope="session")
def shared_scicode() -> Path:
    """`../shared/scicode` (official files, read-only); skips when absent."""
    if not (SHARED_SCICODE / "problems_dev.jsonl").is_file():
        pytest.skip(f"official SciCode data not found at {SHARED_SCICODE} (see README: Test data)")
    return SHARED_SCICODE


@pytest.fixture
def staged_data_dir(tmp_path: Path, shared_scicode: Path) -> Path:
    """A data_dir whose scicode/ folder holds copies of the official problem files (no targets)."""
    data_dir = tmp_path / "data"
    (data_dir / "scicode").mkdir(parents=True)
    for name in STAGED_FILES:
        shutil.copyfile(shared_scicode / name, data_dir / "scicode" / name)
    return data_dir
