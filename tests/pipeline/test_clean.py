"""`doit clean` owns exactly its files, and removes paid answers only from a run it is told and asked to: real doit
commands in temp folders whose run folders hold pipeline files beside a researcher's own."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

from stages.config.run_command import clean_generations_command
from stages.config.settings import load_settings
from stages.exit_codes import CONFIG_ERROR, UNWRITABLE
from stages.generate.identity import check_identity, identity_of, write_identity
from tests.support.pipeline_support import assert_ok, output_of, run_doit
from tests.support.run_files import locked_folder

RUN = Path("results/scicode/gold/validation-tool_use-bg")
PIPELINE_FILES = (
    "summary.md",
    "summary.json",
    "report.html",
    "summary-ids-1.md",
    "summary-ids-1.json",
    "report-ids-1.html",
    "details/1.json",
    "not_scored/3.json",
    "plots/rates.png",
    "plots-ids-1/rates.png",
    "export/steps.csv",
    "export-ids-1/steps.csv",
)
RESEARCHER_FILES = (
    "plots.py",
    "export.sh",
    "summary_notes.md",
    "summary-draft.md",
    "summary.md.bak",
    "plots_for_paper/figure.png",
    "export_final/table.csv",
    "report for reviewers.html",
    "reports.html",
)
RECORDS = ("selection-ids-1.json", "config-ids-1.json", "generations/1.json")


def write_files(root: Path, names: tuple[str, ...]) -> None:
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(json.dumps({"file": name}), encoding="utf-8")


def clean(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_doit(workdir, "clean", *args, timeout=120)


def test_clean_removes_only_the_names_the_pipeline_writes(tmp_path: Path) -> None:
    run = tmp_path / RUN
    write_files(run, PIPELINE_FILES + RESEARCHER_FILES + RECORDS)

    cleaned = clean(tmp_path)

    assert_ok(cleaned)
    assert [name for name in PIPELINE_FILES if (run / name).exists()] == []
    assert [name for name in RESEARCHER_FILES + RECORDS if not (run / name).is_file()] == []
    assert "generations kept" in cleaned.stdout


def test_clean_unlinks_a_symbolic_link_and_never_follows_it(tmp_path: Path) -> None:
    run = tmp_path / RUN
    elsewhere = tmp_path / "elsewhere"
    write_files(elsewhere, ("details/1.json", "plots/figure.png", "notes.md"))
    run.mkdir(parents=True)
    (run / "details").symlink_to(elsewhere / "details", target_is_directory=True)
    (run / "plots").symlink_to(elsewhere / "plots", target_is_directory=True)
    (run / "summary.md").symlink_to(elsewhere / "notes.md")

    cleaned = clean(tmp_path)

    assert_ok(cleaned)
    assert "Traceback" not in output_of(cleaned)
    assert not any(os.path.lexists(run / name) for name in ("details", "plots", "summary.md"))
    assert sorted(path.relative_to(elsewhere).as_posix() for path in elsewhere.rglob("*") if path.is_file()) == [
        "details/1.json",
        "notes.md",
        "plots/figure.png",
    ]


def test_a_folder_clean_cannot_empty_gives_one_line_and_a_nonzero_exit(tmp_path: Path) -> None:
    run = tmp_path / RUN
    write_files(run, ("details/1.json", "summary.md"))

    with locked_folder(run / "details"):
        cleaned = clean(tmp_path)

    assert cleaned.returncode == UNWRITABLE.code, output_of(cleaned)
    assert "Traceback" not in output_of(cleaned)
    lines = cleaned.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("scicode: cannot clean "), cleaned.stderr
    assert f"cannot clean {RUN / 'details'}: " in lines[0] and "(1.json)" in lines[0] and "writable" in lines[0]
    assert (run / "details" / "1.json").is_file()


def test_clean_generate_removes_nothing_unless_the_run_is_named_and_confirmed(
    tmp_path: Path, staged_data_dir: Path
) -> None:
    run = tmp_path / RUN
    write_files(run, ("generations/1.json", "generations/1@1.json", "generations/3.json", "replies/3.jsonl"))
    named = clean_generations_command(load_settings({"model": "gold"}))
    assert named == "doit clean generate model=gold run=validation-tool_use-bg confirm=true"

    bare = clean(tmp_path, "generate")
    assert bare.returncode == CONFIG_ERROR.code, output_of(bare)
    lines = bare.stderr.strip().splitlines()
    assert len(lines) == 1, bare.stderr
    assert "removed nothing" in lines[0] and "names no run" in lines[0]
    assert f"run folder {RUN} holds 3 generation file(s) of 2 problem(s)" in lines[0]
    assert f"`{named}`" in lines[0]

    unconfirmed = clean(tmp_path, "generate", "model=gold")
    assert unconfirmed.returncode == CONFIG_ERROR.code and "confirm=true is missing" in unconfirmed.stderr
    unnamed = clean(tmp_path, "generate", "confirm=true")
    assert unnamed.returncode == CONFIG_ERROR.code and "names no run" in unnamed.stderr
    one = clean(tmp_path, "generate:3", "run=validation-tool_use-bg")
    assert "holds 1 generation file(s) of 1 problem(s)" in one.stderr
    assert "`doit clean generate:3 model=gold run=validation-tool_use-bg confirm=true`" in one.stderr
    assert sorted(path.name for path in (run / "generations").iterdir()) == ["1.json", "1@1.json", "3.json"]
    assert (run / "replies" / "3.jsonl").is_file()

    removed = clean(tmp_path, "generate:3", "model=gold", "run=validation-tool_use-bg", "confirm=true")
    assert_ok(removed)
    assert "removed generations of problem 3: generations/3.json, 3.jsonl" in removed.stdout
    assert sorted(path.name for path in (run / "generations").iterdir()) == ["1.json", "1@1.json"]


def test_the_refusal_of_other_generation_settings_spells_the_clean_with_the_runs_variables(tmp_path: Path) -> None:
    first = load_settings({"model": "gold", "results_dir": str(tmp_path / "out"), "run": "my run"})
    write_identity(first, identity_of(first), "first run")
    write_files(first.run_paths.run_dir, ("generations/1.json",))
    changed = load_settings({"model": "gold", "results_dir": str(tmp_path / "out"), "run": "my run", "mode": "naive"})

    found = check_identity(changed, record=False)

    assert found is not None
    results_word = shlex.quote(f"results_dir={tmp_path / 'out'}")
    assert f"`doit clean generate model=gold 'run=my run' {results_word} confirm=true` first" in found.refusal()
