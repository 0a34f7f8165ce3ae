"""summarize stage: `<run>/summary.md`, `<run>/summary.json`, `<run>/plots/*.png` and `<run>/report.html`.

The run is read once through `stages.results` (selection, details, generations); this module only
aggregates those records and renders them (the HTML report is `stages.report`).

Every selected problem counts in every denominator. A problem whose generation failed, or that has no
(valid) details file, is an Error and none of its steps passed; the number of scored steps of each
problem comes from selection.json (prefilled steps are not scored), never from a constant.

With `attempts` > 1 the headline (`main_problem_resolve_rate`, `subproblem`, the raw counts, the
category/split/status/problem tables and the plots) is attempt 1's under either `attempt_strategy`:
those are whole counts of one concrete set of verdicts, comparable with single-attempt runs and with
`compare`. The Attempts section (summary.json `attempts`) adds per-attempt rates, their means
(strategy `avg`), the any-attempt figures (strategy `pass`), pass@1..k, and names the configured
strategy's pair under `attempts.strategies[attempts.strategy]`. Token usage and latency sum all attempts.
"""
from __future__ import annotations

import dataclasses
import json
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping, Sequence

from stages.artifacts import atomic_write_text, fingerprint, sha256_file, write_artifact
from stages.fingerprints import FingerprintParts, run_relative
from stages.categories import fields
from stages.config import Settings
from stages.paths import RunPaths
from stages.problems import ProblemDataError, load_problems, prefilled_reason
from stages.run_conditions import conditions_markdown, conditions_record, unscored_steps
from stages.results import (
    CELL_STATUSES,
    ERROR_STATES,
    GENERATION_FAILED_STATES,
    CellStatus,
    ProblemResult,
    ProblemState,
    ResultsError,
    RunResults,
    Selection,
    ToolStats,
    Verdict,
    read_config,
    read_run,
    read_selection,
    read_summary,
)
from stages.usage import Usage

TargetsKind = Literal["official", "explicit", "derived", "missing", "unknown"]
SCORED_ATTEMPT = 0


class SummarizeError(ValueError):
    """The run cannot be summarized (no selection), stated in one line."""


# ---------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class StepRow:
    step_id: str
    status: CellStatus
    reason: str
    tools: ToolStats = ToolStats()  # tool calls of the scored attempt's generation of this step


@dataclass(frozen=True)
class ProblemRow:
    """One selected problem as summarized: its step verdicts and why it failed, if it did."""

    problem_id: str
    split: str
    category: str
    field: str
    subfield: str
    state: ProblemState
    steps: tuple[StepRow, ...]
    scored_expected: int
    usage: Usage | None
    latency_s: float | None
    error: str | None
    resolved: bool
    tools: ToolStats = ToolStats()  # tool calls of every attempt
    skipped_expected: int = 0  # prefilled steps according to the selection

    @property
    def steps_skipped_expected(self) -> int:
        return self.skipped_expected

    @property
    def scored_rows(self) -> tuple[StepRow, ...]:
        return tuple(step for step in self.steps if step.status != "skipped")

    @property
    def steps_scored(self) -> int:
        """The denominator of this problem: its scored steps according to the selection (the data)."""
        return self.scored_expected

    @property
    def steps_passed(self) -> int:
        return min(sum(step.status == "pass" for step in self.scored_rows), self.scored_expected)

    @property
    def steps_skipped(self) -> int:
        return sum(step.status == "skipped" for step in self.steps)

    @property
    def is_error(self) -> bool:
        """Error in the Total/Evaluated/Error sense: generation reported an error, or there is nothing scored."""
        return self.state in ERROR_STATES

    @property
    def failed(self) -> bool:
        """Generation or scoring failed for this problem (it is listed in `failed_problems`)."""
        return self.is_error or self.error is not None

    @property
    def first_failure(self) -> StepRow | None:
        return next((step for step in self.scored_rows if step.status != "pass"), None)


@dataclass(frozen=True)
class Metrics:
    """Counts of a group of problems, and the two rates, under the names of the results contract."""

    total: int
    errors: int
    resolved: int
    steps_passed: int
    steps_scored: int
    steps_skipped: int

    @property
    def evaluated(self) -> int:
        return self.total  # every selected problem is evaluated: failures count as unresolved, never dropped

    @property
    def resolve_rate(self) -> float | None:
        return self.resolved / self.evaluated if self.evaluated else None

    @property
    def step_rate(self) -> float | None:
        return self.steps_passed / self.steps_scored if self.steps_scored else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "main_problem_resolve_rate": self.resolve_rate,
            "subproblem": self.step_rate,
            "Total": self.total,
            "Evaluated": self.evaluated,
            "Error": self.errors,
            "main_problem_resolved": self.resolved,
            "main_problem_total": self.evaluated,
            "subproblem_correct": self.steps_passed,
            "subproblem_total": self.steps_scored,
            "skipped_steps": self.steps_skipped,
        }


@dataclass(frozen=True)
class TargetsInfo:
    kind: TargetsKind
    note: str


@dataclass(frozen=True)
class SummaryOutcome:
    """What `run_summarize` wrote and the headline numbers."""

    summary_md: Path
    summary_json: Path
    report_html: Path
    plots: tuple[Path, ...]
    total: int
    evaluated: int
    errors: int
    resolved: int
    subproblem_correct: int
    subproblem_total: int
    skipped_steps: int
    targets_kind: str
    failed_problems: tuple[str, ...]
    one_line: str

    def as_dict(self) -> dict[str, Any]:
        """A small JSON-native dict (what a doit python-action may return)."""
        return {
            "total": self.total, "evaluated": self.evaluated, "errors": self.errors, "resolved": self.resolved,
            "subproblem_correct": self.subproblem_correct, "subproblem_total": self.subproblem_total,
            "targets": self.targets_kind, "failed_problems": list(self.failed_problems),
        }


# ---------------------------------------------------------------------------
# Inputs and their fingerprint
# ---------------------------------------------------------------------------

def _read_selection(paths: RunPaths) -> Selection:
    try:
        return read_selection(paths)
    except ResultsError:
        raise SummarizeError(f"missing or invalid {paths.selection}: run `doit select` first") from None


def _file_digest(path: Path) -> str | None:
    try:
        return sha256_file(path)
    except FileNotFoundError:
        return None


def _config_identity(paths: RunPaths, settings: Settings) -> str:
    config = read_config(paths)
    return config["fingerprint"] if config is not None else fingerprint(settings.redacted())


def _inputs_fingerprint(settings: Settings, selection: Selection) -> str:
    paths = settings.run_paths
    problem_ids = [entry.problem_id for entry in selection.entries]
    return fingerprint({
        "stage": "summarize",
        "selection": selection.fingerprint,
        "config": _config_identity(paths, settings),
        "details": {pid: _file_digest(paths.details(pid)) for pid in problem_ids},
        "generations": {pid: _file_digest(paths.generation(pid)) for pid in problem_ids},
    })


def summary_fingerprint_parts(settings: Settings, selection: Selection) -> FingerprintParts:
    """The summary's fingerprint and what it covers by named part: every input file, by run-relative name."""
    paths = settings.run_paths
    problem_ids = [entry.problem_id for entry in selection.entries]
    inputs = {"selection.json": selection.fingerprint[:16], "config.json": _config_identity(paths, settings)[:16]}
    for path in [*(paths.details(pid) for pid in problem_ids), *(paths.generation(pid) for pid in problem_ids)]:
        sha = _file_digest(path)
        inputs[run_relative(settings, path)] = sha and sha[:16]
    return FingerprintParts(_inputs_fingerprint(settings, selection), inputs=inputs)


def summary_fingerprint(settings: Settings) -> str:
    """The fingerprint a current summary.json carries (for doit's up-to-date check): hashes of the inputs only."""
    try:
        selection = read_selection(settings.run_paths)
    except ResultsError:
        return fingerprint({"stage": "summarize", "selection": None})
    return _inputs_fingerprint(settings, selection)


def summary_is_current(settings: Settings) -> bool:
    """summary.json carries the expected fingerprint and summary.md, report.html and every plot it lists exist."""
    paths = settings.run_paths
    record = read_summary(paths)
    if record is None or record["fingerprint"] != summary_fingerprint(settings):
        return False
    return (paths.summary_md.is_file() and paths.report_html.is_file()
            and all((paths.run_dir / plot).is_file() for plot in record["plots"]))


# ---------------------------------------------------------------------------
# Problem rows
# ---------------------------------------------------------------------------

def step_layouts(settings: Settings, selection: Selection) -> dict[str, tuple[tuple[str, bool], ...]]:
    """problem id -> ((step id, prefilled), ...) from the staged problem files, for the problems whose record
    is the one selected (same fingerprint); empty when the files are absent."""
    try:
        problems = load_problems(settings.data_paths, "all")
    except ProblemDataError:
        return {}
    selected = {entry.problem_id: entry.fingerprint for entry in selection.entries}
    return {
        problem.problem_id: tuple((step.step_id, step.prefilled) for step in problem.steps)
        for problem in problems
        if selected.get(problem.problem_id) == problem.fingerprint
    }


def _fallback_layout(problem_id: str, steps: int, scored: int) -> tuple[tuple[str, bool], ...]:
    """Step ids by position when the problem files are not available; the unscored ones last."""
    return tuple((f"{problem_id}.{index + 1}", index >= scored) for index in range(steps))


def _attempts_cost(result: ProblemResult) -> tuple[Usage | None, float | None]:
    """Tokens, calls and latency summed over every attempt that reports them (all attempts were billed)."""
    costs = result.costs()
    usages = [cost.usage for cost in costs if cost.usage is not None]
    latencies = [cost.latency_s for cost in costs if cost.latency_s is not None]
    return (sum(usages, Usage()) if usages else None), (sum(latencies) if latencies else None)


def _rows_without_details(layout: Sequence[tuple[str, bool]], reason: str) -> tuple[StepRow, ...]:
    skipped = prefilled_reason()
    return tuple(StepRow(sid, "skipped", skipped) if prefilled else StepRow(sid, "no_verdict", reason)
                 for sid, prefilled in layout)


def _merge_steps(layout: Sequence[tuple[str, bool]], verdicts: Sequence[Verdict]) -> tuple[StepRow, ...]:
    """Verdicts of the details file in data order; steps it lacks become `no_verdict`, extra ones are kept last."""
    by_id = {verdict.step_id: verdict for verdict in verdicts}
    rows = []
    for step_id, prefilled in layout:
        verdict = by_id.pop(step_id, None)
        if verdict is not None:
            rows.append(StepRow(step_id, verdict.status, verdict.reason))
        elif prefilled:
            rows.append(StepRow(step_id, "skipped", prefilled_reason()))
        else:
            rows.append(StepRow(step_id, "no_verdict", "step missing from the details file"))
    rows.extend(StepRow(sid, verdict.status, verdict.reason) for sid, verdict in by_id.items())
    return tuple(rows)


def _with_tools(rows: Sequence[StepRow], result: ProblemResult) -> tuple[StepRow, ...]:
    generation = result.generation(SCORED_ATTEMPT)
    if generation is None:
        return tuple(rows)
    stats = {step.step_id: step.tool_stats for step in generation.steps}
    return tuple(dataclasses.replace(row, tools=stats.get(row.step_id, ToolStats())) for row in rows)


def _scoring_error(rows: Sequence[StepRow], scored_expected: int, evaluation_error: str | None) -> str | None:
    """Why scoring failed for a problem whose generation succeeded; None when it did not."""
    if evaluation_error:
        return evaluation_error
    scored = [row for row in rows if row.status != "skipped"]
    if len(scored) != scored_expected:
        return f"details hold {len(scored)} scored steps, the selection expects {scored_expected}"
    broken = next((row for row in scored if row.status in ("eval_error", "no_verdict")), None)
    if broken is not None:
        return f"step {broken.step_id}: {broken.status}" + (f" ({broken.reason})" if broken.reason else "")
    return None


def problem_row(result: ProblemResult, layout: Sequence[tuple[str, bool]] | None) -> ProblemRow:
    """The summarized record of one selected problem (selection entry + its details, if any)."""
    entry = result.entry
    layout = layout or _fallback_layout(entry.problem_id, entry.steps, entry.scored_steps)
    usage, latency = _attempts_cost(result)
    common = {"problem_id": entry.problem_id, "split": entry.split, "category": entry.category,
              "field": entry.taxonomy.field, "subfield": entry.taxonomy.subfield,
              "scored_expected": entry.scored_steps, "skipped_expected": entry.skipped_steps,
              "usage": usage, "latency_s": latency, "tools": result.tool_stats}
    attempt = result.scored_attempt(SCORED_ATTEMPT)
    if attempt is None:
        return ProblemRow(state=result.state, error=result.details_error, resolved=False,
                          steps=_with_tools(_rows_without_details(layout, result.missing_reason or ""), result), **common)
    rows = _with_tools(_merge_steps(layout, attempt.verdicts), result)
    if result.state in GENERATION_FAILED_STATES:
        error = attempt.evaluation_error or result.state.replace("_", " ")
    else:
        error = _scoring_error(rows, entry.scored_steps, attempt.evaluation_error)
    return ProblemRow(state=result.state, steps=rows, error=error, resolved=result.resolved(SCORED_ATTEMPT), **common)


def collect_rows(settings: Settings, run: RunResults) -> tuple[ProblemRow, ...]:
    layouts = step_layouts(settings, run.selection)
    return tuple(problem_row(result, layouts.get(result.problem_id)) for result in run.problems)


# ---------------------------------------------------------------------------
# Aggregation
# ---------------------------------------------------------------------------

def metrics_of(rows: Iterable[ProblemRow]) -> Metrics:
    rows = tuple(rows)
    return Metrics(
        total=len(rows),
        errors=sum(row.is_error for row in rows),
        resolved=sum(row.resolved for row in rows),
        steps_passed=sum(row.steps_passed for row in rows),
        steps_scored=sum(row.steps_scored for row in rows),
        steps_skipped=sum(row.steps_skipped for row in rows),
    )


def grouped_metrics(rows: Sequence[ProblemRow], key: str) -> dict[str, Metrics]:
    """Metrics per value of `key` (category or split), groups in order of first appearance."""
    groups: dict[str, list[ProblemRow]] = {}
    for row in rows:
        groups.setdefault(getattr(row, key), []).append(row)
    return {name: metrics_of(members) for name, members in groups.items()}


def _by_field_order(rows: Sequence[ProblemRow]) -> list[ProblemRow]:
    """Rows ordered by field as SciCode's table lists the fields (others after them, in order of appearance);
    stable, so problems keep their order within a field."""
    known = fields()
    seen = list(dict.fromkeys(row.field for row in rows))
    rank = {name: (known.index(name) if name in known else len(known) + seen.index(name)) for name in seen}
    return sorted(rows, key=lambda row: rank[row.field])


def field_metrics(rows: Sequence[ProblemRow]) -> dict[str, Metrics]:
    """Metrics per field, in the order of SciCode's field table."""
    return grouped_metrics(_by_field_order(rows), "field")


def subfield_metrics(rows: Sequence[ProblemRow]) -> dict[str, tuple[str, Metrics]]:
    """subfield -> (its field, metrics): fields in table order, subfields in order of first appearance."""
    ordered = _by_field_order(rows)
    field_of = {row.subfield: row.field for row in ordered}
    return {name: (field_of[name], metrics) for name, metrics in grouped_metrics(ordered, "subfield").items()}


@dataclass(frozen=True)
class InspectView:
    """The step view of the official inspect_ai task: every step of a problem is in its denominator,
    prefilled ones included and never passed, so a problem with a prefilled step is never resolved."""

    steps_passed: int
    steps_total: int
    resolved: int
    problems: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "subproblem_correct": self.steps_passed, "subproblem_total": self.steps_total,
            "subproblem": self.steps_passed / self.steps_total if self.steps_total else None,
            "main_problem_resolved": self.resolved, "main_problem_total": self.problems,
            "main_problem_resolve_rate": self.resolved / self.problems if self.problems else None,
            "note": INSPECT_VIEW_NOTE,
        }


INSPECT_VIEW_NOTE = ("step view of the official inspect_ai task: prefilled steps are in the step denominator and "
                     "count as not passed, so problems with a prefilled step (13, 62, 76) are never resolved; "
                     "the headline excludes prefilled steps")


def inspect_view(rows: Sequence[ProblemRow]) -> InspectView:
    return InspectView(
        steps_passed=sum(row.steps_passed for row in rows),
        steps_total=sum(row.steps_scored + row.steps_skipped_expected for row in rows),
        resolved=sum(row.resolved and row.steps_skipped_expected == 0 for row in rows),
        problems=len(rows),
    )


def tool_totals(rows: Sequence[ProblemRow]) -> ToolStats:
    """Tool calls of the scored attempt over every step."""
    return sum((step.tools for row in rows for step in row.steps), ToolStats())


def status_counts(rows: Iterable[ProblemRow]) -> dict[str, int]:
    counts = Counter(step.status for row in rows for step in row.steps)
    return {status: counts.get(status, 0) for status in CELL_STATUSES}


def total_usage(rows: Sequence[ProblemRow]) -> dict[str, int]:
    reporting = [row.usage for row in rows if row.usage is not None]
    return {**sum(reporting, Usage()).to_record(), "problems_reporting": len(reporting)}


def total_latency(rows: Sequence[ProblemRow]) -> float:
    return round(sum(row.latency_s for row in rows if row.latency_s is not None), 3)


def attempt_metrics_of(settings: Settings, run: RunResults) -> dict[str, Any] | None:
    """With attempts > 1: per-attempt rates, pass@k and both attempt strategies (stages.passk); else None.

    A problem without a valid details file counts as unresolved in every attempt. When the details files
    disagree on the number of attempts, the reason is returned under `error` instead of numbers.
    """
    if settings.attempts <= 1:
        return None
    from stages.passk import PassKError, metrics_from_outcomes, result_outcomes

    try:
        outcomes = [result_outcomes(result, settings.attempts) for result in run.problems]
        return {"strategy": settings.attempt_strategy, **metrics_from_outcomes(outcomes)}
    except PassKError as error:
        return {"strategy": settings.attempt_strategy, "error": str(error)}


# ---------------------------------------------------------------------------
# Targets and dates
# ---------------------------------------------------------------------------

def resolve_targets_info(settings: Settings) -> TargetsInfo:
    """Which targets the steps were scored against (official, explicit file, derived, missing)."""
    try:
        from stages.targets import resolve_targets
    except ImportError as error:
        return TargetsInfo("unknown", f"targets could not be resolved: {error}")
    try:
        resolved = resolve_targets(settings)
    except Exception as error:  # a summary is still written; the reason is shown in its first lines
        return TargetsInfo("unknown", f"targets could not be resolved: {type(error).__name__}: {error}")
    return TargetsInfo(resolved.kind, str(resolved.note or ""))


def _utc(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_started(paths: RunPaths, problem_ids: Sequence[str]) -> str | None:
    """Earliest generation or details file time of the run; else config.json's time; None when neither exists."""
    times = []
    for problem_id in problem_ids:
        for path in (paths.generation(problem_id), paths.details(problem_id)):
            try:
                times.append(path.stat().st_mtime)
            except FileNotFoundError:
                continue
    if not times:
        try:
            times.append(paths.config.stat().st_mtime)
        except FileNotFoundError:
            return None
    return _utc(min(times))


# ---------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------

def ratio(part: int, whole: int) -> str:
    """`50/50 (100.0%)`: every rate printed with its denominator."""
    return f"{part}/{whole} ({100.0 * part / whole:.1f}%)" if whole else f"{part}/{whole} (n/a)"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[bool]) -> list[str]:
    """A pipe table padded so it also reads as plain text; `right` marks right-aligned columns."""
    cells = [[str(value) for value in row] for row in rows]
    widths = [max([len(header[col])] + [len(row[col]) for row in cells] + [3]) for col in range(len(header))]

    def line(values: Sequence[str]) -> str:
        padded = [value.rjust(widths[col]) if right[col] else value.ljust(widths[col]) for col, value in enumerate(values)]
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join(("-" * (widths[col] + 1) + ":") if right[col] else ("-" * (widths[col] + 2))
                          for col in range(len(header))) + "|"
    return [line(header), rule, *(line(row) for row in cells)]


def _targets_lines(targets: TargetsInfo) -> list[str]:
    note = f" ({targets.note})" if targets.note else ""
    if targets.kind == "derived":
        return [f"**Note: targets derived from reference code, not the official test_data.h5.**{note}", ""]
    if targets.kind == "missing":
        return [f"**Note: no targets file: steps that need targets are eval_error, not scored against official "
                f"targets.**{note}", ""]
    if targets.kind == "unknown":
        return [f"**Note: the targets used for scoring could not be determined.**{note}", ""]
    return []


def _targets_text(targets: TargetsInfo) -> str:
    names = {"official": "official test_data.h5", "explicit": "targets file given by h5py_file",
             "derived": "derived from reference code (not the official test_data.h5)", "missing": "missing",
             "unknown": "unknown"}
    return names[targets.kind] + (f" ({targets.note})" if targets.note else "")


RECORDED_SETTINGS: tuple[str, ...] = (
    "api_protocol", "model_params", "code_timeout_seconds", "step_timeout_seconds", "step_memory_mb", "executor",
)


def _recorded_settings_text(recorded: Mapping[str, Any]) -> str:
    """The settings from config.json that shape the scores but are not in the lines above."""
    parts = []
    for name in RECORDED_SETTINGS:
        if name in recorded and recorded[name] not in ("", {}, None):
            value = recorded[name]
            parts.append(f"{name}={json.dumps(value, sort_keys=True) if isinstance(value, dict) else value}")
    return ", ".join(parts)


def _header_lines(settings: Settings, targets: TargetsInfo, config: Mapping[str, Any] | None,
                  started: str | None, summarized_at: str) -> list[str]:
    recorded = (config or {}).get("settings", {})
    categories = ", ".join(settings.category)
    samples = ", ".join(settings.sample_ids) or "(all)"
    lines = [f"# SciCode results: {settings.model} / {settings.run_name}", ""]
    lines += _targets_lines(targets)
    lines += [
        f"- model: `{settings.model}`" + (f" at {recorded['base_url']}" if recorded.get("base_url") else ""),
        f"- run: `{settings.run_name}` ({settings.run_paths.run_dir})",
        f"- split: {settings.split}; category: {categories}; sample_ids: {samples}",
        f"- mode: {settings.mode}" + (f" (tools: {', '.join(settings.tool_names)}, at most "
                                      f"{settings.tool_use_max_loops} model calls per step)" if settings.mode == "tool_use" else ""),
        f"- background: {'with step background' if settings.with_background else 'without step background'}",
        f"- targets: {'derived (see the note above)' if targets.kind == 'derived' else _targets_text(targets)}",
        f"- confinement of model code: {(config or {}).get('confinement') or 'unknown (config.json has none)'}",
        f"- run started: {started or 'unknown'}; summarized at: {summarized_at} (UTC)",
    ]
    shown = _recorded_settings_text(recorded)
    if shown:
        lines.append(f"- settings: {shown}")
    if settings.attempts > 1:
        lines.append(f"- attempts: {settings.attempts} per problem (strategy {settings.attempt_strategy}); the tables "
                     f"score attempt {SCORED_ATTEMPT + 1}, the Attempts section covers all of them; token usage and "
                     f"latency sum all attempts")
    return lines + [""]


def _headline_lines(metrics: Metrics) -> list[str]:
    rows = [
        ("main_problem_resolve_rate", ratio(metrics.resolved, metrics.evaluated)),
        ("subproblem", ratio(metrics.steps_passed, metrics.steps_scored)),
        ("Total / Evaluated / Error", f"{metrics.total} / {metrics.evaluated} / {metrics.errors}"),
    ]
    raw = [
        ("main_problem_resolved", metrics.resolved),
        ("main_problem_total", metrics.evaluated),
        ("subproblem_correct", metrics.steps_passed),
        ("subproblem_total", metrics.steps_scored),
        ("skipped steps (prefilled, not scored)", metrics.steps_skipped),
    ]
    return (["## Scores [^defs]", ""] + markdown_table(("metric", "value"), rows, (False, True))
            + ["", "Raw counts:", ""] + markdown_table(("count", "value"), raw, (False, True)) + [""])


def _group_lines(title: str, label: str, groups: Mapping[str, Metrics]) -> list[str]:
    rows = [(name, ratio(m.resolved, m.evaluated), ratio(m.steps_passed, m.steps_scored), m.total, m.evaluated,
             m.errors, m.steps_skipped) for name, m in groups.items()]
    header = (label, "main_problem_resolve_rate", "subproblem", "Total", "Evaluated", "Error", "skipped")
    return [f"## {title}", ""] + markdown_table(header, rows, (False, True, True, True, True, True, True)) + [""]


def _subfield_lines(groups: Mapping[str, tuple[str, Metrics]]) -> list[str]:
    rows = [(field, name, ratio(m.resolved, m.evaluated), ratio(m.steps_passed, m.steps_scored), m.total, m.errors,
             m.steps_skipped) for name, (field, m) in groups.items()]
    header = ("field", "subfield", "main_problem_resolve_rate", "subproblem", "Total", "Error", "skipped")
    return ["## By subfield", ""] + markdown_table(header, rows, (False, False, True, True, True, True, True)) + [""]


def _inspect_view_lines(view: InspectView) -> list[str]:
    rows = [
        ("subproblem (all steps, prefilled counted as not passed)", ratio(view.steps_passed, view.steps_total)),
        ("main_problem_resolve_rate (a problem with a prefilled step never resolves)", ratio(view.resolved, view.problems)),
    ]
    return (["## Official inspect_ai step view (for comparison only)", "",
             "The headline above excludes the prefilled steps (13.6, 62.1, 76.3) from every denominator. The "
             "official inspect_ai task counts every step of a problem, prefilled ones included and never passed "
             "(291 steps on the test split, 341 on both); its figures for this run are:", ""]
            + markdown_table(("inspect_ai view", "value"), rows, (False, True)) + [""])


def _failed_step_lines(rows: Sequence[ProblemRow]) -> list[str]:
    failed = [(row.problem_id, step) for row in rows for step in row.scored_rows if step.status != "pass"]
    lines = ["## Failed steps", ""]
    if not failed:
        return lines + ["None: every scored step passed.", ""]
    lines += [f"{len(failed)} scored step(s) did not pass (attempt {SCORED_ATTEMPT + 1}); the reason of each:", ""]
    lines += [f"- {step.step_id} ({step.status}): {_one_line(step.reason or '(no reason given)')}" for _, step in failed]
    return lines + [""]


def _tool_lines(rows: Sequence[ProblemRow], attempts: int) -> list[str]:
    scored = tool_totals(rows)
    every = sum((row.tools for row in rows), ToolStats())
    lines = ["## Tool use", ""]
    if every.calls == 0:
        return lines + ["No tool calls in this run.", ""]
    header = ("scope", "calls", "ok", "error", "timeout", "sandbox_error", "other")
    right = (False, True, True, True, True, True, True)
    table = [(f"all steps, attempt {SCORED_ATTEMPT + 1}", *_tool_cells(scored))]
    if attempts > 1:
        table.append(("all steps, all attempts", *_tool_cells(every)))
    table += [(f"step {step.step_id}", *_tool_cells(step.tools)) for row in rows for step in row.steps if step.tools.calls]
    return lines + markdown_table(header, table, right) + [""]


def _tool_cells(stats: ToolStats) -> tuple[int, ...]:
    return (stats.calls, stats.ok, stats.error, stats.timeout, stats.sandbox_error, stats.other)


def _status_lines(counts: Mapping[str, int]) -> list[str]:
    shown = [status for status in CELL_STATUSES if status != "no_verdict" or counts["no_verdict"]]
    total = sum(counts[status] for status in shown)
    rows = [(status, counts[status], f"{100.0 * counts[status] / total:.1f}%" if total else "n/a") for status in shown]
    rows.append(("all steps", total, "100.0%" if total else "n/a"))
    lines = ["## Step statuses", ""] + markdown_table(("status", "steps", "share"), rows, (False, True, True))
    if counts["no_verdict"]:
        lines += ["", "`no_verdict`: scored steps without a verdict (no details file, or a step missing from it); "
                      "they count as not passed."]
    return lines + [""]


def _problem_lines(rows: Sequence[ProblemRow]) -> list[str]:
    table = []
    for row in rows:
        failure = row.first_failure
        first = f"{failure.step_id} ({failure.status})" if failure else "-"
        tokens = f"{row.usage.total_tokens}" if row.usage else "-"
        latency = f"{row.latency_s:.1f}" if row.latency_s is not None else "-"
        table.append((row.problem_id, row.split, row.category, f"{row.steps_passed}/{row.steps_scored}",
                      "yes" if row.resolved else "no", first, row.state, tokens, latency))
    header = ("problem", "split", "category", "steps passed", "resolved", "first failing step", "details",
              "tokens", "latency s")
    right = (False, False, False, True, False, False, False, True, True)
    return ["## Problems", ""] + markdown_table(header, table, right) + [""]


def _failed_lines(rows: Sequence[ProblemRow]) -> list[str]:
    failed = [row for row in rows if row.failed]
    lines = ["## Problems whose generation or scoring failed", ""]
    if not failed:
        return lines + ["None.", ""]
    lines.append(f"{len(failed)} problem(s); each stays in every denominator with its unpassed steps.")
    lines.append("")
    lines += [f"- {row.problem_id} ({row.state}): {_one_line(row.error or row.state)}" for row in failed]
    return lines + [""]


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _usage_lines(usage: Mapping[str, int], latency: float, total_problems: int) -> list[str]:
    rows = [
        ("input tokens", usage["input_tokens"]),
        ("output tokens", usage["output_tokens"]),
        ("total tokens", usage["total_tokens"]),
        ("model calls", usage["calls"]),
        ("model latency (s, summed over calls)", f"{latency:.1f}"),
        ("problems reporting usage", f"{usage['problems_reporting']}/{total_problems}"),
    ]
    return ["## Token usage and model latency", ""] + markdown_table(("quantity", "total"), rows, (False, True)) + [""]


def _rate_text(rate: float | None) -> str:
    return "n/a" if rate is None else f"{100.0 * rate:.1f}%"


def _attempt_lines(metrics: Mapping[str, Any] | None) -> list[str]:
    if metrics is None:
        return []
    lines = ["## Attempts", ""]
    if "error" in metrics:
        return lines + [f"Attempt metrics not computed: {metrics['error']}", ""]
    rows = [(f"attempt {row['attempt'] + 1}", ratio(row["main_problem_resolved"], row["main_problem_total"]),
             ratio(row["subproblem_correct"], row["subproblem_total"])) for row in metrics["per_attempt"]]
    best = metrics["any_attempt"]
    rows.append(("any attempt (strategy pass)", ratio(best["main_problem_resolved"], best["main_problem_total"]),
                 ratio(best["subproblem_correct"], best["subproblem_total"])))
    rows.append(("mean over attempts (strategy avg)", _rate_text(metrics["mean_main_problem_resolve_rate"]),
                 _rate_text(metrics["mean_subproblem_rate"])))
    lines += markdown_table(("attempts", "main_problem_resolve_rate", "subproblem"), rows, (False, True, True))
    pass_at = ", ".join(f"pass@{k} = {_rate_text(value)}" for k, value in metrics["pass_at_k"].items())
    chosen = metrics["strategies"][metrics["strategy"]]
    lines += ["", f"{pass_at} (unbiased estimator over whole-problem outcomes, {metrics['problems']} problems).",
              f"Configured attempt_strategy={metrics['strategy']}: main_problem_resolve_rate "
              f"{_rate_text(chosen['main_problem_resolve_rate'])}, subproblem {_rate_text(chosen['subproblem'])}. "
              f"The tables above score attempt {SCORED_ATTEMPT + 1}.", ""]
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
) -> str:
    metrics = metrics_of(rows)
    lines = _header_lines(settings, targets, config, started, summarized_at)
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
    lines += _problem_lines(rows)
    lines += _usage_lines(total_usage(rows), total_latency(rows), len(rows))
    lines += _tool_lines(rows, settings.attempts)
    lines += _plot_lines(plot_names)
    lines += _definitions_lines()
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# JSON
# ---------------------------------------------------------------------------

def _problem_record(row: ProblemRow) -> dict[str, Any]:
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
        "first_failure": None if failure is None else {"step_id": failure.step_id, "status": failure.status,
                                                       "reason": _one_line(failure.reason)},
        "steps": [{"step_id": step.step_id, "status": step.status, "reason": _one_line(step.reason),
                   "tools": step.tools.to_record()} for step in row.steps],
        "tools": row.tools.to_record(),
        "usage": row.usage.to_record() if row.usage else None,
        "latency_s": row.latency_s,
        "error": _one_line(row.error) if row.error else None,
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
        "run_started": started,
        "summarized_at": summarized_at,
        "targets": {"kind": targets.kind, "note": targets.note},
        "attempt_scored": SCORED_ATTEMPT,
        **metrics_of(rows).as_dict(),
        "inspect_ai_view": inspect_view(rows).as_dict(),
        "by_category": {name: m.as_dict() for name, m in grouped_metrics(rows, "category").items()},
        "by_field": {name: m.as_dict() for name, m in field_metrics(rows).items()},
        "by_subfield": {name: {"field": field, **m.as_dict()} for name, (field, m) in subfield_metrics(rows).items()},
        "by_split": {name: m.as_dict() for name, m in grouped_metrics(rows, "split").items()},
        "status_counts": status_counts(rows),
        "problems": [_problem_record(row) for row in rows],
        "failed_problems": [{"problem_id": row.problem_id, "reason": _one_line(row.error or row.state)}
                            for row in rows if row.failed],
        "usage": total_usage(rows),
        "latency_s": total_latency(rows),
        "tool_use": {"attempt_scored": tool_totals(rows).to_record(),
                     "all_attempts": sum((row.tools for row in rows), ToolStats()).to_record()},
        "plots": list(plot_names),
        "attempts": dict(attempts) if attempts is not None else None,
    }


# ---------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------

def _write_plots(settings: Settings, rows: Sequence[ProblemRow]) -> tuple[Path, ...]:
    from stages.plots import CategoryBar, GridRow, write_plots

    grid = [GridRow(row.problem_id, tuple(step.status for step in row.steps), row.steps_passed, row.steps_scored,
                    row.failed, group=row.split) for row in rows]
    categories = [CategoryBar(name, m.steps_passed, m.steps_scored, m.resolved, m.evaluated, field)
                  for name, (field, m) in subfield_metrics(rows).items()]
    return write_plots(settings.run_paths.plots_dir, grid_rows=grid, status_counts=status_counts(rows),
                       categories=categories, run_label=f"{settings.model} / {settings.run_name}")


# ---------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------

def run_conditions_of(rows: Sequence[ProblemRow]) -> tuple[dict[str, int], list[str]]:
    """Tool-call outcomes of the scored attempt (the reader's counts), and the scored steps that had no targets."""
    totals = tool_totals(rows)
    tool_calls = {"ok": totals.ok, "error": totals.error, "timeout": totals.timeout, "sandbox_error": totals.sandbox_error}
    reasons = ((step.step_id, step.reason or "") for row in rows for step in row.steps if step.status == "eval_error")
    return tool_calls, unscored_steps(reasons)


def one_line_summary(settings: Settings, metrics: Metrics, targets: TargetsInfo, failed: int) -> str:
    note = " [targets derived from reference code]" if targets.kind == "derived" else (
        f" [targets {targets.kind}]" if targets.kind in ("missing", "unknown") else "")
    return (f"{settings.model} / {settings.run_name}: resolved {ratio(metrics.resolved, metrics.evaluated)}, "
            f"steps {ratio(metrics.steps_passed, metrics.steps_scored)}, {metrics.errors} error(s), "
            f"{failed} failed problem(s){note}")


def run_summarize(
    settings: Settings,
    *,
    targets: TargetsInfo | None = None,
    now: datetime | None = None,
) -> SummaryOutcome:
    """Write summary.md, summary.json, plots/*.png and report.html for the run of `settings`; return what
    was written."""
    paths = settings.run_paths
    selection = _read_selection(paths)
    fingerprint_parts = summary_fingerprint_parts(settings, selection)
    run = read_run(paths.run_dir, attempts=settings.attempts)
    rows = collect_rows(settings, run)
    targets = targets or resolve_targets_info(settings)
    started = run_started(paths, [row.problem_id for row in rows])
    summarized_at = (now or datetime.now(timezone.utc)).astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    plots = _write_plots(settings, rows)
    plot_names = [path.relative_to(paths.run_dir).as_posix() for path in plots]
    config = run.config
    attempts = attempt_metrics_of(settings, run)
    markdown = render_markdown(settings, rows, targets=targets, config=config, started=started,
                               summarized_at=summarized_at, plot_names=plot_names, attempts=attempts)
    tool_calls, unscored = run_conditions_of(rows)
    markdown += "\n".join(conditions_markdown(tool_calls, unscored, settings.mode)) + "\n"
    atomic_write_text(paths.summary_md, markdown)
    record = summary_record(settings, rows, inputs_fingerprint=fingerprint_parts.value, targets=targets, started=started,
                            summarized_at=summarized_at, plot_names=plot_names, attempts=attempts)
    record["confinement"] = (config or {}).get("confinement")
    record["fingerprint_parts"] = fingerprint_parts.parts()
    record.update(conditions_record(tool_calls, unscored))
    write_artifact(paths.summary_json, "summary", record)
    from stages.report import write_report

    write_report(settings, run, rows, record)

    metrics = metrics_of(rows)
    failed = tuple(row.problem_id for row in rows if row.failed)
    return SummaryOutcome(
        summary_md=paths.summary_md, summary_json=paths.summary_json, report_html=paths.report_html, plots=plots,
        total=metrics.total, evaluated=metrics.evaluated, errors=metrics.errors, resolved=metrics.resolved,
        subproblem_correct=metrics.steps_passed, subproblem_total=metrics.steps_scored,
        skipped_steps=metrics.steps_skipped, targets_kind=targets.kind, failed_problems=failed,
        one_line=one_line_summary(settings, metrics, targets, len(failed)),
    )
