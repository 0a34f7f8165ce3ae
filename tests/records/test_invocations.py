"""True run times: each problem's generation and scoring is recorded as it happens (invocations.jsonl), and the
summary, report, run index and inspect_ai export read the run's invocations from it (a resumed run lists each)."""

from __future__ import annotations

import json
import os
import threading
from datetime import datetime, timezone
from pathlib import Path

import pytest

from stages.export.stage import export_run
from stages.records.invocations import invocations, periods, recorded
from stages.runs.index import index_rows
from stages.storage.paths import ResultsPaths, RunPaths
from stages.summarize.stage import run_summarize
from tests.golden.make_golden import MODEL, PROBLEM_ID, RUN, doit, staged_data
from tests.support.run_artifacts import (
    FIXED_NOW,
    OFFICIAL,
    make_settings,
    selection_entry,
    write_details,
    write_selection,
)


def line(stage: str, problem_id: str, event: str, at: str, process: int = 1) -> str:
    return json.dumps({"stage": stage, "problem_id": problem_id, "event": event, "at": at, "process": process})


# a run generated and scored 06:59:32 to 07:02:25, resumed at 08:00:00 (rescoring one problem for 10 s); one
# problem's generation of the first invocation was killed (no end)
LINES = [
    line("generate", "P1", "start", "2026-01-02T06:59:32.000000Z"),
    line("generate", "P2", "start", "2026-01-02T06:59:32.500000Z"),
    line("generate", "P1", "end", "2026-01-02T07:01:00.000000Z"),
    line("score", "P1", "start", "2026-01-02T07:01:00.100000Z"),
    line("generate", "P2", "end", "2026-01-02T07:02:00.000000Z"),
    line("score", "P1", "end", "2026-01-02T07:02:25.000000Z"),
    line("generate", "P3", "start", "2026-01-02T07:02:10.000000Z", process=2),
    '{"stage": "score", "problem_id": "P2", "ev',  # a line cut off
    line("score", "P2", "start", "2026-01-02T08:00:00.000000Z", process=3),
    line("score", "P2", "end", "2026-01-02T08:00:10.000000Z", process=3),
]


def write_lines(paths: RunPaths) -> None:
    paths.invocations.parent.mkdir(parents=True, exist_ok=True)
    paths.invocations.write_text("\n".join(LINES) + "\n", encoding="utf-8")


def test_periods_merge_into_invocations(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path / "run")
    write_lines(paths)
    assert len(periods(paths)) == 5  # the killed one ends at its start; the cut-off line is left out
    first, second = invocations(paths)
    assert (first.started_text(), first.ended_text(), first.stages, first.problems) == (
        "2026-01-02T06:59:32Z",
        "2026-01-02T07:02:25Z",
        ("generate", "score"),
        3,
    )
    assert first.seconds == pytest.approx(173.0)
    assert (second.started_text(), second.ended_text(), second.stages, second.problems) == (
        "2026-01-02T08:00:00Z",
        "2026-01-02T08:00:10Z",
        ("score",),
        1,
    )


def test_a_subset_lists_only_the_work_on_its_problems(tmp_path: Path) -> None:
    """The folder's second invocation scored P2 only: a selection of P1 and P3 ran in the first one alone."""
    paths = RunPaths(tmp_path / "run")
    write_lines(paths)
    (only,) = invocations(paths, frozenset({"P1", "P3"}))
    assert (only.started_text(), only.ended_text(), only.problems) == (
        "2026-01-02T06:59:32Z",
        "2026-01-02T07:02:25Z",
        2,
    )
    assert invocations(paths, frozenset({"P9"})) == ()


def test_recorded_appends_a_start_and_an_end_even_when_the_work_fails(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path / "run")
    with pytest.raises(RuntimeError), recorded(paths, "score", "P1"):
        raise RuntimeError("scoring failed")

    def generate(problem_id: str) -> None:
        with recorded(paths, "generate", problem_id):
            pass

    threads = [threading.Thread(target=generate, args=(pid,)) for pid in "ABCD"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    events = [json.loads(text) for text in paths.invocations.read_text(encoding="utf-8").splitlines()]
    assert [(event["stage"], event["problem_id"], event["event"]) for event in events[:2]] == [
        ("score", "P1", "start"),
        ("score", "P1", "end"),
    ]
    # every line whole (appended with one write each), a start and an end of each problem worked on at once
    assert sorted((event["problem_id"], event["event"]) for event in events[2:]) == [
        (pid, event) for pid in "ABCD" for event in ("end", "start")
    ]
    assert {event["process"] for event in events} == {os.getpid()}
    (only,) = invocations(paths)
    assert only.problems == 5


def test_summary_report_index_and_export_read_the_invocations(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, mode="naive")
    write_selection(settings, [selection_entry(pid, "physics", 1, 1) for pid in ("P1", "P2")])
    for pid in ("P1", "P2"):
        write_details(settings, pid, "physics", [(f"{pid}.1", "pass")])
    paths = settings.run_paths
    write_lines(paths)
    run_summarize(settings, targets=OFFICIAL, now=FIXED_NOW)
    record = json.loads(paths.summary_json.read_text(encoding="utf-8"))
    # not the details files' times (written just now), the first invocation's start; P3 is not selected
    assert record["run_started"] == "2026-01-02T06:59:32Z"
    assert [(entry["started"], entry["ended"], entry["stages"]) for entry in record["invocations"]] == [
        ("2026-01-02T06:59:32Z", "2026-01-02T07:02:25Z", ["generate", "score"]),
        ("2026-01-02T08:00:00Z", "2026-01-02T08:00:10Z", ["score"]),
    ]
    markdown = paths.summary_md.read_text(encoding="utf-8")
    assert (
        "- invocations that generated or scored (UTC): 1) 2026-01-02T06:59:32Z to 2026-01-02T07:02:25Z (173 s; "
        "generate, score; 2 problem(s)); 2) 2026-01-02T08:00:00Z to 2026-01-02T08:00:10Z (10 s; score; 1 problem(s))"
    ) in markdown
    html = paths.report_html.read_text(encoding="utf-8")
    assert 'id="invocations"' in html and "2026-01-02T08:00:00Z to 2026-01-02T08:00:10Z" in html
    (row,) = index_rows(ResultsPaths(tmp_path / "results"))
    assert row.run_started == "2026-01-02T06:59:32Z" and row.date == "2026-01-02"
    log_file = next(path for path in export_run(paths.run_dir) if path.suffix == ".json")
    stats = json.loads(log_file.read_text(encoding="utf-8"))["stats"]
    # the log's duration is the run's, not up to the moment of the export
    assert (stats["started_at"], stats["completed_at"]) == ("2026-01-02T06:59:32+00:00", "2026-01-02T08:00:10+00:00")


def test_a_real_run_records_its_generation_and_scoring(tmp_path: Path) -> None:
    """`doit` over the made-up problem of the golden files (built-in gold model): invocations.jsonl holds a start
    and an end of the problem's generation and of its scoring, and the summary's run start is when the command
    started."""
    data_dir = staged_data(tmp_path)
    started = datetime.now(timezone.utc).replace(microsecond=0)
    doit(
        tmp_path,
        f"data_dir={data_dir}",
        "dataset_zip_url=http://127.0.0.1:9/none.zip",
        f"model={MODEL}",
        "verify_checksums=false",
        "split=validation",
        "mode=naive",
    )
    run = next(tmp_path.rglob(f"{MODEL}/{RUN}"))
    events = [json.loads(text) for text in (run / "invocations.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [(event["stage"], event["problem_id"], event["event"]) for event in events] == [
        ("generate", PROBLEM_ID, "start"),
        ("generate", PROBLEM_ID, "end"),
        ("score", PROBLEM_ID, "start"),
        ("score", PROBLEM_ID, "end"),
    ]
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    (only,) = summary["invocations"]
    assert only["stages"] == ["generate", "score"] and only["problems"] == 1
    # the run started with its command (select, targets, the preflight), before its first problem was generated
    command = events[0]["command_started"]
    assert command <= events[0]["at"] and all(event.get("command_started", command) == command for event in events)
    assert summary["run_started"] == only["started"] == command[:19] + "Z"
    assert datetime.strptime(summary["run_started"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc) >= started
