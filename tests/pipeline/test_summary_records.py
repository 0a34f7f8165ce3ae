"""Records of the thing they describe: a failed generation is recorded per attempt, and every summary output
carries the summary's fingerprint (real doit runs of the built-in gold model in temp folders)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from stages.summarize.fingerprint_mark import MARK_NAME, carried_fingerprint
from tests.support.pipeline_support import assert_ok, data_args, load_json, output_of, run_dir, run_doit
from tests.support.run_files import locked_folder

NOTHING_TO_DO = "nothing to do: everything up to date"


def gold(workdir: Path, data: Path, targets: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_doit(workdir, *data_args(data, targets), "model=gold", "mode=naive", *extra)


@pytest.mark.slow
def test_a_failed_later_attempt_is_that_attempts_failure_only(
    workdir: Path, staged_data_dir: Path, dev_targets: Path
) -> None:
    run = run_dir(workdir, "gold", "validation-naive-bg")
    assert_ok(gold(workdir, staged_data_dir, dev_targets, "sample_ids=1"))

    with locked_folder(run / "generations"):  # attempt 2's generation cannot be written: its task raises
        failed = gold(workdir, staged_data_dir, dev_targets, "sample_ids=1", "attempts=2")

    assert failed.returncode != 0, output_of(failed)
    two = load_json(run / "summary-ids-1-k2.json")
    assert (two["main_problem_resolved"], two["subproblem_correct"]) == (1, 1), two  # attempt 1's own verdicts
    assert [entry["problem_id"] for entry in two["failed_problems"]] == ["1"]
    assert two["failed_problems"][0]["reason"].startswith("not generated: attempt 2: ")
    assert load_json(run / "not_generated" / "1.json")["attempt"] == 1

    one = gold(workdir, staged_data_dir, dev_targets, "sample_ids=1")  # the attempts=1 view: complete, passing
    assert_ok(one)
    single = load_json(run / "summary-ids-1.json")
    assert (single["main_problem_resolved"], single["failed_problems"]) == (1, []), single
    exported = gold(workdir, staged_data_dir, dev_targets, "sample_ids=1", "export")
    assert_ok(exported)
    assert "not generated" not in (run / "export-ids-1" / "steps.csv").read_text(encoding="utf-8")
    [inspect_log] = (run / "export-ids-1" / "inspect").glob("*_scicode_*.json")
    assert '"main_problem_resolved": {"value": 1, "answer": "resolved"' in json.dumps(load_json(inspect_log))

    again = gold(workdir, staged_data_dir, dev_targets, "sample_ids=1", "attempts=2")
    assert_ok(again)
    assert not (run / "not_generated" / "1.json").exists()
    assert load_json(run / "summary-ids-1-k2.json")["failed_problems"] == []


@pytest.mark.slow
def test_a_report_left_from_an_older_summary_is_written_again(
    workdir: Path, staged_data_dir: Path, dev_targets: Path
) -> None:
    run = run_dir(workdir, "gold", "validation-naive-bg")
    assert_ok(gold(workdir, staged_data_dir, dev_targets, "sample_ids=1"))
    older_report = workdir / "older-report.html"
    shutil.copyfile(run / "report-ids-1.html", older_report)

    assert_ok(gold(workdir, staged_data_dir, dev_targets, "sample_ids=1", "step_timeout_seconds=120"))  # rescored
    current = load_json(run / "summary-ids-1.json")["fingerprint"]
    # A stop after summary.json was written and before report.html was: the older summary's report is left.
    shutil.copyfile(older_report, run / "report-ids-1.html")

    rerun = gold(workdir, staged_data_dir, dev_targets, "sample_ids=1", "step_timeout_seconds=120")

    assert_ok(rerun)
    assert NOTHING_TO_DO not in output_of(rerun)
    assert (run / "report-ids-1.html").read_bytes() != older_report.read_bytes()
    assert carried_fingerprint(run / "summary-ids-1.md") == current
    assert carried_fingerprint(run / "report-ids-1.html") == current
    assert f'<meta name="{MARK_NAME}" content="{current}">' in (run / "report-ids-1.html").read_text(encoding="utf-8")
    settled = gold(workdir, staged_data_dir, dev_targets, "sample_ids=1", "step_timeout_seconds=120")
    assert_ok(settled)
    assert NOTHING_TO_DO in output_of(settled)
