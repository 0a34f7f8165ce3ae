"""compare of an original and a verified run of one model: the common problems and steps are paired, the split a
dataset means decides whether the runs are of one split, and the report says how many steps and problems change
verdict in each direction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stages.compare.record import read_comparison_record
from stages.compare.stage import CompareError, compare_runs, write_comparison
from stages.config.settings import Settings, Split
from stages.storage.paths import RunPaths
from tests.compare.test_compare import attempt_record, make_run, row, section, write_details


def make_dataset_run(results: Path, dataset: str, split: Split, problem_ids: list[str]) -> RunPaths:
    paths = make_run(results, "alpha", split, problem_ids, dataset=dataset)
    if dataset != "original":
        record = json.loads(paths.selection.read_text(encoding="utf-8"))
        record |= {"dataset": dataset, "problems_md5": "07c4cd521ea60a166c05737ddfa51ac0"}
        paths.selection.write_text(json.dumps(record), encoding="utf-8")
    return paths


@pytest.fixture
def original_and_verified(tmp_path: Path) -> tuple[RunPaths, RunPaths]:
    """One model on the original test split (problems 1, 2, 3, 4) and on verified (1, 3, 4; problem 2 excluded).

    problem  original (A)       verified (B)
    1        pass fail          pass pass           step 1.2 and problem 1 pass only in B
    2        pass pass pass     (not in verified)   not paired
    3        pass skip pass     pass skip fail      step 3.3 and problem 3 pass only in A
    4        fail fail          pass fail           step 4.1 passes only in B; unresolved in both
    """
    results = tmp_path / "results"
    a = make_dataset_run(results, "original", "test", ["1", "2", "3", "4"])
    write_details(a, "1", attempt_record("1", ["pass", "fail"]))
    write_details(a, "2", attempt_record("2", ["pass", "pass", "pass"]))
    write_details(a, "3", attempt_record("3", ["pass", "skipped", "pass"]))
    write_details(a, "4", attempt_record("4", ["fail", "fail"]))
    b = make_dataset_run(results, "verified", "all", ["1", "3", "4"])
    write_details(b, "1", attempt_record("1", ["pass", "pass"]))
    write_details(b, "3", attempt_record("3", ["pass", "skipped", "fail"]))
    write_details(b, "4", attempt_record("4", ["pass", "fail"]))
    return a, b


def test_an_original_and_a_verified_run_pair_their_common_problems_and_steps(
    original_and_verified: tuple[RunPaths, RunPaths], tmp_path: Path
) -> None:
    a, b = original_and_verified
    assert b.run_dir.name == "verified-all-tool_use-bg"
    report = compare_runs(a.run_dir, b.run_dir)  # test and verified's all are one split: no allow_split_mismatch
    assert row(report, "dataset")[1:3] == ["original", "verified"]
    assert (
        "**Datasets differ (A: original, B: verified): the 3 problems selected in both are paired, step by step; a "
        "problem's statement, tests and targets may differ between them.**"
    ) in report
    assert "- only in A (1): 2" in report
    assert (
        "Over the paired problems, 1 step(s) pass only in A and 2 only in B; 1 problem(s) are resolved only in A "
        "and 1 only in B."
    ) in report
    paired = section(report, "## Paired tests (problems both runs scored, attempt 1)")
    assert row(paired, "problems both runs scored") == ["problems both runs scored", "3"]
    assert row(paired, "resolved by A only / by B only (discordant)")[1] == "1 / 1"
    lost = section(report, "### pass in A, not pass in B (1)")
    gained = section(report, "### not pass in A, pass in B (2)")
    assert "3.3" in lost and "1.2" in gained and "4.1" in gained

    path = write_comparison(Settings(runs=(str(a.run_dir), str(b.run_dir)), results_dir=str(tmp_path / "results")))
    record = read_comparison_record(path.with_suffix(".json"))
    assert record is not None
    assert (record.run_a.dataset, record.run_b.dataset) == ("original", "verified")
    assert record.compared_problems == ("1", "3", "4")
    assert (len(record.steps_lost), len(record.steps_gained)) == (1, 2)
    assert (record.problems_lost, record.problems_gained) == (("3",), ("1",))
    written = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
    assert "dataset" not in written["runs"]["A"] and written["runs"]["B"]["dataset"] == "verified"


def test_the_original_all_split_is_not_verifieds(tmp_path: Path) -> None:
    results = tmp_path / "results"
    a = make_dataset_run(results, "original", "all", ["1", "9"])
    b = make_dataset_run(results, "verified", "all", ["1", "9"])
    pattern = (
        r"runs of different splits: .* is split=all of dataset original \(validation, test\), .* is split=all of "
        r"dataset verified \(test\) \(set allow_split_mismatch=true"
    )
    with pytest.raises(CompareError, match=pattern):
        compare_runs(a.run_dir, b.run_dir)
    assert "Splits differ (A: all, B: all)" in compare_runs(a.run_dir, b.run_dir, allow_split_mismatch=True)
