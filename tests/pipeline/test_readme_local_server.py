"""The README's local-server line runs as written on a machine without the official targets."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.support.pipeline_support import (
    TEST_API_KEY,
    ScriptedModel,
    assert_ok,
    data_args,
    run_dir,
    run_doit,
    steps_of,
)
from tests.support.run_files import summary_file

README = Path(__file__).resolve().parents[2] / "README.md"
LINE = re.compile(r"^ {4}(doit run model=<the id it serves> base_url=\S+ .*)$", re.MULTILINE)
MODEL = "local-model"


def readme_local_server_words(model: str = MODEL) -> list[str]:
    """The README's local-server command, as words after `doit` (`<the id it serves>` replaced by `model`)."""
    found = LINE.findall(README.read_text(encoding="utf-8"))
    assert len(found) == 1, found
    return shlex.split(found[0].replace("<the id it serves>", model), comments=True)[1:]


def test_the_line_names_its_split_and_targets() -> None:
    words = readme_local_server_words()
    assert "split=validation" in words, words
    (line,) = LINE.findall(README.read_text(encoding="utf-8"))
    assert line.endswith("# targets derived, no test_data.h5 needed")


@pytest.mark.slow
def test_the_readme_local_server_line_runs_without_the_official_targets(
    tmp_path: Path, staged_data_dir: Path, start_server
) -> None:
    """As written, on problem files without any targets file (only `sample_ids=` added, to keep it short)."""
    assert not list((staged_data_dir / "scicode").glob("*.h5"))
    server = start_server(ScriptedModel(steps_of(staged_data_dir, ("1",), "validation"), api_key=None))
    words = [word.replace("http://127.0.0.1:8080/v1", server.base_url) for word in readme_local_server_words()]
    result = run_doit(tmp_path, *words, *data_args(staged_data_dir, None), "sample_ids=1", timeout=1800)
    assert_ok(result)
    assert f"model={MODEL}" in words and f"base_url={server.base_url}" in words
    summary = summary_file(run_dir(tmp_path, MODEL, "validation-tool_use-bg"), "md").read_text(encoding="utf-8")
    assert "targets derived from reference code" in summary
    assert TEST_API_KEY not in summary
