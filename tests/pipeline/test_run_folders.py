"""A run folder is one configuration, and subsets are views: real doit runs of the gold model in temp folders."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from stages.exit_codes import CONFIG_ERROR
from tests.support.fake_sandbox import FakeSandbox, run_result
from tests.support.pipeline_support import assert_ok, data_args, load_json, output_of, run_dir, run_doit
from tests.support.run_files import summary_file

PROBLEMS = "sample_ids=1,3"


def gold(workdir: Path, data: Path, targets: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_doit(workdir, *data_args(data, targets), "model=gold", *extra)


def generation_mtimes(run: Path) -> dict[str, int]:
    return {path.name: path.stat().st_mtime_ns for path in sorted((run / "generations").glob("*.json"))}


@pytest.mark.slow
def test_a_generation_setting_never_changes_inside_a_run_folder(
    workdir: Path, staged_data_dir: Path, dev_targets: Path
) -> None:
    def doit(*extra: str) -> subprocess.CompletedProcess[str]:
        return gold(workdir, staged_data_dir, dev_targets, *extra)

    assert_ok(doit(PROBLEMS))
    run = run_dir(workdir, "gold", "validation-tool_use-bg")
    assert load_json(run / "identity.json")["origin"] == "first run"
    assert "- snippets ran: local (" in summary_file(run, "md").read_text(encoding="utf-8")
    before = generation_mtimes(run)

    with FakeSandbox([(200, run_result(stdout="probe 1 2 3\n"))]) as sandbox:
        toggled = doit(PROBLEMS, f"sandbox_url={sandbox.url}")
        assert toggled.returncode == CONFIG_ERROR.code, output_of(toggled)
        lines = toggled.stderr.strip().splitlines()
        assert len(lines) == 1, toggled.stderr
        assert f'sandbox_url "" -> "{sandbox.url}"' in lines[0]
        assert "new run=<name>" in lines[0]
        assert "`doit clean generate model=gold run=validation-tool_use-bg confirm=true` first" in lines[0]
        assert sandbox.received == [] and generation_mtimes(run) == before
        print(f"$ doit {PROBLEMS} sandbox_url={sandbox.url}\n{toggled.stderr}")

        listed = run_doit(
            workdir, *data_args(staged_data_dir, dev_targets), "model=gold", "list", f"sandbox_url={sandbox.url}"
        )
        assert_ok(listed)
        assert "note: run folder" in listed.stderr and "sandbox_url" in listed.stderr
        # A command that only reads the run folder (export) uses no generation setting: no note about them.
        exported = run_doit(
            workdir, *data_args(staged_data_dir, dev_targets), "model=gold", "export", f"sandbox_url={sandbox.url}"
        )
        assert_ok(exported)
        assert "export: " in exported.stdout and "generation settings" not in output_of(exported), output_of(exported)

        elsewhere = doit(PROBLEMS, f"sandbox_url={sandbox.url}", "run=sandboxed")
        assert_ok(elsewhere)
        sandboxed = run_dir(workdir, "gold", "sandboxed")
        assert f"- snippets ran: sandbox {sandbox.url}" in summary_file(sandboxed, "md").read_text(encoding="utf-8")
        assert 'id="snippets-ran">sandbox ' in (sandboxed / "report-ids-1_3.html").read_text(encoding="utf-8")

    # A scoring-only setting re-scores in the same folder, without a model call.
    rescored = doit(PROBLEMS, "step_timeout_seconds=120")
    assert_ok(rescored)
    assert "score      2/2 done" in rescored.stderr and generation_mtimes(run) == before

    # A folder from before identities adopts the settings its generations were made with.
    (run / "identity.json").unlink()
    refused = doit(PROBLEMS, "code_timeout_seconds=60")
    assert refused.returncode == CONFIG_ERROR.code and "code_timeout_seconds 180.0 -> 60.0" in refused.stderr
    assert load_json(run / "identity.json")["origin"] == "adopted from generations"

    # `doit clean generate` is the other way forward: the next run records its own configuration.
    cleaned = run_doit(
        workdir,
        *data_args(staged_data_dir, dev_targets),
        "model=gold",
        PROBLEMS,
        "clean",
        "generate",
        "code_timeout_seconds=60",
        "confirm=true",
    )
    assert_ok(cleaned)
    assert "removed the run identity" in cleaned.stdout and not (run / "identity.json").exists()
    assert_ok(doit(PROBLEMS, "code_timeout_seconds=60"))
    assert load_json(run / "identity.json")["settings"]["code_timeout_seconds"] == 60.0


@pytest.mark.slow
def test_a_subset_run_never_changes_what_other_commands_see(
    workdir: Path, staged_data_dir: Path, dev_targets: Path
) -> None:
    def doit(*extra: str) -> subprocess.CompletedProcess[str]:
        return gold(workdir, staged_data_dir, dev_targets, *extra)

    assert_ok(doit(PROBLEMS))
    assert_ok(doit("sample_ids=1"))
    run = run_dir(workdir, "gold", "validation-tool_use-bg")
    assert (run / "selection-ids-1_3.json").is_file() and (run / "selection-ids-1.json").is_file()

    # explain: the selection named on its own command line, only explanations.
    explained = doit("explain", "summarize", PROBLEMS)
    assert_ok(explained)
    assert "gone" not in explained.stdout and "up to date" in explained.stdout, explained.stdout
    assert "== run finished" not in output_of(explained) and "summarize" not in explained.stderr

    # compare: the selection named on its own command line (that view's own selection), else the last subset's.
    runs = "runs=gold/validation-tool_use-bg,gold/validation-tool_use-bg"
    compare_dir = run.parent.parent / "compare"
    assert_ok(doit("compare", runs, PROBLEMS))
    narrowed = compare_dir / "gold--validation-tool_use-bg__vs__gold--validation-tool_use-bg-ids-1_3.md"
    assert "| main_problem_total | 2 | 2 | +0 |" in narrowed.read_text(encoding="utf-8")
    assert_ok(doit("compare", runs))
    whole = compare_dir / "gold--validation-tool_use-bg__vs__gold--validation-tool_use-bg.md"
    assert "| main_problem_total | 1 | 1 | +0 |" in whole.read_text(encoding="utf-8")

    # list, forget and clean without sample_ids: the full split, whatever subset ran last.
    listed = doit("list", "--all")
    assert_ok(listed)
    assert "generate:3" in listed.stdout and "generate:19" in listed.stdout
    assert_ok(doit("forget", "score:3"))
    cleaned_one = doit("clean", "generate:3", "confirm=true")
    assert_ok(cleaned_one)
    assert "removed generations of problem 3" in cleaned_one.stdout and not (run / "generations" / "3.json").exists()

    # clean prints what it removed, once: no line for the problems whose files it keeps.
    cleaned = doit("clean", PROBLEMS)
    assert_ok(cleaned)
    print(f"$ doit clean {PROBLEMS}\n{cleaned.stdout}")
    assert cleaned.stdout.count("executing") == 1, cleaned.stdout
    assert cleaned.stdout.count("generations kept") == 1 and (run / "generations" / "1.json").is_file()
    # ... and only that subset's: the other subset's summary stays.
    assert not (run / "summary-ids-1_3.md").exists() and not (run / "details" / "1.json").exists()
    assert (run / "summary-ids-1.md").is_file()


def cached_verdicts(workdir: Path) -> list[Path]:
    return sorted(path for path in (workdir / ".scicode" / "verdicts").glob("*/*.json"))


def rewrite_status(path: Path, status: str) -> None:
    record = load_json(path)
    path.write_text(json.dumps({**record, "status": status}), encoding="utf-8")


@pytest.mark.slow
def test_rescore_re_executes_cached_verdicts_and_names_each_flip(
    workdir: Path, staged_data_dir: Path, dev_targets: Path
) -> None:
    def doit(*extra: str) -> subprocess.CompletedProcess[str]:
        return gold(workdir, staged_data_dir, dev_targets, "sample_ids=1", *extra)

    assert_ok(doit())
    run = run_dir(workdir, "gold", "validation-tool_use-bg")
    verdicts = cached_verdicts(workdir)
    assert verdicts, "the first run fills the verdict cache"
    step_id = load_json(verdicts[0])["step_id"]

    # A timeout left in the cache by a loaded machine is served again after `doit clean`, and the summary says so.
    rewrite_status(verdicts[0], "timeout")
    assert_ok(doit("clean"))
    assert_ok(doit())
    summary = summary_file(run, "md").read_text(encoding="utf-8")
    assert "- timeouts served from the verdict cache: 1: `rescore=timeouts` executes them again" in summary

    # rescore=timeouts executes that step again (and only it), replaces the cached verdict and names the flip.
    retried = doit("rescore=timeouts")
    assert_ok(retried)
    print(f"$ doit sample_ids=1 rescore=timeouts\n{retried.stdout}")
    assert f"changed: {step_id} timeout -> pass" in retried.stdout
    assert "rescore: problem 1: 1 cached verdict(s) re-executed, 1 changed" in retried.stdout
    assert load_json(verdicts[0])["status"] == "pass"
    assert "- timeouts served from the verdict cache: 0" in summary_file(run, "md").read_text(encoding="utf-8")

    # rescore=true executes every selected step again, even when the details are current.
    again = doit("rescore=true")
    assert_ok(again)
    assert f"rescore: problem 1: {len(verdicts)} cached verdict(s) re-executed, 0 changed" in again.stdout
    assert "changed:" not in again.stdout.replace("0 changed", "")


def test_a_setup_fault_stops_before_any_task_with_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.h5"
    result = run_doit(
        tmp_path,
        "model=gold",
        f"data_dir={tmp_path / 'empty'}",
        "dataset_zip_url=http://127.0.0.1:9/scicode.zip",
        "sample_ids=1,3",
        f"h5py_file={missing}",
    )
    assert result.returncode == CONFIG_ERROR.code, output_of(result)
    assert output_of(result).strip().splitlines() == [
        f"scicode: config error: invalid h5py_file={missing}: no such file {missing}"  # no internal class name
    ]
