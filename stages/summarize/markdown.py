"""summary.md: the Markdown rendering of the problem rows and their metrics."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from stages.config.settings import RECORDED_SETTINGS, Settings
from stages.execution.untrusted import shown
from stages.generate.identity import where_snippets_ran
from stages.records.results import CELL_STATUSES, OCCASIONAL_STATUSES, ToolStats
from stages.records.status_glossary import GLOSSARY_LINK, glossary_markdown, verdict_entry
from stages.records.summary import Caveat, RecordedInvocation, caveats_text
from stages.storage.markdown_table import markdown_table
from stages.summarize.metrics import (
    InspectView,
    Metrics,
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
from stages.summarize.pricing import Prices, cost_of, money, prices_of, total_cost
from stages.summarize.provenance import TargetsInfo
from stages.summarize.rows import SCORED_ATTEMPT, ProblemRow, weak_passes
from stages.summarize.uncertainty.intervals import MIN_GROUP_PROBLEMS, HeadlineIntervals
from stages.summarize.uncertainty.text import (
    CLUSTERED_SHORT,
    INTERVALS_SENTENCE,
    RESOLVE_SHORT,
    interval_of,
    rate_range,
    step_interval_label,
)

NAME_LIMIT = 200  # characters of a name shown in Markdown
CAVEATS_LIMIT = 1000  # characters of the caveats line


def name_span(name: object) -> str:
    """A name a reader sees (`model=`, `run=`, a replay file's path, a folder) as a Markdown code span: whatever the
    operator or a shared results folder put in it, no Markdown or HTML of it is rendered."""
    return shown(name, limit=NAME_LIMIT, markdown=True)


def ratio(part: int, whole: int) -> str:
    """`50/50 (100.0%)`: every rate printed with its denominator."""
    return f"{part}/{whole} ({100.0 * part / whole:.1f}%)" if whole else f"{part}/{whole} (n/a)"


def invocation_lines(invocations: tuple[RecordedInvocation, ...]) -> list[str]:
    """`- invocations that generated or scored: 1) ... 2) ...` (UTC); nothing for a run recorded before them."""
    if not invocations:
        return []
    listed = "; ".join(f"{index}) {invocation.text}" for index, invocation in enumerate(invocations, 1))
    return [f"- invocations that generated or scored (UTC): {listed}"]


def caveat_lines(caveats: tuple[Caveat, ...]) -> list[str]:
    """`**Caveats:** targets derived from reference code; ...` and a blank line; nothing without caveats."""
    return [f"**Caveats:** {shown(caveats_text(caveats), limit=CAVEATS_LIMIT)}", ""] if caveats else []


def _targets_lines(targets: TargetsInfo) -> list[str]:
    note = f" ({targets.note})" if targets.note else ""
    if targets.kind == "derived":
        return [f"**Note: targets derived from reference code, not the official test_data.h5.**{note}", ""]
    if targets.kind == "missing":
        return [
            f"**Note: no targets file: steps that need targets are eval_error, not scored against official "
            f"targets.**{note}",
            "",
        ]
    if targets.kind == "unknown":
        return [f"**Note: the targets used for scoring could not be determined.**{note}", ""]
    return []


def _targets_text(targets: TargetsInfo) -> str:
    names = {
        "official": "official test_data.h5",
        "explicit": "targets file given by h5py_file",
        "derived": "derived from reference code (not the official test_data.h5)",
        "missing": "missing",
        "unknown": "unknown",
    }
    return names[targets.kind] + (f" ({targets.note})" if targets.note else "")


def _recorded_settings_text(recorded: Mapping[str, Any]) -> str:
    """The settings from config.json that shape the scores but are not in the lines above."""
    parts = []
    for name in RECORDED_SETTINGS:
        if name in recorded and recorded[name] not in ("", {}, None):
            value = recorded[name]
            parts.append(f"{name}={json.dumps(value, sort_keys=True) if isinstance(value, dict) else value}")
    return ", ".join(parts)


def _header_lines(
    settings: Settings,
    targets: TargetsInfo,
    config: Mapping[str, Any] | None,
    started: str | None,
    summarized_at: str,
    caveats: tuple[Caveat, ...],
) -> list[str]:
    recorded = (config or {}).get("settings", {})
    categories = ", ".join(settings.category)
    samples = ", ".join(settings.sample_ids) or "(all)"
    model, run = name_span(settings.model), name_span(settings.run_name)
    lines = [f"# SciCode results: {model} / {run}", ""]
    lines += _targets_lines(targets) + caveat_lines(caveats)  # the first lines: what to know about the numbers
    lines += [
        f"- model: {model}" + (f" at {name_span(recorded['base_url'])}" if recorded.get("base_url") else ""),
        f"- run: {run} ({name_span(settings.run_paths.run_dir)})",
        f"- split: {settings.split}; category: {categories}; sample_ids: {samples}",
        f"- mode: {settings.mode}"
        + (
            f" (tools: {', '.join(settings.tool_names)}, at most {settings.tool_use_max_loops} model calls per step)"
            if settings.mode == "tool_use"
            else ""
        ),
        f"- background: {'with step background' if settings.with_background else 'without step background'}",
        f"- targets: {'derived (see the note above)' if targets.kind == 'derived' else _targets_text(targets)}",
        f"- snippets ran: {where_snippets_ran(recorded)}",
        f"- confinement of model code: {(config or {}).get('confinement') or 'unknown (config.json has none)'}",
        f"- run started: {started or 'unknown'}; summarized at: {summarized_at} (UTC)",
    ]
    shown = _recorded_settings_text(recorded)
    if shown:
        lines.append(f"- settings: {shown}")
    if settings.attempts > 1:
        lines.append(
            f"- attempts: {settings.attempts} per problem (strategy {settings.attempt_strategy}); the tables "
            f"score attempt {SCORED_ATTEMPT + 1}, the Attempts section covers all of them; token usage and "
            f"latency sum all attempts"
        )
    return lines + [""]


def resolve_range(intervals: HeadlineIntervals | None) -> str:
    """`3.6% to 62.4%`; `-` for a group too small for an interval."""
    found = intervals.resolve.interval if intervals else None
    return "-" if found is None else rate_range(found.low, found.high)


def step_range(intervals: HeadlineIntervals | None) -> str:
    """`13.0% to 79.3%`; `-` for a group too small for an interval."""
    found = intervals.steps.interval if intervals else None
    return "-" if found is None else rate_range(found.low, found.high)


def resolve_interval_text(intervals: HeadlineIntervals | None) -> str:
    """`3.6% to 62.4% (Wilson)`."""
    shown = resolve_range(intervals)
    return shown if shown == "-" else f"{shown} ({RESOLVE_SHORT})"


def step_interval_text(intervals: HeadlineIntervals | None) -> str:
    """`13.0% to 79.3% (clustered Wilson, effective n 8.7 of 13 steps)`."""
    shown = step_range(intervals)
    if shown == "-" or intervals is None or intervals.steps.size is None:
        return shown
    return f"{shown} ({step_interval_label(intervals.steps.size.effective, intervals.steps.steps)})"


SMALL_GROUPS_NOTE = f"Rows of fewer than {MIN_GROUP_PROBLEMS} problems show their counts only (no interval)."


def _headline_lines(metrics: Metrics) -> list[str]:
    intervals = metrics.intervals(min_problems=0)
    rows = [
        ("main_problem_resolve_rate", ratio(metrics.resolved, metrics.evaluated), resolve_interval_text(intervals)),
        ("subproblem", ratio(metrics.steps_passed, metrics.steps_scored), step_interval_text(intervals)),
        ("Total / Evaluated / Error", f"{metrics.total} / {metrics.evaluated} / {metrics.errors}", ""),
    ]
    raw = [
        ("main_problem_resolved", metrics.resolved),
        ("main_problem_total", metrics.evaluated),
        ("subproblem_correct", metrics.steps_passed),
        ("subproblem_total", metrics.steps_scored),
        ("skipped steps (prefilled, not scored)", metrics.steps_skipped),
    ]
    return (
        ["## Scores [^defs]", ""]
        + markdown_table(("metric", "value", "95% interval"), rows, (False, True, False))
        + ["", INTERVALS_SENTENCE, "", "Raw counts:", ""]
        + markdown_table(("count", "value"), raw, (False, True))
        + [""]
    )


def _group_rates(m: Metrics) -> tuple[str, str, str, str]:
    """A group's two rates, each followed by its interval (only from MIN_GROUP_PROBLEMS problems on)."""
    intervals = m.intervals()
    return (
        ratio(m.resolved, m.evaluated),
        resolve_range(intervals),
        ratio(m.steps_passed, m.steps_scored),
        step_range(intervals),
    )


GROUP_RATE_HEADER = (
    "main_problem_resolve_rate",
    f"95% interval ({RESOLVE_SHORT})",
    "subproblem",
    f"95% interval ({CLUSTERED_SHORT})",
)
GROUP_RATE_RIGHT = (True, True, True, True)


def _group_lines(title: str, label: str, groups: Mapping[str, Metrics]) -> list[str]:
    rows = [(name, *_group_rates(m), m.total, m.evaluated, m.errors, m.steps_skipped) for name, m in groups.items()]
    header = (label, *GROUP_RATE_HEADER, "Total", "Evaluated", "Error", "skipped")
    right = (False, *GROUP_RATE_RIGHT, True, True, True, True)
    return [f"## {title}", ""] + markdown_table(header, rows, right) + ["", SMALL_GROUPS_NOTE, ""]


def _subfield_lines(groups: Mapping[str, tuple[str, Metrics]]) -> list[str]:
    rows = [(field, name, *_group_rates(m), m.total, m.errors, m.steps_skipped) for name, (field, m) in groups.items()]
    header = ("field", "subfield", *GROUP_RATE_HEADER, "Total", "Error", "skipped")
    right = (False, False, *GROUP_RATE_RIGHT, True, True, True)
    return ["## By subfield", ""] + markdown_table(header, rows, right) + ["", SMALL_GROUPS_NOTE, ""]


def _inspect_view_lines(view: InspectView) -> list[str]:
    rows = [
        ("subproblem (all steps, prefilled counted as not passed)", ratio(view.steps_passed, view.steps_total)),
        (
            "main_problem_resolve_rate (a problem with a prefilled step never resolves)",
            ratio(view.resolved, view.problems),
        ),
    ]
    return (
        [
            "## Official inspect_ai step view (for comparison only)",
            "",
            "The headline above excludes the prefilled steps (13.6, 62.1, 76.3) from every denominator. The "
            "official inspect_ai task counts every step of a problem, prefilled ones included and never passed "
            "(291 steps on the test split, 341 on both); its figures for this run are:",
            "",
        ]
        + markdown_table(("inspect_ai view", "value"), rows, (False, True))
        + [""]
    )


def _failed_step_lines(rows: Sequence[ProblemRow]) -> list[str]:
    failed = [(row.problem_id, step) for row in rows for step in row.scored_rows if step.status != "pass"]
    lines = ["## Failed steps", ""]
    if not failed:
        return lines + ["None: every scored step passed.", ""]
    lines += [f"{len(failed)} scored step(s) did not pass (attempt {SCORED_ATTEMPT + 1}); the reason of each:", ""]
    lines += [f"- {step.step_id} ({step.status}): {_reason(step.reason)}" for _, step in failed]
    return lines + [""]


def _weak_test_lines(rows: Sequence[ProblemRow]) -> list[str]:
    flagged = weak_passes(rows)
    if not flagged:
        return []
    lines = [
        "## Passes on weak official tests",
        "",
        f"{len(flagged)} step(s) passed official tests that a trivial answer passes too (stages/benchmark/weak_tests.json); "
        "the official verdict stays a pass:",
        "",
    ]
    return lines + [f"- {step_id} (pass, {weak.note})" for step_id, weak in flagged] + [""]


NAIVE_BEHAVIOUR_LINE = (
    "**tool_use behaved as naive**: the model made no tool call in {calls} model calls. A server whose chat "
    "template ignores `tools` does this; see docs/local-servers-sandboxfusion-dask.md, Local servers (`tool_choice=code_interpreter` forces the "
    "first call of each step)."
)


def _tool_lines(rows: Sequence[ProblemRow], attempts: int, mode: str) -> list[str]:
    scored = tool_totals(rows)
    every = sum((row.tools for row in rows), ToolStats())
    lines = ["## Tool use", ""]
    if behaved_as_naive(rows, mode):
        return lines + [NAIVE_BEHAVIOUR_LINE.format(calls=total_usage(rows)["calls"]), ""]
    if every.calls == 0:
        return lines + ["No tool calls in this run.", ""]
    header = ("scope", "calls", "ok", "error", "timeout", "sandbox_error", "other")
    right = (False, True, True, True, True, True, True)
    table = [(f"all steps, attempt {SCORED_ATTEMPT + 1}", *_tool_cells(scored))]
    if attempts > 1:
        table.append(("all steps, all attempts", *_tool_cells(every)))
    table += [
        (f"step {step.step_id}", *_tool_cells(step.tools)) for row in rows for step in row.steps if step.tools.calls
    ]
    return lines + markdown_table(header, table, right) + [""]


def _tool_cells(stats: ToolStats) -> tuple[int, ...]:
    return (stats.calls, stats.ok, stats.error, stats.timeout, stats.sandbox_error, stats.other)


def shown_statuses(counts: Mapping[str, int]) -> list[str]:
    """The statuses a step-status table lists: every one, those that occur only now and then where they occur."""
    return [status for status in CELL_STATUSES if status not in OCCASIONAL_STATUSES or counts.get(status, 0)]


def _status_lines(counts: Mapping[str, int]) -> list[str]:
    shown = shown_statuses(counts)
    total = sum(counts[status] for status in shown)
    rows: list[tuple[str, int, str]] = [
        (status, counts[status], f"{100.0 * counts[status] / total:.1f}%" if total else "n/a") for status in shown
    ]
    rows.append(("all steps", total, "100.0%" if total else "n/a"))
    lines = ["## Step statuses", ""] + markdown_table(("status", "steps", "share"), rows, (False, True, True))
    entries = [entry for status in shown if (entry := verdict_entry(status)) is not None]
    return (
        lines
        + ["", f"What each status means and how it counts (all statuses: {GLOSSARY_LINK}):", ""]
        + [
            *glossary_markdown(entries),
            "",
        ]
    )


def _problem_lines(rows: Sequence[ProblemRow], prices: Prices | None = None) -> list[str]:
    table = []
    for row in rows:
        failure = row.first_failure
        first = f"{failure.step_id} ({failure.status})" if failure else "-"
        tokens = f"{row.usage.total_tokens}" if row.usage else "-"
        latency = f"{row.latency_s:.1f}" if row.latency_s is not None else "-"
        table.append(
            (
                row.problem_id,
                row.split,
                row.category,
                f"{row.steps_passed}/{row.steps_scored}",
                "yes" if row.resolved else "no",
                first,
                row.state,
                tokens,
                latency,
                *([money(total_cost(cost_of(usage, prices) for usage in row.attempt_usages))] if prices else []),
            )
        )
    header = (
        "problem",
        "split",
        "category",
        "steps passed",
        "resolved",
        "first failing step",
        "details",
        "tokens",
        "latency s",
        *(["cost"] if prices else []),
    )
    right = (False, False, False, True, False, False, False, True, True, *([True] if prices else []))
    return ["## Problems", ""] + markdown_table(header, table, right) + [""]


def _failed_lines(rows: Sequence[ProblemRow]) -> list[str]:
    failed = [row for row in rows if row.failed]
    lines = ["## Problems whose generation or scoring failed", ""]
    if not failed:
        return lines + ["None.", ""]
    lines.append(f"{len(failed)} problem(s); each stays in every denominator with its unpassed steps.")
    lines.append("")
    lines += [f"- {row.problem_id} ({row.state}): {_reason(row.error or row.state)}" for row in failed]
    return lines + [""]


def _reason(text: str | None) -> str:
    """A reason in summary.md: model-derived text, so neutralised (`untrusted.shown`) in a code span."""
    return shown(text, markdown=True) if text else "(no reason given)"


def one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def price_text(prices: Mapping[str, Any] | None) -> str:
    """`$2.50 in / $10.00 out per million tokens (cached input $1.25)`, or the note that no price is set."""
    if not prices:
        return "no price set (price_input_per_mtok, price_output_per_mtok): tokens only"
    cached = prices.get("cached_input_per_mtok")
    return f"${prices['input_per_mtok']:.2f} in / ${prices['output_per_mtok']:.2f} out per million tokens" + (
        f" (cached input ${cached:.2f})" if cached is not None else ""
    )


def _cost_rows(cost: Mapping[str, Any]) -> list[tuple[str, str]]:
    if cost["prices"] is None:
        return [("cost", price_text(None))]
    rows = [
        ("cost, all attempts", money(cost["total"])),
        ("prices", price_text(cost["prices"])),
        ("attempts with usage (priced)", f"{cost['attempts_priced']}/{cost['attempts_total']}"),
    ]
    if len(cost["per_attempt"]) > 1:
        rows += [(f"cost of attempt {index + 1}", money(value)) for index, value in enumerate(cost["per_attempt"])]
    return rows


def _usage_lines(
    usage: Mapping[str, int],
    latency: float,
    total_problems: int,
    concurrency: int,
    cost: Mapping[str, Any] | None = None,
) -> list[str]:
    rows = [
        ("input tokens", usage["input_tokens"]),
        ("output tokens", usage["output_tokens"]),
        ("total tokens", usage["total_tokens"]),
        ("model calls", usage["calls"]),
        *(
            [("model calls whose reply stated no whole-number token count (that count taken as 0)", unknown)]
            if (unknown := usage.get("unknown_calls"))
            else []
        ),
        ("model latency (s, summed over calls; time queued in the server included)", f"{latency:.1f}"),
        ("concurrency (model calls in flight at most)", concurrency),
        ("problems reporting usage", f"{usage['problems_reporting']}/{total_problems}"),
        *(_cost_rows(cost) if cost is not None else []),
    ]
    return (
        ["## Token usage, cost and model latency", ""]
        + markdown_table(("quantity", "total"), rows, (False, True))
        + [""]
    )


def _rate_text(rate: float | None) -> str:
    return "n/a" if rate is None else f"{100.0 * rate:.1f}%"


def _attempt_lines(metrics: Mapping[str, Any] | None) -> list[str]:
    if metrics is None:
        return []
    lines = ["## Attempts", ""]
    if "error" in metrics:
        return lines + [f"Attempt metrics not computed: {metrics['error']}", ""]
    rows = [
        (
            f"attempt {row['attempt'] + 1}",
            ratio(row["main_problem_resolved"], row["main_problem_total"]),
            ratio(row["subproblem_correct"], row["subproblem_total"]),
        )
        for row in metrics["per_attempt"]
    ]
    best = metrics["any_attempt"]
    rows.append(
        (
            "any attempt (strategy pass)",
            ratio(best["main_problem_resolved"], best["main_problem_total"]),
            ratio(best["subproblem_correct"], best["subproblem_total"]),
        )
    )
    rows.append(
        (
            "mean over attempts (strategy avg)",
            _rate_text(metrics["mean_main_problem_resolve_rate"]),
            _rate_text(metrics["mean_subproblem_rate"]),
        )
    )
    lines += markdown_table(("attempts", "main_problem_resolve_rate", "subproblem"), rows, (False, True, True))
    intervals = metrics.get("pass_at_k_intervals") or {}
    pass_at = ", ".join(
        f"pass@{k} = {_rate_text(value)}" + (f" ({interval_of(intervals[k])})" if k in intervals else "")
        for k, value in metrics["pass_at_k"].items()
    )
    chosen = metrics["strategies"][metrics["strategy"]]
    lines += [
        "",
        f"{pass_at} (unbiased estimator over whole-problem outcomes, {metrics['problems']} problems; 95% "
        f"{CLUSTERED_SHORT} intervals over problems, each problem counted as its attempts // k draws of k "
        "attempts).",
        f"Configured attempt_strategy={metrics['strategy']}: main_problem_resolve_rate "
        f"{_rate_text(chosen['main_problem_resolve_rate'])}, subproblem {_rate_text(chosen['subproblem'])}. "
        f"The tables above score attempt {SCORED_ATTEMPT + 1}.",
        "",
    ]
    return lines


def _plot_lines(plot_names: Sequence[str]) -> list[str]:
    captions = {
        "step_status_grid.png": "Step status per problem",
        "status_counts.png": "Step verdicts",
        "pass_rate_by_category.png": "Pass rate by field and subfield",
    }
    lines = ["## Plots", ""]
    for name in plot_names:
        caption = captions.get(Path(name).name, Path(name).stem)
        lines += [f"![{caption}]({name})", ""]
    return lines


def _definitions_lines() -> list[str]:
    return [
        "[^defs]: Definitions. Total: problems selected for the run. Error: problems whose generation reported "
        "an error (details status generation_error or missing_generation) or that have no valid details file. "
        "Evaluated: equal to Total; every selected problem is in every denominator: an Error problem counts as "
        "unresolved, all its scored steps stay in the step denominator, and only steps with a pass verdict count "
        "as passed (none when there is no details file). main_problem_resolved: problems whose every scored step "
        "passed and whose generation had no error. subproblem: passed steps / scored steps over all selected "
        "problems (micro-average). Scored steps exclude the official prefilled steps (status skipped), as given "
        "by the problem data.",
        "",
    ]


def _cached_timeouts_line(rows: Sequence[ProblemRow]) -> str:
    """How many timeout verdicts came from the verdict cache (a timeout on a loaded machine stays cached until
    `rescore=timeouts` runs it again)."""
    count = sum(step.status == "timeout" and step.cached for row in rows for step in row.scored_rows)
    hint = ": `rescore=timeouts` executes them again" if count else ""
    return f"- timeouts served from the verdict cache: {count}{hint}"


def render_markdown(
    settings: Settings,
    rows: Sequence[ProblemRow],
    *,
    targets: TargetsInfo,
    config: Mapping[str, Any] | None,
    started: str | None,
    summarized_at: str,
    plot_names: Sequence[str],
    attempts: Mapping[str, Any] | None = None,
    caveats: tuple[Caveat, ...] = (),
    invocations: tuple[RecordedInvocation, ...] = (),
) -> str:
    metrics = metrics_of(rows)
    lines = _header_lines(settings, targets, config, started, summarized_at, caveats)
    lines[-1:-1] = invocation_lines(invocations)
    lines.insert(len(lines) - 1, _cached_timeouts_line(rows))
    lines += _headline_lines(metrics)
    lines += _inspect_view_lines(inspect_view(rows))
    lines += _group_lines("By field", "field", field_metrics(rows))
    lines += _subfield_lines(subfield_metrics(rows))
    splits = grouped_metrics(rows, "split")
    if len(splits) > 1:
        lines += _group_lines("By split", "split", splits)
    lines += _attempt_lines(attempts)
    lines += _status_lines(status_counts(rows))
    lines += _failed_lines(rows)
    lines += _failed_step_lines(rows)
    lines += _weak_test_lines(rows)
    prices = prices_of(settings)
    lines += _problem_lines(rows, prices)
    lines += _usage_lines(
        total_usage(rows), total_latency(rows), len(rows), settings.concurrency, cost_record(rows, prices)
    )
    lines += _tool_lines(rows, settings.attempts, settings.mode)
    lines += _plot_lines(plot_names)
    lines += _definitions_lines()
    return "\n".join(lines)
