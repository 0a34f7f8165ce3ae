"""summary.md: the Markdown rendering of the run's `Summary` record (`stages.records.summary`)."""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

from stages.benchmark.datasets import DEFAULT_DATASET
from stages.benchmark.weak_tests import FLAG as WEAK_TEST_FLAG
from stages.execution.untrusted import shown
from stages.numbers.pricing import money
from stages.numbers.text import CAVEATS_LIMIT, name_span, ratio
from stages.numbers.uncertainty.intervals import MIN_GROUP_PROBLEMS
from stages.numbers.uncertainty.text import (
    CLUSTERED_SHORT,
    INTERVALS_SENTENCE,
    RESOLVE_SHORT,
    rate_range,
    step_interval_label,
)
from stages.records.endpoint import EndpointUse
from stages.records.results import CELL_STATUSES, OCCASIONAL_STATUSES, ToolStats
from stages.records.run_conditions import conditions_markdown
from stages.records.status_glossary import GLOSSARY_LINK, glossary_markdown, verdict_entry
from stages.records.summary import (
    AttemptCounts,
    AttemptMetrics,
    Caveat,
    EnvironmentsSummary,
    GroupMetrics,
    GroupRecord,
    InspectAiView,
    RecordedInvocation,
    RecordedPrices,
    RunCost,
    RunIdentity,
    StrategyRates,
    Summary,
    SummaryTargets,
    WeakPass,
    caveats_text,
    group_metrics,
)
from stages.storage.json_values import (
    FrozenObject,
    thaw,
)
from stages.storage.markdown_table import markdown_table

ENDPOINT_LIMIT = 800  # characters of an endpoint and what it said of itself


def invocation_lines(invocations: tuple[RecordedInvocation, ...]) -> list[str]:
    """`- invocations that generated or scored: 1) ... 2) ...` (UTC); nothing for a run recorded before them."""
    if not invocations:
        return []
    listed = "; ".join(f"{index}) {invocation.text}" for index, invocation in enumerate(invocations, 1))
    return [f"- invocations that generated or scored (UTC): {listed}"]


def caveat_lines(caveats: tuple[Caveat, ...]) -> list[str]:
    """`**Caveats:** targets derived from reference code; ...` and a blank line; nothing without caveats."""
    return [f"**Caveats:** {shown(caveats_text(caveats), limit=CAVEATS_LIMIT)}", ""] if caveats else []


def published_lines(summary: Summary) -> list[str]:
    """`**Published setting:** ...` (`stages.summarize.published_setting`), then each published figure of the run's
    model beside the run's, with its source; a blank line after."""
    lines = [f"**Published setting:** {shown(summary.published.text, limit=CAVEATS_LIMIT)}", ""]
    if summary.references:
        lines.append("**Published figures of this model** (`stages/benchmark/published.json`):")
        lines += [
            f"- {shown(figure.text, limit=CAVEATS_LIMIT)} (source: {shown(figure.source)})"
            for figure in summary.references
        ]
        lines.append("")
    return lines


def _targets_lines(targets: SummaryTargets) -> list[str]:
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


def _targets_text(targets: SummaryTargets) -> str:
    names = {
        "official": "official test_data.h5",
        "explicit": "targets file given by h5py_file",
        "derived": "derived from reference code (not the official test_data.h5)",
        "missing": "missing",
        "unknown": "unknown",
    }
    return names.get(targets.kind, targets.kind) + (f" ({targets.note})" if targets.note else "")


def _setting_text(value: object) -> str:
    return json.dumps(value, sort_keys=True) if isinstance(value, dict) else f"{value}"


def _recorded_settings_text(recorded: FrozenObject) -> str:
    """The settings from config.json that shape the scores but are not in the lines above."""
    return ", ".join(f"{name}={_setting_text(thaw(value))}" for name, value in recorded.items())


def scored_attempt_number(summary: Summary) -> int:
    """The 1-based number of the attempt the tables score."""
    return summary.attempt_scored + 1


def _attempts_per_problem(summary: Summary) -> int:
    return summary.identity.attempts_per_problem or 1


def _mode_text(summary: Summary) -> str:
    setup = summary.setup
    if summary.identity.mode != "tool_use":
        return summary.identity.mode
    return f"tool_use (tools: {', '.join(setup.tool_names)}, at most {setup.tool_use_max_loops} model calls per step)"


def _attempts_lines(summary: Summary) -> list[str]:
    attempts = _attempts_per_problem(summary)
    if attempts <= 1:
        return []
    strategy = summary.attempts.strategy if summary.attempts is not None else ""
    scored = scored_attempt_number(summary)
    return [
        f"- attempts: {attempts} per problem (strategy {strategy}); the tables score attempt {scored}, the Attempts "
        "section covers all of them; token usage and latency sum all attempts"
    ]


def _cached_timeouts_line(count: int) -> str:
    """How many timeout verdicts came from the verdict cache (a timeout on a loaded machine stays cached until
    `rescore=timeouts` runs it again)."""
    hint = ": `rescore=timeouts` executes them again" if count else ""
    return f"- timeouts served from the verdict cache: {count}{hint}"


def _endpoint_lines(endpoints: Sequence[EndpointUse]) -> list[str]:
    """Every endpoint that answered, with what it said of itself and the steps it answered (none recorded: none)."""
    if not endpoints:
        return []
    if len(endpoints) == 1:
        return [f"- answered by: {_endpoint_span(endpoints[0])}"]
    return [f"- answered by {len(endpoints)} endpoints: " + "; ".join(_endpoint_span(use) for use in endpoints)]


def _endpoint_span(use: EndpointUse) -> str:
    return shown(use.shown(), limit=ENDPOINT_LIMIT, markdown=True)


def _dataset_lines(identity: RunIdentity) -> list[str]:
    """A dataset other than the original, and the md5 of the problem file its manifest states (none for the original:
    its header stays as it was)."""
    if identity.dataset == DEFAULT_DATASET:
        return []
    bound = f" (problem file md5 {identity.problems_md5}, as its manifest states)" if identity.problems_md5 else ""
    return [f"- dataset: {identity.dataset}{bound}"]


def _header_lines(summary: Summary, run_dir: Path) -> list[str]:
    identity, setup, targets = summary.identity, summary.setup, summary.targets
    categories = ", ".join(identity.category)
    samples = ", ".join(identity.sample_ids) or "(all)"
    model, run = name_span(identity.model), name_span(identity.run)
    lines = [f"# SciCode results: {model} / {run}", ""]
    # the first lines: what to know about the numbers
    lines += _targets_lines(targets) + caveat_lines(summary.caveats) + published_lines(summary)
    lines += [
        f"- model: {model}" + (f" at {name_span(setup.base_url)}" if setup.base_url else ""),
        *_endpoint_lines(setup.endpoints),
        f"- run: {run} ({name_span(run_dir)})",
        *_dataset_lines(identity),
        f"- split: {identity.split}; category: {categories}; sample_ids: {samples}",
        f"- mode: {_mode_text(summary)}",
        f"- background: {'with step background' if identity.with_background else 'without step background'}",
        f"- targets: {'derived (see the note above)' if targets.kind == 'derived' else _targets_text(targets)}",
        f"- snippets ran: {setup.snippets_ran}",
        f"- confinement of model code: {summary.confinement or 'unknown (config.json has none)'}",
        f"- run started: {summary.run_started or 'unknown'}; summarized at: {summary.summarized_at} (UTC)",
    ]
    settings_text = _recorded_settings_text(setup.settings)
    if settings_text:
        lines.append(f"- settings: {settings_text}")
    lines += _attempts_lines(summary) + invocation_lines(summary.invocations)
    lines += environment_lines(summary.environments)
    return lines + [_cached_timeouts_line(summary.cached_timeouts), ""]


def environment_lines(environments: EnvironmentsSummary | None) -> list[str]:
    """Under `environments=`: one line per grading environment (graded, passed, passed there alone and which), and
    how many passes were decided before the other environments ran."""
    if environments is None:
        return []
    how = "every environment ran" if environments.every_verdict else "the first pass ends a step"
    names = ", ".join(count.name for count in environments.counts)
    lines = [f"- grading environments: {names}; a step passes when any passes ({how})"]
    for count in environments.counts:
        alone = f": {', '.join(count.only)}" if count.only else ""
        lines.append(
            f"  - {count.name}: passed {count.passed} of {count.graded} graded steps; "
            f"{len(count.only)} passed only here{alone}"
        )
    if environments.passed_before_the_others:
        lines.append(
            f"  - {environments.passed_before_the_others} passed step(s) were not graded in every environment "
            "(`all_environments=true` grades them everywhere)"
        )
    return lines


def resolve_range(metrics: GroupMetrics) -> str:
    """`3.6% to 62.4%`; `-` for a group too small for an interval."""
    found = metrics.resolve_interval
    return "-" if found is None else rate_range(found.low, found.high)


def step_range(metrics: GroupMetrics) -> str:
    """`13.0% to 79.3%`; `-` for a group too small for an interval."""
    found = metrics.step_interval
    return "-" if found is None else rate_range(found.low, found.high)


def resolve_interval_text(metrics: GroupMetrics) -> str:
    """`3.6% to 62.4% (Wilson)`."""
    shown = resolve_range(metrics)
    return shown if shown == "-" else f"{shown} ({RESOLVE_SHORT})"


def step_interval_text(metrics: GroupMetrics) -> str:
    """`13.0% to 79.3% (clustered Wilson, effective n 8.7 of 13 steps)`."""
    shown = step_range(metrics)
    if shown == "-" or metrics.effective_n is None:
        return shown
    return f"{shown} ({step_interval_label(metrics.effective_n, metrics.interval_steps)})"


SMALL_GROUPS_NOTE = f"Rows of fewer than {MIN_GROUP_PROBLEMS} problems show their counts only (no interval)."


def _headline_lines(metrics: GroupMetrics) -> list[str]:
    rows = [
        ("main_problem_resolve_rate", ratio(metrics.resolved, metrics.evaluated), resolve_interval_text(metrics)),
        ("subproblem", ratio(metrics.steps_passed, metrics.steps_scored), step_interval_text(metrics)),
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


def _group_rates(m: GroupMetrics) -> tuple[str, str, str, str]:
    """A group's two rates, each followed by its interval (recorded from MIN_GROUP_PROBLEMS problems on)."""
    return (
        ratio(m.resolved, m.evaluated),
        resolve_range(m),
        ratio(m.steps_passed, m.steps_scored),
        step_range(m),
    )


GROUP_RATE_HEADER = (
    "main_problem_resolve_rate",
    f"95% interval ({RESOLVE_SHORT})",
    "subproblem",
    f"95% interval ({CLUSTERED_SHORT})",
)
GROUP_RATE_RIGHT = (True, True, True, True)


def _group_lines(title: str, label: str, groups: Mapping[str, GroupMetrics]) -> list[str]:
    rows = [(name, *_group_rates(m), m.total, m.evaluated, m.errors, m.steps_skipped) for name, m in groups.items()]
    header = (label, *GROUP_RATE_HEADER, "Total", "Evaluated", "Error", "skipped")
    right = (False, *GROUP_RATE_RIGHT, True, True, True, True)
    return [f"## {title}", ""] + markdown_table(header, rows, right) + ["", SMALL_GROUPS_NOTE, ""]


def _subfield_lines(groups: Mapping[str, GroupRecord]) -> list[str]:
    fields = {name: record.field or "" for name, record in groups.items()}
    rows = [
        (fields[name], name, *_group_rates(m), m.total, m.errors, m.steps_skipped)
        for name, m in group_metrics(groups).items()
    ]
    header = ("field", "subfield", *GROUP_RATE_HEADER, "Total", "Error", "skipped")
    right = (False, False, *GROUP_RATE_RIGHT, True, True, True)
    return ["## By subfield", ""] + markdown_table(header, rows, right) + ["", SMALL_GROUPS_NOTE, ""]


def _inspect_view_lines(view: InspectAiView) -> list[str]:
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


def _failed_step_lines(summary: Summary) -> list[str]:
    failed = [step for problem in summary.problems for step in problem.steps if step.status not in ("skipped", "pass")]
    lines = ["## Failed steps", ""]
    if not failed:
        return lines + ["None: every scored step passed.", ""]
    scored = scored_attempt_number(summary)
    lines += [f"{len(failed)} scored step(s) did not pass (attempt {scored}); the reason of each:", ""]
    lines += [f"- {step.step_id} ({step.status}): {_reason(step.reason)}" for step in failed]
    return lines + [""]


def _weak_test_lines(flagged: Sequence[WeakPass]) -> list[str]:
    if not flagged:
        return []
    lines = [
        "## Passes on weak official tests",
        "",
        f"{len(flagged)} step(s) passed official tests that a trivial answer passes too (stages/benchmark/weak_tests.json); "
        "the official verdict stays a pass:",
        "",
    ]
    listed = [f"- {weak.step_id} (pass, {WEAK_TEST_FLAG}: {weak.reason})" for weak in flagged]
    return lines + listed + [""]


NAIVE_BEHAVIOUR_LINE = (
    "**tool_use behaved as naive**: the model made no tool call in {calls} model calls. A server whose chat "
    "template ignores `tools` does this; see docs/local-servers-sandboxfusion-dask.md, Local servers (`tool_choice=code_interpreter` forces the "
    "first call of each step)."
)


def _tool_lines(summary: Summary) -> list[str]:
    scored, every = summary.tool_use.attempt_scored, summary.tool_use.all_attempts
    lines = ["## Tool use", ""]
    if summary.tool_use.behaved_as_naive:
        return lines + [NAIVE_BEHAVIOUR_LINE.format(calls=summary.usage.calls), ""]
    if every.calls == 0:
        return lines + ["No tool calls in this run.", ""]
    header = ("scope", "calls", "ok", "error", "timeout", "sandbox_error", "other")
    right = (False, True, True, True, True, True, True)
    table = [(f"all steps, attempt {scored_attempt_number(summary)}", *_tool_cells(scored))]
    if _attempts_per_problem(summary) > 1:
        table.append(("all steps, all attempts", *_tool_cells(every)))
    per_step = [(step.step_id, step.tools) for problem in summary.problems for step in problem.steps]
    return lines + markdown_table(header, table, right) + ["", tool_steps_line(per_step), ""]


def tool_steps_line(per_step: Sequence[tuple[str, ToolStats]]) -> str:
    """The steps' tool calls in one line (each step's own counts are in report.html and summary.json): how many
    steps called a tool, the calls per such step, and how many steps had a call that failed."""
    calling = [(step_id, stats) for step_id, stats in per_step if stats.calls]
    if not calling:
        return f"- steps that called a tool: 0 of {len(per_step)}"
    counts = sorted(stats.calls for _, stats in calling)
    most_id, most = max(calling, key=lambda item: item[1].calls)
    failed = sum(stats.error + stats.timeout + stats.sandbox_error > 0 for _, stats in calling)
    return (
        f"- steps that called a tool: {len(calling)} of {len(per_step)}; calls per such step: median "
        f"{statistics.median(counts):g}, most {most.calls} (step {most_id}); steps with a failed call (error, "
        f"timeout or sandbox_error): {failed}; each step's counts are in report.html and summary.json"
    )


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


def _problem_lines(summary: Summary) -> list[str]:
    prices = summary.cost.prices is not None
    table = []
    for problem in summary.problems:
        failure = problem.first_failure
        first = f"{failure.step_id} ({failure.status})" if failure else "-"
        tokens = f"{problem.usage.total_tokens}" if problem.usage is not None else "-"
        latency = problem.latency_s
        table.append(
            (
                problem.problem_id,
                problem.split,
                problem.category,
                f"{problem.steps_passed}/{problem.steps_scored}",
                "yes" if problem.resolved else "no",
                first,
                problem.state,
                tokens,
                f"{latency:.1f}" if latency is not None else "-",
                *([money(problem.cost)] if prices else []),
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


def _failed_lines(summary: Summary) -> list[str]:
    states = {problem.problem_id: problem.state for problem in summary.problems}
    lines = ["## Problems whose generation or scoring failed", ""]
    if not summary.failed_problems:
        return lines + ["None.", ""]
    lines.append(f"{len(summary.failed_problems)} problem(s); each stays in every denominator with its unpassed steps.")
    lines.append("")
    lines += [
        f"- {failed.problem_id} ({states.get(failed.problem_id, '')}): {_reason(failed.reason)}"
        for failed in summary.failed_problems
    ]
    return lines + [""]


def _reason(text: str | None) -> str:
    """A reason in summary.md: model-derived text, so neutralised (`untrusted.shown`) in a code span."""
    return shown(text, markdown=True) if text else "(no reason given)"


def price_text(prices: RecordedPrices | None) -> str:
    """`$2.50 in / $10.00 out per million tokens (cached input $1.25)`, or the note that no price is set."""
    if prices is None:
        return "no price set (price_input_per_mtok, price_output_per_mtok): tokens only"
    cached = prices.cached_input_per_mtok
    return f"${prices.input_per_mtok:.2f} in / ${prices.output_per_mtok:.2f} out per million tokens" + (
        f" (cached input ${cached:.2f})" if cached is not None else ""
    )


def _cost_rows(cost: RunCost) -> list[tuple[str, str]]:
    if cost.prices is None:
        return [("cost", price_text(None))]
    rows = [
        ("cost, all attempts", money(cost.total)),
        ("prices", price_text(cost.prices)),
        ("attempts with usage (priced)", f"{cost.attempts_priced}/{cost.attempts_total}"),
    ]
    if len(cost.per_attempt) > 1:
        rows += [(f"cost of attempt {index + 1}", money(value)) for index, value in enumerate(cost.per_attempt)]
    return rows


def _usage_lines(summary: Summary) -> list[str]:
    usage = summary.usage
    rows = [
        ("input tokens", usage.input_tokens),
        ("output tokens", usage.output_tokens),
        ("total tokens", usage.total_tokens),
        ("model calls", usage.calls),
        *(
            [("model calls whose reply stated no whole-number token count (that count taken as 0)", unknown)]
            if (unknown := usage.unknown_calls)
            else []
        ),
        (
            "model latency (s, summed over calls; time queued in the server included)",
            f"{summary.latency_s:.1f}",
        ),
        ("concurrency (model calls in flight at most)", summary.concurrency),
        ("problems reporting usage", f"{usage.problems_reporting}/{len(summary.problems)}"),
        *_cost_rows(summary.cost),
    ]
    return (
        ["## Token usage, cost and model latency", ""]
        + markdown_table(("quantity", "total"), rows, (False, True))
        + [""]
    )


def _rate_text(rate: float | None) -> str:
    return "n/a" if rate is None else f"{100.0 * rate:.1f}%"


def _counts_ratios(counts: AttemptCounts) -> tuple[str, str]:
    """An attempt row's two rates with their denominators."""
    return ratio(counts.resolved, counts.problems), ratio(counts.steps_passed, counts.steps_scored)


def _attempt_lines(metrics: AttemptMetrics | None, scored: int) -> list[str]:
    if metrics is None:
        return []
    lines = ["## Attempts", ""]
    if metrics.error is not None:
        return lines + [f"Attempt metrics not computed: {metrics.error}", ""]
    rows = [(f"attempt {row.attempt + 1}", *_counts_ratios(row.counts)) for row in metrics.per_attempt]
    if metrics.any_attempt is not None:
        rows.append(("any attempt (strategy pass)", *_counts_ratios(metrics.any_attempt)))
    rows.append(
        (
            "mean over attempts (strategy avg)",
            _rate_text(metrics.mean_main_problem_resolve_rate),
            _rate_text(metrics.mean_subproblem_rate),
        )
    )
    lines += markdown_table(("attempts", "main_problem_resolve_rate", "subproblem"), rows, (False, True, True))
    intervals = metrics.pass_at_k_intervals
    pass_at = ", ".join(
        f"pass@{k} = {_rate_text(value)}"
        + (f" ({rate_range(intervals[k].low, intervals[k].high)})" if k in intervals else "")
        for k, value in metrics.pass_at_k.items()
    )
    chosen = metrics.strategies.get(metrics.strategy, StrategyRates(None, None))
    lines += [
        "",
        f"{pass_at} (unbiased estimator over whole-problem outcomes, {metrics.problems} problems; 95% "
        f"{CLUSTERED_SHORT} intervals over problems, each problem counted as its attempts // k draws of k "
        "attempts).",
        f"Configured attempt_strategy={metrics.strategy}: main_problem_resolve_rate "
        f"{_rate_text(chosen.main_problem_resolve_rate)}, subproblem "
        f"{_rate_text(chosen.subproblem)}. The tables above score attempt {scored}.",
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


def render_markdown(summary: Summary, run_dir: Path) -> str:
    """summary.md of `summary`, the run in `run_dir` (named in the header), the run-conditions block last."""
    lines = _header_lines(summary, run_dir)
    lines += _headline_lines(summary.headline_metrics)
    lines += _inspect_view_lines(summary.inspect_ai_view)
    lines += _group_lines("By field", "field", group_metrics(summary.groups.by_field))
    lines += _subfield_lines(summary.groups.by_subfield)
    splits = group_metrics(summary.groups.by_split)
    if len(splits) > 1:
        lines += _group_lines("By split", "split", splits)
    lines += _attempt_lines(summary.attempts, scored_attempt_number(summary))
    lines += _status_lines(summary.status_counts)
    lines += _failed_lines(summary)
    lines += _failed_step_lines(summary)
    lines += _weak_test_lines(summary.weak_official_tests)
    lines += _problem_lines(summary)
    lines += _usage_lines(summary)
    lines += _tool_lines(summary)
    lines += _plot_lines(summary.plots)
    lines += _definitions_lines()
    conditions = conditions_markdown(summary.tool_calls, summary.steps_without_targets, summary.identity.mode)
    return "\n".join(lines) + "\n".join(conditions) + "\n"
