"""summary.json: the typed `Summary` record (`stages.records.summary`) of the problem rows and their metrics;
the summarize stage writes its `to_record()` and renders summary.md from it (`stages.summarize.markdown`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from stages.config.fingerprints import FingerprintParts
from stages.config.settings import RECORDED_SETTINGS, Settings
from stages.generate.identity import where_snippets_ran
from stages.numbers.metrics import (
    behaved_as_naive,
    field_metrics,
    grouped_metrics,
    inspect_view,
    metrics_of,
    run_cost,
    status_counts,
    subfield_metrics,
    tool_totals,
    total_latency,
    total_usage,
)
from stages.numbers.pricing import Prices, cost_of, prices_of, total_cost
from stages.numbers.provenance import project_version
from stages.numbers.rows import SCORED_ATTEMPT, ProblemRow, weak_passes
from stages.numbers.uncertainty.intervals import interval_methods
from stages.records.endpoint import endpoint_uses
from stages.records.results import ToolStats, cached_selection
from stages.records.run_conditions import unscored_steps
from stages.records.stamp import Stamp
from stages.records.summary import (
    AttemptMetrics,
    Caveat,
    EnvironmentCount,
    EnvironmentsSummary,
    FailedProblem,
    Groups,
    RecordedInvocation,
    RecordedUsage,
    RunIdentity,
    RunSetup,
    StepOutcome,
    Summary,
    SummaryProblem,
    SummaryStep,
    SummaryTargets,
    ToolUse,
    WeakPass,
)
from stages.storage.json_values import FrozenObject, freeze_object, obj, optional_text, text
from stages.summarize.targets_info import TargetsInfo


def one_line(text: str, limit: int = 300) -> str:
    """A recorded reason as summary.json keeps it: its whitespace runs as single spaces, at most `limit` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _step_outcome(step_id: str, status: str, reason: str) -> StepOutcome:
    return StepOutcome(step_id, status, one_line(reason))


def _problem_record(row: ProblemRow, prices: Prices | None) -> SummaryProblem:
    failure = row.first_failure
    return SummaryProblem(
        problem_id=row.problem_id,
        steps=tuple(SummaryStep(step.step_id, step.status, one_line(step.reason), step.tools) for step in row.steps),
        split=row.split,
        category=row.category,
        field=row.field,
        subfield=row.subfield,
        state=row.state,
        resolved=row.resolved,
        steps_passed=row.steps_passed,
        steps_scored=row.steps_scored,
        steps_skipped=row.steps_skipped,
        first_failure=None if failure is None else _step_outcome(failure.step_id, failure.status, failure.reason),
        tools=row.tools,
        usage=RecordedUsage.of(row.usage) if row.usage else None,
        latency_s=row.latency_s,
        cost=total_cost(cost_of(usage, prices) for usage in row.attempt_usages),
        attempt_costs=tuple(cost_of(usage, prices) for usage in row.attempt_usages),
        error=one_line(row.error) if row.error else None,
    )


def _identity(settings: Settings) -> RunIdentity:
    return RunIdentity(
        model=settings.model,
        run=settings.run_name,
        split=settings.split,
        category=tuple(settings.category),
        sample_ids=tuple(settings.sample_ids),
        mode=settings.mode,
        with_background=settings.with_background,
        carry=settings.carry,
        attempts_per_problem=settings.attempts,
        dataset=settings.dataset,
        problems_md5=_problems_md5(settings),
    )


def _problems_md5(settings: Settings) -> str | None:
    """The md5 the run's selection records for a manifest-bound dataset's problem file."""
    selection = cached_selection(settings.run_paths)
    return selection.problems_md5 if selection is not None else None


def _groups(rows: Sequence[ProblemRow]) -> Groups:
    return Groups(
        by_category={name: m.recorded() for name, m in grouped_metrics(rows, "category").items()},
        by_field={name: m.recorded() for name, m in field_metrics(rows).items()},
        by_subfield={name: m.recorded(field=field) for name, (field, m) in subfield_metrics(rows).items()},
        by_split={name: m.recorded() for name, m in grouped_metrics(rows, "split").items()},
    )


def _tool_use(rows: Sequence[ProblemRow], mode: str) -> ToolUse:
    every_attempt = sum((row.tools for row in rows), ToolStats())
    return ToolUse(tool_totals(rows), every_attempt, behaved_as_naive(rows, mode))


def _recorded_settings(config_settings: FrozenObject) -> FrozenObject:
    """The settings from config.json that shape the scores (RECORDED_SETTINGS) and have a value."""
    return freeze_object(
        {
            name: config_settings[name]
            for name in RECORDED_SETTINGS
            if name in config_settings and config_settings[name] not in ("", {}, None)
        }
    )


def _setup(settings: Settings, config_settings: FrozenObject, rows: Sequence[ProblemRow]) -> RunSetup:
    return RunSetup(
        base_url=text(config_settings.get("base_url")) or None,
        tool_names=tuple(settings.tool_names),
        tool_use_max_loops=settings.tool_use_max_loops,
        snippets_ran=where_snippets_ran(config_settings),
        settings=_recorded_settings(config_settings),
        endpoints=endpoint_uses(pair for row in rows for pair in row.endpoints),
    )


def tool_call_counts(rows: Sequence[ProblemRow]) -> dict[str, int]:
    """Tool-call outcomes of the scored attempt (the reader's counts)."""
    totals = tool_totals(rows)
    return {"ok": totals.ok, "error": totals.error, "timeout": totals.timeout, "sandbox_error": totals.sandbox_error}


def steps_without_targets(rows: Sequence[ProblemRow]) -> list[str]:
    """The scored steps that had no targets."""
    return unscored_steps(
        (step.step_id, step.reason or "") for row in rows for step in row.steps if step.status == "eval_error"
    )


def cached_timeouts(rows: Sequence[ProblemRow]) -> int:
    """How many timeout verdicts of scored steps came from the verdict cache (a timeout on a loaded machine stays
    cached until `rescore=timeouts` runs it again)."""
    return sum(step.status == "timeout" and step.cached for row in rows for step in row.scored_rows)


def environments_summary(settings: Settings, rows: Sequence[ProblemRow]) -> EnvironmentsSummary | None:
    """Under `environments=`: each environment's graded and passed scored steps, the steps that passed in it alone
    (every other environment graded and failed them), and the passes decided before the others ran."""
    names = [environment.name for environment in settings.grading_environments]
    if not names:
        return None
    graded = dict.fromkeys(names, 0)
    passed = dict.fromkeys(names, 0)
    only: dict[str, list[str]] = {name: [] for name in names}
    undecided = 0
    for step in (step for row in rows for step in row.scored_rows):
        verdicts = {verdict.name: verdict.passed for verdict in step.environments if verdict.name in graded}
        for name, passing in verdicts.items():
            graded[name] += 1
            passed[name] += passing
        winners = [name for name, passing in verdicts.items() if passing]
        if winners and len(verdicts) < len(names):
            undecided += 1
        elif len(winners) == 1:
            only[winners[0]].append(step.step_id)
    counts = tuple(EnvironmentCount(name, graded[name], passed[name], tuple(only[name])) for name in names)
    return EnvironmentsSummary(settings.all_environments, counts, undecided)


def summary_record(
    settings: Settings,
    rows: Sequence[ProblemRow],
    *,
    fingerprint_parts: FingerprintParts,
    targets: TargetsInfo,
    config: Mapping[str, object] | None,
    started: str | None,
    summarized_at: str,
    plot_names: Sequence[str],
    attempts: AttemptMetrics | None = None,
    caveats: tuple[Caveat, ...] = (),
    invocations: tuple[RecordedInvocation, ...] = (),
) -> Summary:
    complete = all(row.state not in ("missing_details", "invalid_details") for row in rows)
    prices = prices_of(settings)
    recorded = freeze_object(config)
    tool_calls = tool_call_counts(rows)
    stamp = Stamp.of(fingerprint_parts)
    return Summary(
        fingerprint=stamp.fingerprint,
        fingerprint_parts=stamp.parts,
        status="complete" if complete else "partial",
        identity=_identity(settings),
        run_started=started,
        summarized_at=summarized_at,
        targets=SummaryTargets(targets.kind, targets.note),
        attempt_scored=SCORED_ATTEMPT,
        headline_record=metrics_of(rows).recorded(min_problems=0),
        uncertainty=interval_methods(),
        inspect_ai_view=inspect_view(rows).recorded(),
        groups=_groups(rows),
        status_counts=status_counts(rows),
        problems=tuple(_problem_record(row, prices) for row in rows),
        failed_problems=tuple(
            FailedProblem(row.problem_id, one_line(row.error or row.state)) for row in rows if row.failed
        ),
        usage=total_usage(rows),
        latency_s=total_latency(rows),
        cost=run_cost(rows, prices),
        project=project_version(),
        concurrency=settings.concurrency,
        tool_use=_tool_use(rows, settings.mode),
        weak_official_tests=tuple(WeakPass(step_id, weak.reason) for step_id, weak in weak_passes(rows)),
        plots=tuple(plot_names),
        attempts=attempts,
        confinement=optional_text(recorded.get("confinement")),
        tool_calls=MappingProxyType({**tool_calls, "total": sum(tool_calls.values())}),
        steps_without_targets=tuple(steps_without_targets(rows)),
        recorded_caveats=caveats,
        recorded_invocations=invocations,
        recorded_setup=_setup(settings, obj(recorded.get("settings")), rows),
        recorded_cached_timeouts=cached_timeouts(rows),
        environments=environments_summary(settings, rows),
    )
