"""Real doit runs of the wiring in a temp folder: incrementality of download and select, config errors."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from stages.config.command_line import CommandLine
from stages.pipeline.tasks import ON_REQUEST, STAGES

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEAD_URL = "http://127.0.0.1:9/scicode.zip"  # nothing listens on the discard port: download falls through


def run_doit(workdir: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "doit", "-f", str(PROJECT_ROOT / "dodo.py"), "-d", str(workdir), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=workdir)


@pytest.fixture
def workdir(tmp_path: Path, staged_data_dir: Path) -> Path:
    return tmp_path


DOIT_OWN_TASKS = frozenset({"explain"})  # says why other tasks run; not a task kind of its own
PROBLEM_CREATOR = "problems"  # yields the generate:<id> and score:<id> tasks


def dodo_task_names(tree: ast.Module) -> set[str]:
    declared = {
        node.name.removeprefix("task_")
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("task_")
    }
    return (declared - {PROBLEM_CREATOR}) | {"generate", "score"}


def test_every_task_of_dodo_runs_a_registered_task_kind() -> None:
    """dodo.py is wiring only: each task runs a `TaskKind` of the registry (`tasks.<KIND>`), none a module named in a
    string."""
    tree = ast.parse((PROJECT_ROOT / "dodo.py").read_text(encoding="utf-8"))
    kinds = {**STAGES, **ON_REQUEST}
    assert dodo_task_names(tree) - DOIT_OWN_TASKS == set(kinds)
    used = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "tasks"
    }
    assert used == {name.upper() for name in kinds}
    named_modules = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("stages.")
    ]
    assert named_modules == []


def _mtime(path: Path) -> int:
    return path.stat().st_mtime_ns


def test_download_select_incremental(workdir: Path, staged_data_dir: Path) -> None:
    common = (f"data_dir={staged_data_dir}", f"dataset_zip_url={DEAD_URL}")
    first = run_doit(workdir, "select", *common)
    assert first.returncode == 0, first.stderr + first.stdout
    manifest = staged_data_dir / "scicode" / "manifest.json"
    selection = workdir / "results/scicode/gold/validation-tool_use-bg/selection.json"
    assert json.loads(selection.read_text())["split"] == "validation"
    stamps = (_mtime(manifest), _mtime(selection))

    second = run_doit(workdir, "select", *common)
    assert second.returncode == 0, second.stderr
    assert (_mtime(manifest), _mtime(selection)) == stamps  # nothing executed

    # Deleting doit's database changes nothing either: artifacts carry their own fingerprints.
    (workdir / ".scicode" / "doit.sqlite3").unlink()
    third = run_doit(workdir, "select", *common)
    assert third.returncode == 0, third.stderr
    assert (_mtime(manifest), _mtime(selection)) == stamps

    other = run_doit(workdir, "select", *common, "model=m", "split=test")
    assert other.returncode == 0, other.stderr
    assert _mtime(manifest) == stamps[0]  # download not rerun
    test_selection = workdir / "results/scicode/m/test-tool_use-bg/selection.json"
    assert len(json.loads(test_selection.read_text())["problems"]) == 65
    assert _mtime(selection) == stamps[1]  # the other run is untouched


def test_config_error_stops_before_any_work(workdir: Path, staged_data_dir: Path) -> None:
    result = run_doit(workdir, "select", f"data_dir={staged_data_dir}", "split=train", "model=m")
    assert result.returncode != 0
    assert "scicode: config error: invalid split=train: expected one of validation, test, all" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (staged_data_dir / "scicode" / "manifest.json").exists()
    assert not (workdir / "results").exists()


def test_unknown_sample_id_fails_with_one_line(workdir: Path, staged_data_dir: Path) -> None:
    result = run_doit(workdir, "select", f"data_dir={staged_data_dir}", f"dataset_zip_url={DEAD_URL}", "sample_ids=999")
    assert result.returncode != 0
    assert "invalid sample_ids: problem id 999 is not in split=validation" in result.stderr + result.stdout
    assert not (workdir / "results/scicode/gold/validation-tool_use-bg/selection.json").exists()


def test_list_works_without_a_selection(workdir: Path) -> None:
    result = run_doit(workdir, "list", "--all")
    assert result.returncode == 0, result.stderr
    for name in ("download", "select", "generate", "score", "summarize"):
        assert name in result.stdout


def test_list_info_forget_see_every_problem_task_after_select(workdir: Path, staged_data_dir: Path) -> None:
    common = (f"data_dir={staged_data_dir}", f"dataset_zip_url={DEAD_URL}", "sample_ids=1,3")
    assert run_doit(workdir, "select", *common).returncode == 0
    listed = run_doit(workdir, "list", "--all", *common)
    assert listed.returncode == 0, listed.stderr
    names = {line.split()[0] for line in listed.stdout.splitlines() if line.strip()}
    assert {"generate", "generate:1", "generate:3", "score", "score:1", "score:3", "summarize"} <= names
    info = run_doit(workdir, "info", "score:3", *common)
    assert info.returncode == 1, info.stderr  # doit's code for a task that is not up to date
    assert "status     : run" in info.stdout
    assert " - generate:3\n" in info.stdout and " - targets\n" in info.stdout  # score:3 depends on its generation
    forget = run_doit(workdir, "forget", "score:3", *common)
    assert forget.returncode == 0, forget.stderr
    assert "forgetting score:3" in forget.stdout


@pytest.mark.parametrize(
    ("argv", "tasks", "rescore"),
    [
        (["score", "model=x"], ["score"], True),
        (["-n", "4", "score:10"], ["score:10"], True),
        (["-s", "--pdb", "score:10"], ["score:10"], True),
        (["-k", "generate"], ["generate"], False),
        (["run", "score:1", "score:3"], ["score:1", "score:3"], True),
        ([], [], False),
        (["run"], [], False),
        (["generate:10"], ["generate:10"], False),
        (["score", "summarize"], ["score", "summarize"], False),
        (["list", "--all"], ["list"], False),
    ],
)
def test_requested_tasks(argv: list[str], tasks: list[str], rescore: bool) -> None:
    assert CommandLine.parse(argv).requested_tasks == tasks
    assert CommandLine.parse(argv).rescore_only is rescore


def test_the_collector_is_frozen_after_the_exit_handlers_registered_later(monkeypatch: pytest.MonkeyPatch) -> None:
    """doit commands end without walking every object at teardown; handlers registered after dodo.py is loaded
    (the zygote, the built-in endpoint, the run lock) still run first, as atexit runs them last in, first out."""
    import atexit
    import gc

    from stages.pipeline import wiring

    registered: list[object] = []
    monkeypatch.setattr(atexit, "register", registered.append)
    wiring.exit_without_final_collection()
    assert registered == [gc.freeze]
    dodo_lines = (Path(__file__).resolve().parents[2] / "dodo.py").read_text(encoding="utf-8").splitlines()
    assert "wiring.exit_without_final_collection()" in dodo_lines, "dodo.py registers it at import"


def test_a_mistyped_variable_is_one_line_suggesting_the_closest_name(workdir: Path, staged_data_dir: Path) -> None:
    result = run_doit(workdir, "select", f"data_dir={staged_data_dir}", "model=m", "sampel_ids=1")
    assert result.returncode == 3, result.stderr
    lines = [line for line in result.stderr.splitlines() if "config error" in line]
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert lines[0].startswith(
        "scicode: config error: unknown variable 'sampel_ids' (on the command line); did you mean sample_ids? known "
    )
    assert not (workdir / "results").exists()
