"""Golden artifact files (tests/golden/current, tests/golden/before_parts) read by the current code.

They were written by the real pipeline from a made-up problem (make_golden.py); the pre-`fingerprint_parts`
files are the same records without that key. A change that stops the current code from reading them, that
makes an old generation file look stale (a re-billed run), or that stops old details from summarizing fails
here; a deliberate format change regenerates them (see tests/golden/README.md).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from stages.benchmark.problems import problem_by_id
from stages.compare.record import ComparisonRecord, read_comparison_record
from stages.config.fingerprints import changed_parts
from stages.config.settings import Settings, load_settings
from stages.generate.stage import generation_current, generation_fingerprint, generation_fingerprint_parts
from stages.numbers.metrics import metrics_of
from stages.numbers.rows import collect_rows
from stages.records.not_scored import read as read_not_scored
from stages.records.results import read_details, read_run, read_selection
from stages.records.summary import read_summary_file
from stages.storage.artifacts import read_artifact, validate
from stages.storage.json_values import freeze_object
from stages.storage.paths import RunPaths
from stages.summarize.stage import INTERVAL_METHODS_PART, summary_fingerprint_parts
from tests.golden.make_golden import BEFORE_PARTS, CURRENT, MODEL, PROBLEM_ID, RUN, staged_data
from tests.support.run_artifacts import json_at

FORMATS = {"current": CURRENT, "before_parts": BEFORE_PARTS}
# summary.json and compare.json of the same run as written before the interval methods changed (a step interval
# p +- 1.96 SE of 100% to 100%, a pass@k bootstrap, a paired D +- 1.96 SE without a recorded method)
BEFORE_INTERVALS = CURRENT.parent / "before_intervals"
KINDS = ("config", "selection", "generation", "details", "summary", "manifest", "not_scored", "compare")


def golden(folder: Path, kind: str) -> dict:
    return json.loads((folder / f"{kind}.json").read_text(encoding="utf-8"))


def golden_variables(data_dir: Path) -> dict[str, str]:
    """The command-line variables of the golden run (make_golden.py)."""
    return {
        "data_dir": str(data_dir),
        "dataset_zip_url": "http://127.0.0.1:9/none.zip",
        "model": MODEL,
        "verify_checksums": "false",
        "split": "validation",
        "mode": "naive",
    }


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The settings the golden run was made with, over a fresh copy of its made-up data (run folders are
    relative to the working folder: the test's own)."""
    monkeypatch.chdir(tmp_path)
    data_dir = staged_data(tmp_path)
    return load_settings(golden_variables(data_dir), cwd=tmp_path)


def run_folder(settings: Settings, folder: Path) -> RunPaths:
    """The run folder of `settings` holding the golden selection, config, generation and details."""
    paths = settings.run_paths
    assert paths.run_dir.name == RUN
    paths.generations_dir.mkdir(parents=True)
    paths.details(PROBLEM_ID).parent.mkdir(parents=True)
    shutil.copyfile(folder / "selection.json", paths.selection)
    shutil.copyfile(folder / "config.json", paths.run_dir / "config.json")
    shutil.copyfile(folder / "generation.json", paths.generation(PROBLEM_ID))
    shutil.copyfile(folder / "details.json", paths.details(PROBLEM_ID))
    return paths


def test_the_golden_files_hold_no_official_problem_text(shared_scicode: Path) -> None:
    official = (shared_scicode / "problems_dev.jsonl").read_text(encoding="utf-8")
    official_descriptions = [json.loads(line)["problem_description_main"] for line in official.splitlines()]
    for folder in FORMATS.values():
        for path in folder.glob("*.json"):
            text = path.read_text(encoding="utf-8")
            assert not [d for d in official_descriptions if d and d[:60] in text], path


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("kind", KINDS)
def test_every_golden_file_validates_against_its_schema(name: str, kind: str) -> None:
    validate(kind, golden(FORMATS[name], kind))


@pytest.mark.parametrize("name", FORMATS)
def test_each_golden_file_is_read_by_its_reader(name: str, tmp_path: Path) -> None:
    folder = FORMATS[name]
    for kind in KINDS:
        assert read_artifact(folder / f"{kind}.json", kind) == golden(folder, kind), kind
    paths = RunPaths(tmp_path / "run")
    paths.not_scored(PROBLEM_ID).parent.mkdir(parents=True)
    shutil.copyfile(folder / "not_scored.json", paths.not_scored(PROBLEM_ID))
    failure = read_not_scored(paths, PROBLEM_ID)
    assert failure is not None and "made-up failure for the golden file" in failure.line
    details = read_details(paths, PROBLEM_ID)
    assert details.details is None and details.missing_reason == failure.line  # a not-scored problem reads so


@pytest.mark.parametrize("name", FORMATS)
def test_an_old_generation_file_stays_current(name: str, settings: Settings) -> None:
    """No re-billing: the golden generation is current for the settings and problem it was made with."""
    run_folder(settings, FORMATS[name])
    record = golden(FORMATS[name], "generation")
    assert generation_fingerprint(settings, PROBLEM_ID) == record["fingerprint"]
    assert generation_current(settings, PROBLEM_ID)
    parts = generation_fingerprint_parts(settings, problem_by_id(settings.data_paths, PROBLEM_ID), 0)
    assert changed_parts(record, parts) == []


def test_a_changed_setting_makes_the_golden_generation_stale(tmp_path: Path, settings: Settings) -> None:
    """The check above can fail: the same file under another generation setting is not current."""
    other = load_settings({**golden_variables(settings.data_paths.data_dir), "with_background": "false"}, cwd=tmp_path)
    other.run_paths.generations_dir.mkdir(parents=True)
    shutil.copyfile(CURRENT / "generation.json", other.run_paths.generation(PROBLEM_ID))
    assert not generation_current(other, PROBLEM_ID)


@pytest.mark.parametrize("name", FORMATS)
def test_old_details_still_summarize(name: str, settings: Settings) -> None:
    paths = run_folder(settings, FORMATS[name])
    assert [entry.problem_id for entry in read_selection(paths).entries] == [PROBLEM_ID]
    run = read_run(paths.run_dir)
    (problem,) = run.problems
    assert problem.state == "complete" and problem.resolved()
    metrics = metrics_of(collect_rows(run))
    summary = golden(FORMATS[name], "summary")
    assert (metrics.resolved, metrics.total) == (summary["main_problem_resolved"], summary["main_problem_total"])
    assert (metrics.steps_passed, metrics.steps_scored) == (summary["subproblem_correct"], summary["subproblem_total"])
    assert (metrics.resolved, metrics.steps_passed, metrics.steps_scored) == (1, 2, 2)


@pytest.mark.parametrize("name", FORMATS)
def test_the_golden_comparison_reads_as_its_record(name: str) -> None:
    """compare.json (the golden run compared with itself) reads into its typed record and writes back the same."""
    record = read_comparison_record(FORMATS[name] / "compare.json")
    assert record is not None
    stored = golden(FORMATS[name], "compare")
    assert record.to_record() == {key: value for key, value in stored.items() if key != "schema_version"}
    assert ComparisonRecord.from_record(freeze_object(record.to_record())) == record
    assert record.compared_problems == (PROBLEM_ID,) and record.narrowed_to is None
    for side in (record.run_a, record.run_b):
        assert (side.model, side.run, side.counts.resolved, side.counts.steps_passed) == (MODEL, RUN, 1, 2)
        assert dict(side.statuses)["pass"] == 2 and side.attempts is None
    assert record.paired.problems == (PROBLEM_ID,) and record.paired.resolved_both == 1
    assert record.problems_lost == record.problems_gained == () and record.steps_lost == record.steps_gained == ()


def test_a_summary_and_a_comparison_of_the_earlier_interval_methods_still_read() -> None:
    for kind in ("summary", "compare"):
        validate(kind, golden(BEFORE_INTERVALS, kind))
        assert read_artifact(BEFORE_INTERVALS / f"{kind}.json", kind) == golden(BEFORE_INTERVALS, kind)
    summary = read_summary_file(BEFORE_INTERVALS / "summary.json")
    assert summary is not None
    assert json_at(summary.headline, "intervals", "subproblem", "method") == "clustered by problem"
    record = read_comparison_record(BEFORE_INTERVALS / "compare.json")
    assert record is not None and record.paired.step_method == "wald_clustered"
    assert "written before the method was recorded" in record.paired.step_description
    assert ComparisonRecord.from_record(freeze_object(record.to_record())) == record


def test_a_summary_of_the_earlier_interval_methods_is_made_again(settings: Settings) -> None:
    """The interval methods its fingerprint covers differ, and explain says so (the stored golden inputs differ too:
    they are kept reformatted, with the temporary folder's name replaced)."""
    paths = run_folder(settings, CURRENT)
    parts = summary_fingerprint_parts(settings, read_selection(paths))
    earlier = golden(BEFORE_INTERVALS, "summary")
    assert parts.value != earlier["fingerprint"]
    assert f"code changed: {INTERVAL_METHODS_PART}" in changed_parts(earlier, parts)
