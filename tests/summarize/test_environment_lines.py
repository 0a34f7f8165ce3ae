"""Per-environment lines of summary.md / summary.json under `environments=` (stages.summarize.summary_json)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stages.config.settings import load_settings
from stages.numbers.rows import StepRow
from stages.records.summary import EnvironmentsSummary
from stages.records.verdict import EnvironmentVerdict
from stages.storage.json_values import freeze_object
from stages.summarize.markdown import environment_lines
from stages.summarize.summary_json import environments_summary


@dataclass(frozen=True)
class Row:
    """What the tally reads of a problem row: its scored steps."""

    scored_rows: tuple[StepRow, ...]


def step(step_id: str, **statuses: str) -> StepRow:
    verdicts = tuple(EnvironmentVerdict(name, status, f"{name} said {status}") for name, status in statuses.items())  # type: ignore[arg-type]
    passed = any(status == "pass" for status in statuses.values())
    return StepRow(step_id, "pass" if passed else "fail", "", environments=verdicts)


def settings_for(tmp_path: Path, **values: str):
    return load_settings({"environments": "old:/usr/bin/python3,new:/usr/bin/python3", **values}, cwd=tmp_path)


ROWS = (
    Row((step("1.1", old="pass", new="pass"), step("1.2", old="fail", new="pass"))),
    Row((step("2.1", old="fail", new="fail"), step("2.2", old="pass"), step("2.3", old="pass", new="fail"))),
)


def test_each_environment_counts_its_passes_and_the_steps_that_pass_only_there(tmp_path: Path) -> None:
    summary = environments_summary(settings_for(tmp_path, all_environments="true"), ROWS)  # type: ignore[arg-type]
    assert summary is not None and summary.every_verdict is True
    counts = {count.name: (count.graded, count.passed, count.only) for count in summary.counts}
    assert counts == {"old": (5, 3, ("2.3",)), "new": (4, 2, ("1.2",))}
    assert summary.passed_before_the_others == 1  # 2.2: passed in old, new never ran
    assert EnvironmentsSummary.from_record(freeze_object(summary.to_record())) == summary
    assert environment_lines(summary) == [
        "- grading environments: old, new; a step passes when any passes (every environment ran)",
        "  - old: passed 3 of 5 graded steps; 1 passed only here: 2.3",
        "  - new: passed 2 of 4 graded steps; 1 passed only here: 1.2",
        "  - 1 passed step(s) were not graded in every environment (`all_environments=true` grades them everywhere)",
    ]


def test_without_environments_there_is_no_environment_record(tmp_path: Path) -> None:
    settings = load_settings({}, cwd=tmp_path)
    assert environments_summary(settings, ROWS) is None  # type: ignore[arg-type]
    assert environment_lines(None) == []
