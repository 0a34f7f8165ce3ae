"""`doit explain <task>`: real doit runs in a temp folder (built-in `gold` model), then a changed setting, a rewritten
generation, a missing and an invalid artifact, each explained by the named part that changed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stages.config.fingerprints import FingerprintParts, changed_parts
from stages.storage.artifacts import fingerprint, validate
from stages.storage.json_values import JSONObject

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEAD_URL = "http://127.0.0.1:9/scicode.zip"  # nothing listens on the discard port: download uses staged files
PROBLEM = "3"  # one quick validation problem
RUN = Path("results/scicode/gold/validation-naive-bg")


def run_doit(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "doit", "-f", str(PROJECT_ROOT / "dodo.py"), "-d", str(workdir), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=workdir)


def explained(workdir: Path, common: tuple[str, ...], *args: str) -> str:
    result = run_doit(workdir, "explain", *args, *common)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.fixture
def common(tmp_path: Path, staged_data_dir: Path, shared_scicode: Path) -> tuple[str, ...]:
    targets = tmp_path / "targets" / "test_data_dev.h5"
    targets.parent.mkdir()
    shutil.copyfile(shared_scicode / "test_data_dev.h5", targets)
    return (
        f"data_dir={staged_data_dir}",
        f"dataset_zip_url={DEAD_URL}",
        f"h5py_file={targets}",
        "mode=naive",
        f"sample_ids={PROBLEM}",
    )


def test_explain_names_the_changed_part(tmp_path: Path, common: tuple[str, ...]) -> None:
    workdir = tmp_path
    before = explained(workdir, common, f"score:{PROBLEM}", "download")
    assert f"score:{PROBLEM} will run: no artifact yet (details/{PROBLEM}.json)" in before
    assert "download will run: no artifact yet" in before

    run = run_doit(workdir, *common)
    assert run.returncode == 0, run.stdout + run.stderr
    details = workdir / RUN / "details" / f"{PROBLEM}.json"
    record = json.loads(details.read_text())
    assert set(record["fingerprint_parts"]) == {"settings", "inputs", "code", "libraries"}
    assert record["fingerprint_parts"]["settings"]["step_timeout_seconds"] == 1800.0

    current = explained(
        workdir,
        common,
        "download",
        "select",
        "preflight",
        "targets",
        f"generate:{PROBLEM}",
        f"score:{PROBLEM}",
        "summarize",
    )
    for task in ("download", "select", "preflight", "targets", f"generate:{PROBLEM}", f"score:{PROBLEM}", "summarize"):
        assert f"{task} is up to date" in current

    # A scoring setting changed: score says which one, from what to what; generation stays current.
    changed = explained(workdir, common, f"score:{PROBLEM}", f"generate:{PROBLEM}", "step_timeout_seconds=120")
    assert f"score:{PROBLEM} will run: settings changed (step_timeout_seconds 1800.0 -> 120.0)" in changed
    assert f"generate:{PROBLEM} is up to date" in changed

    # A generation rewritten (other code for a step): score names the file; nothing else changed.
    generation_path = workdir / RUN / "generations" / f"{PROBLEM}.json"
    generation = json.loads(generation_path.read_text())
    step = next(step for step in generation["steps"] if step.get("code"))
    step["code"] += "\n# edited\n"
    validate("generation", generation)
    generation_path.write_text(json.dumps(generation))
    rewritten = explained(workdir, common, f"score:{PROBLEM}", "summarize")
    assert f"score:{PROBLEM} will run: inputs changed: generations/{PROBLEM}.json was rewritten\n" in rewritten
    assert f"summarize will run: inputs changed: generations/{PROBLEM}.json was rewritten" in rewritten

    # An artifact that no longer validates.
    details.write_text("{}")
    assert (
        f"score:{PROBLEM} will run: artifact invalid (details/{PROBLEM}.json does not validate against "
        "schemas/details.schema.json)"
    ) in explained(workdir, common, f"score:{PROBLEM}")


def test_explain_targets_to_derive(tmp_path: Path, staged_data_dir: Path) -> None:
    """No targets file given: once a validation problem is selected, the derived targets are what will run."""
    settings = (f"data_dir={staged_data_dir}", f"dataset_zip_url={DEAD_URL}", "model=gold", f"sample_ids={PROBLEM}")
    assert run_doit(tmp_path, "select", *settings).returncode == 0
    derived = staged_data_dir / "scicode" / "derived_targets.json"
    assert f"targets will run: no artifact yet ({derived})" in explained(tmp_path, settings, "targets")


def test_explain_rejects_an_unknown_task_with_one_line(tmp_path: Path, common: tuple[str, ...]) -> None:
    result = run_doit(tmp_path, "explain", "score", *common)
    assert result.returncode != 0
    assert (
        "cannot explain task 'score'; allowed: download, select, targets, preflight, generate:<id>, score:<id>, "
        "summarize" in result.stdout + result.stderr
    )
    assert "Traceback" not in result.stdout + result.stderr


def _parts(value: str, timeout: float, generation: str) -> FingerprintParts:
    return FingerprintParts(
        value,
        settings={"step_timeout_seconds": timeout},
        inputs={"generations/3.json": generation},
        code={"scoring harness": "h1"},
        libraries={"numpy": "2.0"},
    )


def test_changed_parts_names_each_changed_part() -> None:
    stored = _parts(fingerprint(1), 60.0, "aaaa").record()
    assert changed_parts(stored, _parts(fingerprint(1), 60.0, "aaaa")) == []
    assert changed_parts(stored, _parts(fingerprint(2), 120.0, "bbbb")) == [
        "settings changed (step_timeout_seconds 60.0 -> 120.0)",
        "inputs changed: generations/3.json was rewritten",
    ]
    newer = FingerprintParts(fingerprint(2), code={"scoring harness": "h2"}, libraries={"numpy": "2.1"})
    assert changed_parts(_parts(fingerprint(1), 60.0, "aaaa").record(), newer)[2:] == [
        "code changed: scoring harness",
        'libraries changed: numpy "2.0" -> "2.1"',
    ]


def test_an_artifact_without_parts_is_stale_with_a_clear_reason() -> None:
    older: JSONObject = {"fingerprint": fingerprint(1)}
    assert changed_parts(older, _parts(fingerprint(2), 60.0, "aaaa")) == [
        "fingerprint changed (the artifact predates fingerprint parts, so which part changed is not recorded)"
    ]
