"""The Summary record holds every fact summary.md shows: the run's setup and the timeouts served from the verdict
cache are typed fields, optional in the file (a summary written before them reads as it was), and summary.md is
rendered from the record alone."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from stages.records.summary import GroupMetrics, RateInterval, RunSetup, Summary
from stages.storage.artifacts import validate
from stages.storage.json_values import JSONObject, freeze_object
from stages.summarize.markdown import render_markdown
from tests.golden.make_golden import CURRENT

SETUP = RunSetup(
    base_url="http://127.0.0.1:8080/v1",
    tool_names=("code_interpreter",),
    tool_use_max_loops=4,
    snippets_ran="sandbox http://127.0.0.1:8081",
    settings=freeze_object({"api_protocol": "chat", "model_params": {"temperature": 0, "seed": 1}}),
)


def golden_summary() -> Summary:
    return Summary.from_record(freeze_object(json.loads((CURRENT / "summary.json").read_text(encoding="utf-8"))))


def with_setup(summary: Summary) -> Summary:
    return dataclasses.replace(summary, recorded_setup=SETUP, recorded_cached_timeouts=2)


def test_a_summary_written_before_the_setup_reads_with_the_defaults_and_writes_none() -> None:
    summary = golden_summary()
    assert summary.recorded_setup is None and summary.recorded_cached_timeouts is None
    assert summary.setup == RunSetup() and summary.cached_timeouts == 0
    assert {"setup", "cached_timeouts"}.isdisjoint(summary.to_record())


def test_the_setup_and_the_cached_timeouts_validate_and_read_back() -> None:
    record: JSONObject = {"schema_version": 1, **with_setup(golden_summary()).to_record()}
    validate("summary", record)
    read = Summary.from_record(freeze_object(record))
    assert read.setup == SETUP and read.cached_timeouts == 2
    assert read == with_setup(golden_summary())


def test_group_metrics_read_the_counts_and_intervals_of_the_headline() -> None:
    summary = golden_summary()
    metrics = summary.headline_metrics
    headline = summary.headline
    assert (metrics.total, metrics.resolved, metrics.steps_passed, metrics.steps_scored) == (
        headline["Total"],
        headline["main_problem_resolved"],
        headline["subproblem_correct"],
        headline["subproblem_total"],
    )
    assert isinstance(metrics.resolve_interval, RateInterval) and isinstance(metrics.step_interval, RateInterval)
    assert metrics.resolve_interval.low <= metrics.resolve_interval.high


def test_a_group_too_small_for_intervals_has_none() -> None:
    metrics = GroupMetrics.from_record(freeze_object({"Total": 1, "Evaluated": 1, "Error": 0, "intervals": None}))
    assert metrics.resolve_interval is None and metrics.step_interval is None and metrics.effective_n is None


def test_summary_md_renders_the_setup_from_the_record(tmp_path: Path) -> None:
    summary = dataclasses.replace(
        with_setup(golden_summary()), identity=dataclasses.replace(golden_summary().identity, mode="tool_use")
    )
    markdown = render_markdown(summary, tmp_path / "run")
    assert "- model: `" + summary.identity.model + "` at `http://127.0.0.1:8080/v1`" in markdown
    assert "- mode: tool_use (tools: code_interpreter, at most 4 model calls per step)" in markdown
    assert "- snippets ran: sandbox http://127.0.0.1:8081" in markdown
    assert '- settings: api_protocol=chat, model_params={"seed": 1, "temperature": 0}' in markdown
    assert "- timeouts served from the verdict cache: 2: `rescore=timeouts` executes them again" in markdown
