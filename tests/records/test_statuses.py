"""The status glossary (`stages.records.status_glossary`) and the `not_generated` status: a step the model never
answered (the server down, a prompt over the context) is counted apart from the model's wrong answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, get_args

from scripts.statuses_page import PAGE, statuses_page
from stages.config.settings import Settings
from stages.export.stage import export_run
from stages.records.results import CELL_STATUSES, CellStatus
from stages.records.status_glossary import GENERATION_ENTRIES, VERDICT_ENTRIES
from stages.statuses import GenerationStepStatus
from stages.storage.artifacts import read_artifact, write_artifact
from stages.summarize.stage import run_summarize
from tests.support.run_artifacts import (
    FIXED_NOW,
    OFFICIAL,
    ZERO_SHA,
    json_at,
    json_objects,
    make_settings,
    selection_entry,
    steps_of,
    write_details,
    write_selection,
)


def test_every_status_has_one_glossary_entry() -> None:
    assert [entry.status for entry in VERDICT_ENTRIES] == list(CELL_STATUSES) == list(get_args(CellStatus))
    assert sorted(entry.status for entry in GENERATION_ENTRIES) == sorted(get_args(GenerationStepStatus))
    # every scored step is in the step denominator; only a prefilled step (skipped) is not
    assert [entry.status for entry in VERDICT_ENTRIES if not entry.in_step_denominator] == ["skipped"]
    assert [entry.status for entry in VERDICT_ENTRIES if entry.passes] == ["pass"]


def test_the_statuses_page_is_generated_from_the_glossary() -> None:
    """docs/statuses.md is current: after a change of the glossary run `python -m scripts.statuses_page`."""
    assert PAGE.read_text(encoding="utf-8") == statuses_page()


def generation_step(step_id: str, status: str, error: str | None = None) -> dict[str, Any]:
    answered = status == "ok"
    return {
        "step_id": step_id,
        "prefilled": False,
        "status": status,
        "prompt_fingerprint": ZERO_SHA,
        "code": "def f():\n    return 1\n" if answered else None,
        "raw_answer": "```python\ndef f():\n    return 1\n```" if answered else None,
        "error": error,
        "finish_reason": "stop" if answered else None,
        "trajectory": {"calls": [], "messages": [], "tool_results": []},
        "usage": {"calls": 1 if answered else 0, "input_tokens": 0, "output_tokens": 0, "total_tokens": 0},
        "latency_s": 0.0,
    }


def write_generation_steps(settings: Settings, problem_id: str, steps: list[dict[str, Any]], error: str | None) -> None:
    write_artifact(
        settings.run_paths.generation(problem_id),
        "generation",
        {
            "fingerprint": ZERO_SHA,
            "status": "error" if error else "complete",
            "problem_id": problem_id,
            "attempt": 0,
            "model": settings.model,
            "mode": "naive",
            "error": error,
            "usage": {"calls": 1, "input_tokens": 0, "output_tokens": 0, "total_tokens": 0},
            "latency_s": 0.0,
            "steps": list(steps),
        },
    )


def outage_run(tmp_path: Path) -> Settings:
    """P1: answered, wrong (fail). P2: the server went down at its second step (error), its third never asked
    (not_generated); the scorer gave those two `fail` verdicts."""
    settings = make_settings(tmp_path)
    write_selection(settings, [selection_entry("P1", "physics", 1, 1), selection_entry("P2", "physics", 3, 3)])
    write_details(settings, "P1", "physics", [("P1.1", "fail")])
    write_generation_steps(settings, "P1", [generation_step("P1.1", "ok")], None)
    outage = "APIConnectionError: connection refused at step P2.2 after 6 retries"
    write_details(
        settings,
        "P2",
        "physics",
        [("P2.1", "pass"), ("P2.2", "fail"), ("P2.3", "fail")],
        status="generation_error",
        error=outage,
    )
    steps = [
        generation_step("P2.1", "ok"),
        generation_step("P2.2", "error", outage),
        generation_step("P2.3", "not_generated"),
    ]
    write_generation_steps(settings, "P2", steps, outage)
    return settings


def test_a_step_never_generated_is_not_generated_not_fail(tmp_path: Path) -> None:
    """The outage's steps are counted as not_generated, in the denominator, apart from the model's fail."""
    settings = outage_run(tmp_path)
    outcome = run_summarize(settings, targets=OFFICIAL, now=FIXED_NOW)
    assert (outcome.subproblem_correct, outcome.subproblem_total) == (1, 4)
    record = read_artifact(settings.run_paths.summary_json, "summary")
    assert record is not None
    assert json_at(record, "status_counts", "fail") == 1 and json_at(record, "status_counts", "not_generated") == 2
    problem = next(row for row in json_objects(record["problems"]) if row["problem_id"] == "P2")
    assert [step["status"] for step in steps_of(problem)] == ["pass", "not_generated", "not_generated"]
    text = settings.run_paths.summary_md.read_text(encoding="utf-8")
    table = text.split("## Step statuses", 1)[1].split("\n## ", 1)[0]
    assert "| fail          |     1 |" in table and "| not_generated |     2 |" in table
    assert "| `not_generated` | verdict | the model never answered the step" in " ".join(table.split()).replace(
        "| `", "| `"
    )
    html = settings.run_paths.report_html.read_text(encoding="utf-8")
    assert 'id="status-glossary"' in html and "the request failed after its retries" in html


def test_the_exports_count_a_step_never_generated_as_not_generated(tmp_path: Path) -> None:
    settings = outage_run(tmp_path)
    files = export_run(settings.run_paths.run_dir)
    steps = [
        json.loads(text) for text in settings.run_paths.export_steps_jsonl.read_text(encoding="utf-8").splitlines()
    ]
    assert {row["step"]: row["status"] for row in steps} == {
        "P1.1": "fail",
        "P2.1": "pass",
        "P2.2": "not_generated",
        "P2.3": "not_generated",
    }
    log = json.loads(next(path for path in files if path.suffix == ".json").read_text(encoding="utf-8"))
    p2 = next(sample for sample in log["samples"] if sample["id"] == "P2")
    assert p2["scores"]["steps"]["value"] == {"P2.1": "pass", "P2.2": "not_generated", "P2.3": "not_generated"}
