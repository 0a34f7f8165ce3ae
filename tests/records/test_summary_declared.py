"""summary.json's records are declared (`stages.records.declared`): their converters follow from their fields, the
aggregate blocks are typed, and the written record keeps its keys and their order."""

from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path

import pytest

from stages.records import summary as summary_module
from stages.records.declared import Declared
from stages.records.generation import ToolStats
from stages.records.summary import (
    Caveat,
    EnvironmentCount,
    EnvironmentsSummary,
    PublishedSetting,
    RecordedInvocation,
    ReferenceFigure,
    RunSetup,
    Summary,
    WeakPass,
)
from stages.storage.json_values import freeze_object
from stages.summarize.markdown import render_markdown
from tests.golden.make_golden import CURRENT

WRITTEN_ORDER = [
    "fingerprint",
    "status",
    "model",
    "run",
    "split",
    "category",
    "sample_ids",
    "mode",
    "with_background",
    "carry",
    "attempts_per_problem",
    "run_started",
    "summarized_at",
    "targets",
    "attempt_scored",
    "main_problem_resolve_rate",
    "subproblem",
    "Total",
    "Evaluated",
    "Error",
    "main_problem_resolved",
    "main_problem_total",
    "subproblem_correct",
    "subproblem_total",
    "skipped_steps",
    "intervals",
    "uncertainty",
    "inspect_ai_view",
    "by_category",
    "by_field",
    "by_subfield",
    "by_split",
    "status_counts",
    "problems",
    "failed_problems",
    "usage",
    "latency_s",
    "cost",
    "project",
    "concurrency",
    "tool_use",
    "weak_official_tests",
    "plots",
    "attempts",
    "confinement",
    "fingerprint_parts",
    "tool_calls",
    "steps_without_targets",
    "caveats",
    "invocations",
    "setup",
    "cached_timeouts",
    "published_setting",
    "references",
    "environments",
]


def stored_summary() -> dict:
    stored = json.loads((CURRENT / "summary.json").read_text(encoding="utf-8"))
    stored.pop("schema_version")
    return stored


def whole_summary() -> Summary:
    """The golden summary with every optional part recorded."""
    return dataclasses.replace(
        Summary.from_record(freeze_object(stored_summary())),
        recorded_caveats=(Caveat("subset", "2 of 80 problems (a subset)"),),
        recorded_invocations=(
            RecordedInvocation("2026-01-02T03:04:05Z", "2026-01-02T03:07:00Z", 175.0, ("score",), 2),
        ),
        recorded_setup=RunSetup(base_url="http://127.0.0.1:8080/v1", snippets_ran="here"),
        recorded_cached_timeouts=2,
        recorded_published=PublishedSetting("scicode-paper", "the paper", ()),
        recorded_references=(ReferenceFigure("m", "scicode-paper", "paper", 1.5, 25.0, ("a subset",)),),
        environments=EnvironmentsSummary(True, (EnvironmentCount("local", 2, 2, ("77.1",)),), 0),
    )


def test_every_record_of_the_summary_is_declared() -> None:
    records = [
        value
        for value in vars(summary_module).values()
        if inspect.isclass(value) and value.__module__ == summary_module.__name__ and dataclasses.is_dataclass(value)
    ]
    hand_written = [record.__name__ for record in records if not issubclass(record, Declared)]
    assert hand_written == ["GroupMetrics"]  # a read-only view of a group record, never written


def test_the_golden_summary_reads_into_typed_fields_and_writes_back_as_stored() -> None:
    summary = Summary.from_record(freeze_object(stored_summary()))
    step = summary.problems[0].steps[0]
    assert isinstance(step.tools, ToolStats) and isinstance(summary.problems[0].tools, ToolStats)
    assert isinstance(summary.latency_s, float) and isinstance(summary.concurrency, int)
    assert isinstance(summary.identity.attempts_per_problem, int) and summary.attempt_scored == 0
    assert summary.stamp.fingerprint == summary.fingerprint and summary.stamp.parts is not None
    assert summary.to_record() == stored_summary()


def test_the_record_keeps_its_keys_in_the_written_order_with_its_derived_values() -> None:
    whole = whole_summary()
    written = whole.to_record()
    assert list(written) == WRITTEN_ORDER
    published = whole.published.to_record()
    assert list(published.items()) == [
        ("protocol", "scicode-paper"),
        ("title", "the paper"),
        ("is_published", True),
        ("reasons", []),
    ]
    reference = whole.references[0].to_record()
    assert list(reference)[4:7] == ["subproblem", "comparable", "reasons"] and reference["comparable"] is False
    assert whole.environments is not None
    assert list(whole.environments.to_record()) == ["every_verdict", "environments", "passed_before_the_others"]
    assert Summary.from_record(freeze_object(written)) == whole


def test_caveats_of_an_unknown_kind_and_weak_passes_read_totally() -> None:
    record = stored_summary() | {
        "caveats": [{"kind": "from_a_later_version", "text": "x"}, {"kind": "subset", "text": "y"}],
        "weak_official_tests": [{"step_id": "77.1", "reason": "trivial"}, "not an object"],
    }
    summary = Summary.from_record(freeze_object(record))
    assert summary.caveats == (Caveat("subset", "y"),)
    assert summary.weak_official_tests == (WeakPass("77.1", "trivial"),)


def test_attempt_metrics_are_typed_and_an_error_records_only_the_strategy_and_why() -> None:
    computed = {
        "strategy": "avg",
        "problems": 1,
        "attempts": 2,
        "per_attempt": [
            {
                "attempt": 0,
                "main_problem_resolved": 1,
                "main_problem_total": 1,
                "main_problem_resolve_rate": 1.0,
                "subproblem_correct": 2,
                "subproblem_total": 2,
                "subproblem": 1.0,
            }
        ],
        "mean_main_problem_resolve_rate": 1.0,
        "mean_subproblem_rate": 1.0,
        "pass_at_k": {"1": 1.0, "2": 1.0},
        "pass_at_k_intervals": {"1": {"low": 0.2, "high": 1.0}, "2": {"low": 0.2, "high": 1.0}},
        "interval_method": {"method": "clustered_wilson", "level": 0.95, "description": "d"},
        "any_attempt": {
            "main_problem_resolved": 1,
            "main_problem_total": 1,
            "main_problem_resolve_rate": 1.0,
            "subproblem_correct": 2,
            "subproblem_total": 2,
            "subproblem": 1.0,
        },
        "strategies": {
            "avg": {"main_problem_resolve_rate": 1.0, "subproblem": 1.0},
            "pass": {"main_problem_resolve_rate": 1.0, "subproblem": 1.0},
        },
    }
    summary = Summary.from_record(freeze_object(stored_summary() | {"attempts": computed}))
    metrics = summary.attempts
    assert metrics is not None and metrics.per_attempt[0].counts.steps_passed == 2
    assert metrics.pass_at_k_intervals["2"].low == 0.2 and metrics.strategies["pass"].subproblem == 1.0
    written = metrics.to_record()
    assert written == computed and list(written) == list(computed)
    failed = Summary.from_record(freeze_object(stored_summary() | {"attempts": {"strategy": "pass", "error": "x"}}))
    assert failed.attempts is not None and failed.attempts.to_record() == {"strategy": "pass", "error": "x"}


def test_summary_md_states_the_attempts_and_their_strategy_from_the_typed_record(tmp_path: Path) -> None:
    record = stored_summary() | {"attempts_per_problem": 2, "attempts": {"strategy": "pass", "error": "uneven"}}
    markdown = render_markdown(Summary.from_record(freeze_object(record)), tmp_path / "run")
    assert "- attempts: 2 per problem (strategy pass); the tables score attempt 1" in markdown
    assert "Attempt metrics not computed: uneven" in markdown


@pytest.mark.parametrize(
    "hostile",
    [
        {"by_field": {"a": 3, "b": {"Total": "x", "intervals": "none"}}, "status_counts": {"pass": "2"}},
        {"attempts": [1], "usage": "many", "cost": {"prices": 3, "per_attempt": {"a": 1}}, "tool_use": 7},
        {"intervals": {"subproblem": [1]}, "Total": True, "uncertainty": None, "project": "p", "tool_calls": []},
        {"attempts": {"per_attempt": [{"attempt": "0"}, 5], "pass_at_k": {"1": "x"}, "strategies": {"avg": 1}}},
        {"problems": [{"usage": [], "tools": "t", "attempt_costs": ["a", None, 1]}], "inspect_ai_view": []},
    ],
)
def test_a_hostile_summary_reads_without_raising_and_what_it_writes_reads_back(hostile: dict[str, object]) -> None:
    summary = Summary.from_record(freeze_object(stored_summary() | hostile))
    assert Summary.from_record(freeze_object(summary.to_record())) == summary
