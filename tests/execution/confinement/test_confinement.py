"""What confines model code here, how a run states it, and `confinement=required`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stages.config.settings import ConfigError, load_settings
from stages.execution.confinement import CONFINE_SCRIPT, ConfinementUnavailable, check_confinement, confinement_of
from stages.select.stage import run_select
from tests.support.run_artifacts import json_str, read_record

DODO = Path(__file__).resolve().parents[3] / "dodo.py"


@pytest.fixture
def failing_interpreter(tmp_path: Path) -> str:
    """An 'interpreter' whose confinement probe fails (as on a kernel or container that gives nothing)."""
    script = tmp_path / "python-without-confinement"
    script.write_text("#!/bin/sh\necho 'no landlock here' >&2\nexit 1\n")
    script.chmod(0o755)
    return str(script)


def test_this_machine_gives_full_confinement() -> None:
    record = confinement_of(sys.executable)
    assert record["full"] is True, record
    description = json_str(record["description"])
    assert description.startswith(f"landlock ABI {record['landlock_abi']}, fs+net+scope")
    assert "pid+net+ipc+mount namespaces" in description
    assert "seccomp filter" in description and "no seccomp" not in description
    assert "scratch on a size-limited tmpfs, memory bounded per " in description
    assert check_confinement("required", sys.executable) == record["description"]


def test_a_machine_without_confinement_says_so_and_required_refuses(failing_interpreter: str) -> None:
    description = check_confinement("auto", failing_interpreter)
    assert description.startswith("none (the confinement probe failed: no landlock here")
    with pytest.raises(ConfinementUnavailable, match="confinement=required, but model code here would run under: none"):
        check_confinement("required", failing_interpreter)


def test_confinement_setting_values(tmp_path: Path) -> None:
    assert load_settings({}, cwd=tmp_path).confinement == "auto"
    with pytest.raises(ConfigError, match="confinement"):
        load_settings({"confinement": "strict"}, cwd=tmp_path)


def test_config_json_records_the_confinement(tmp_path: Path, staged_data_dir: Path) -> None:
    settings = load_settings({"data_dir": str(staged_data_dir), "results_dir": str(tmp_path / "results")}, cwd=tmp_path)
    run_select(settings)
    config = read_record(settings.run_paths.config, "config")
    assert config["confinement"] == confinement_of(sys.executable)["description"]


def test_doit_with_required_confinement_that_is_missing_stops_with_one_line(
    tmp_path: Path, failing_interpreter: str
) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "doit",
            "-f",
            str(DODO),
            "-d",
            str(tmp_path),
            "list",
            "confinement=required",
            f"python_binary={failing_interpreter}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "confinement=required, but model code here would run under: none" in lines[0], (
        result.stderr
    )


def test_launcher_confines_a_program_and_passes_its_exit_status(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    code = (
        "import os, sys\nopen('inside.txt', 'w').write('ok')\n"
        f"try:\n    open({str(tmp_path / 'outside.txt')!r}, 'w')\nexcept PermissionError:\n    sys.exit(7)\n"
    )
    result = subprocess.run(
        [sys.executable, str(CONFINE_SCRIPT), "--write", str(scratch), "--python", "--", "-c", code],
        cwd=scratch,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": os.defpath},
    )
    assert result.returncode == 7, result.stderr
    assert (scratch / "inside.txt").read_text() == "ok" and not (tmp_path / "outside.txt").exists()


@pytest.mark.parametrize(
    ("missing", "named"),
    [
        (
            {"seccomp": False, "seccomp_reason": "the pyseccomp binding is not installed"},
            "no seccomp filter (the pyseccomp",
        ),
        ({"scratch_tmpfs": False, "scratch_reason": "no mount namespace"}, "scratch bounded per file only (no mount"),
    ],
)
def test_a_missing_filter_or_tmpfs_is_named_and_required_refuses(tmp_path: Path, missing: dict, named: str) -> None:
    from stages.execution.confinement.confine import Confinement

    record = Confinement(
        landlock_abi=7, namespaces="pid+net+ipc+mount", capabilities_dropped=True, seccomp=True, scratch_tmpfs=True
    )
    record = Confinement(**{**record.__dict__, **missing})
    script = tmp_path / "python-with-less"
    script.write_text(f"#!/bin/sh\necho '{json.dumps(record.as_record())}'\n")
    script.chmod(0o755)
    description = check_confinement("auto", str(script))
    assert named in description and description.startswith("landlock ABI 7")
    with pytest.raises(ConfinementUnavailable, match="full confinement needs Landlock ABI >= 6, PID and mount"):
        check_confinement("required", str(script))
