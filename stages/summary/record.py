"""summary.json: the record of the problem rows and their metrics, under the names of the results contract."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from stages.config import Settings
from stages.pricing import Prices, cost_of, prices_of, total_cost
from stages.results import ToolStats
from stages.summary.markdown import one_line
from stages.summary.metrics import (
    behaved_as_naive,
    cost_record,
    field_metrics,
    grouped_metrics,
    inspect_view,
    metrics_of,
    status_counts,
    subfield_metrics,
    tool_totals,
    total_latency,
    total_usage,
)
from stages.summary.provenance import TargetsInfo, project_record
from stages.summary.rows import SCORED_ATTEMPT, ProblemRow, weak_passes
from stages.uncertainty.intervals import methods_record


def _problem_record(row: ProblemRow, prices: Prices | None) -> dict[str, Any]:
    failure = row.first_failure
    return {
        "problem_id": row.problem_id,
        "split": row.split,
        "category": row.category,
        "field": row.field,
        "subfield": row.subfield,
        "state": row.state,
        "resolved": row.resolved,
        "steps_passed": row.steps_passed,
        "steps_scored": row.steps_scored,
        "steps_skipped": row.steps_skipped,
        "first_failure": None
        if failure is None
        else {"step_id": failure.step_id, "status": failure.status, "reason": one_line(failure.reason)},
        "steps": [
            {
                "step_id": step.step_id,
                "status": step.status,
                "reason": one_line(step.reason),
                "tools": step.tools.to_record(),
            }
            for step in row.steps
        ],
        "tools": row.tools.to_record(),
        "usage": row.usage.to_record() if row.usage else None,
        "latency_s": row.latency_s,
        "cost": total_cost(cost_of(usage, prices) for usage in row.attempt_usages),
        "attempt_costs": [cost_of(usage, prices) for usage in row.attempt_usages],
        "error": one_line(row.error) if row.error else None,
    }


def summary_record(
    settings: Settings,
    rows: Sequence[ProblemRow],
    *,
    inputs_fingerprint: str,
    targets: TargetsInfo,
    started: str | None,
    summarized_at: str,
    plot_names: Sequence[str],
    attempts: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    complete = all(row.state not in ("missing_details", "invalid_details") for row in rows)
    prices = prices_of(settings)
    return {
        "fingerprint": inputs_fingerprint,
        "status": "complete" if complete else "partial",
        "model": settings.model,
        "run": settings.run_name,
        "split": settings.split,
        "category": list(settings.category),
        "sample_ids": list(settings.sample_ids),
        "mode": settings.mode,
        "with_background": settings.with_background,
        "carry": settings.carry,
        "attempts_per_problem": settings.attempts,
        "run_started": started,
        "summarized_at": summarized_at,
        "targets": {"kind": targets.kind, "note": targets.note},
        "attempt_scored": SCORED_ATTEMPT,
        **metrics_of(rows).as_dict(min_problems=0),
        "uncertainty": methods_record(),
        "inspect_ai_view": inspect_view(rows).as_dict(),
        "by_category": {name: m.as_dict() for name, m in grouped_metrics(rows, "category").items()},
        "by_field": {name: m.as_dict() for name, m in field_metrics(rows).items()},
        "by_subfield": {name: {"field": field, **m.as_dict()} for name, (field, m) in subfield_metrics(rows).items()},
        "by_split": {name: m.as_dict() for name, m in grouped_metrics(rows, "split").items()},
        "status_counts": status_counts(rows),
        "problems": [_problem_record(row, prices) for row in rows],
        "failed_problems": [
            {"problem_id": row.problem_id, "reason": one_line(row.error or row.state)} for row in rows if row.failed
        ],
        "usage": total_usage(rows),
        "latency_s": total_latency(rows),
        "cost": cost_record(rows, prices),
        "project": project_record(),
        "concurrency": settings.concurrency,
        "tool_use": {
            "attempt_scored": tool_totals(rows).to_record(),
            "all_attempts": sum((row.tools for row in rows), ToolStats()).to_record(),
            "behaved_as_naive": behaved_as_naive(rows, settings.mode),
        },
        "weak_official_tests": [{"step_id": step_id, "reason": weak.reason} for step_id, weak in weak_passes(rows)],
        "plots": list(plot_names),
        "attempts": dict(attempts) if attempts is not None else None,
    }
