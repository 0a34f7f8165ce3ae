"""compare: a Markdown report of two runs side by side: paired tests, deltas, and what one run alone passed.

Numbers come from the details files (summary.json may be stale), in the same sense as the summary:
every selected problem counts; a problem without a (valid) details file, or whose generation failed,
is unresolved and its scored steps did not pass; each problem's number of scored steps comes from
selection.json. Verdicts, the one-run-only lists and status counts are those of the first attempt of each problem;
when a run holds several attempts, the report adds the attempt metrics (averages and pass@k). Whether a
difference is more than noise is `stages.paired_comparison`: its first line opens the report.
Runs of different splits are refused unless `allow_split_mismatch` is set; then, as whenever the two
selections differ, only the problems selected in both runs are compared and the report says so.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stages.artifacts import atomic_write_text
from stages.config import Settings
from stages.errors import PipelineError
from stages.paired_comparison import PAIRED_NOTE, PairedSection, interval_rows, paired_lines, paired_section
from stages.passk import PassKError, ProblemOutcomes, metrics_from_outcomes, result_outcomes
from stages.paths import ResultsPaths, RunPaths
from stages.results import (
    CELL_STATUSES,
    ERROR_STATES,
    NO_DETAILS_STATES,
    CellStatus,
    ProblemState,
    ResultsError,
    RunResults,
    SelectionEntry,
    max_attempts,
    read_run,
)
from stages.results import (
    ProblemResult as RunProblem,
)
from stages.statuses import StepStatus
from stages.summary.markdown import ratio
from stages.untrusted import shown
from stages.usage import Usage

COMPARED_ATTEMPT = 0
UNKNOWN = "(unknown)"


class CompareError(PipelineError, ValueError):
    """Two runs cannot be compared (missing run, no selection, different splits), stated in one line."""


# ---------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------

NO_USAGE = Usage()


@dataclass(frozen=True)
class Cost:
    """Tokens and model latency of one problem, over the attempts that report them."""

    usage: Usage
    latency_s: float
    attempts_reporting: int
    attempts_total: int


@dataclass(frozen=True)
class RunInfo:
    """What identifies a run: its folder, names and settings, and its selection entries in order."""

    run_dir: Path
    model: str
    run: str
    split: str
    mode: str
    with_background: str
    selection: tuple[SelectionEntry, ...]
    results: RunResults

    @property
    def label(self) -> str:
        return f"{self.model}/{self.run}"

    @property
    def file_label(self) -> str:
        """`<model folder>--<run folder>`: both already filesystem-safe."""
        return f"{self.run_dir.parent.name}--{self.run_dir.name}"

    @property
    def entries(self) -> dict[str, SelectionEntry]:
        return {entry.problem_id: entry for entry in self.selection}


@dataclass(frozen=True)
class ProblemResult:
    """One selected problem of one run: first-attempt verdicts, attempt outcomes and cost."""

    problem_id: str
    state: ProblemState
    scored_steps: int
    skipped_steps: int
    verdicts: tuple[tuple[str, StepStatus], ...]
    outcomes: ProblemOutcomes
    cost: Cost

    @property
    def resolved(self) -> bool:
        return self.outcomes.attempts[COMPARED_ATTEMPT].resolved

    @property
    def steps_passed(self) -> int:
        return self.outcomes.passed_count(COMPARED_ATTEMPT)

    @property
    def is_error(self) -> bool:
        return self.state in ERROR_STATES

    def status_of(self, step_id: str) -> CellStatus:
        return dict(self.verdicts).get(step_id, "no_verdict")

    def status_counts(self) -> Counter[str]:
        counts: Counter[str] = Counter(status for _, status in self.verdicts)
        listed_scored = sum(status != "skipped" for _, status in self.verdicts)
        counts["no_verdict"] += max(0, self.scored_steps - listed_scored)
        if self.state in NO_DETAILS_STATES:
            counts["skipped"] += self.skipped_steps
        return counts

    def first_failure(self) -> str:
        failing = next(((sid, status) for sid, status in self.verdicts if status not in ("pass", "skipped")), None)
        if failing is not None:
            return f"{failing[0]} {failing[1]}"
        return self.state.replace("_", " ") if self.is_error else "steps without a verdict"


@dataclass(frozen=True)
class RunTotals:
    """Counts of one run over the compared problems."""

    problems: int
    resolved: int
    steps_passed: int
    steps_scored: int
    errors: int
    no_details: int
    status_counts: Mapping[str, int]
    cost: Cost


@dataclass(frozen=True)
class StepFlip:
    problem_id: str
    step_id: str
    status_a: CellStatus
    status_b: CellStatus


# ---------------------------------------------------------------------------
# Reading a run
# ---------------------------------------------------------------------------


def load_run(run_dir: Path) -> RunInfo:
    """The run at `run_dir`, read once; CompareError when the folder or a valid selection.json is missing."""
    run_dir = Path(run_dir)
    try:
        results = read_run(run_dir)
    except ResultsError:
        if not run_dir.is_dir():
            raise CompareError(f"run directory not found: {run_dir}") from None
        selection = RunPaths(run_dir).selection
        raise CompareError(
            f"not a run directory: {selection} is {'invalid' if selection.exists() else 'missing'}"
        ) from None
    settings = results.settings
    background = settings.get("with_background")
    return RunInfo(
        run_dir=run_dir,
        model=str(settings.get("model") or run_dir.parent.name),
        run=run_dir.name,
        split=results.selection.split,
        mode=str(settings.get("mode") or UNKNOWN),
        with_background=UNKNOWN if background is None else str(bool(background)).lower(),
        selection=results.selection.entries,
        results=results,
    )


def problem_cost(result: RunProblem) -> Cost:
    """Tokens and latency of every attempt: details meta when present, else the generation file's steps."""
    found = result.costs()
    reporting = [
        (item.usage, item.latency_s) for item in found if item.usage is not None and item.latency_s is not None
    ]
    usage = sum((item[0] for item in reporting), NO_USAGE)
    return Cost(
        usage=usage,
        latency_s=math.fsum(item[1] for item in reporting),
        attempts_reporting=len(reporting),
        attempts_total=len(found),
    )


def problem_result(result: RunProblem, attempts_if_missing: int) -> ProblemResult:
    """One selected problem of a run, from its details (or their absence)."""
    scored = result.scored_attempt(COMPARED_ATTEMPT)
    verdicts = tuple((v.step_id, v.status) for v in scored.verdicts) if scored else ()
    return ProblemResult(
        problem_id=result.problem_id,
        state=result.state,
        scored_steps=result.entry.scored_steps,
        skipped_steps=result.entry.skipped_steps,
        verdicts=verdicts,
        outcomes=result_outcomes(result, attempts_if_missing),
        cost=problem_cost(result),
    )


def run_results(run: RunInfo, problem_ids: Sequence[str]) -> list[ProblemResult]:
    by_id = run.results.by_id
    chosen = [by_id[pid] for pid in problem_ids]
    attempts = max_attempts(chosen)
    return [problem_result(result, attempts) for result in chosen]


def run_totals(results: Sequence[ProblemResult]) -> RunTotals:
    counts: Counter[str] = Counter()
    for result in results:
        counts.update(result.status_counts())
    costs = [result.cost for result in results]
    return RunTotals(
        problems=len(results),
        resolved=sum(result.resolved for result in results),
        steps_passed=sum(result.steps_passed for result in results),
        steps_scored=sum(result.scored_steps for result in results),
        errors=sum(result.is_error for result in results),
        no_details=sum(result.state in NO_DETAILS_STATES for result in results),
        status_counts={status: counts.get(status, 0) for status in CELL_STATUSES},
        cost=Cost(
            usage=sum((cost.usage for cost in costs), NO_USAGE),
            latency_s=math.fsum(cost.latency_s for cost in costs),
            attempts_reporting=sum(cost.attempts_reporting for cost in costs),
            attempts_total=sum(cost.attempts_total for cost in costs),
        ),
    )


# ---------------------------------------------------------------------------
# Matching the two runs
# ---------------------------------------------------------------------------


def check_splits(run_a: RunInfo, run_b: RunInfo, allow_split_mismatch: bool) -> None:
    if run_a.split != run_b.split and not allow_split_mismatch:
        raise CompareError(
            f"runs of different splits: {run_a.run_dir} is split={run_a.split}, {run_b.run_dir} is "
            f"split={run_b.split} (set allow_split_mismatch=true to compare their common problems)"
        )


def common_problem_ids(run_a: RunInfo, run_b: RunInfo) -> list[str]:
    """Problems selected in both runs, in run A's order; CompareError when there is none."""
    in_b = run_b.entries
    common = [pid for pid in run_a.entries if pid in in_b]
    if not common:
        raise CompareError(f"no problem is selected in both {run_a.run_dir} and {run_b.run_dir}")
    return common


def problem_flips(
    results_a: Sequence[ProblemResult], results_b: Sequence[ProblemResult]
) -> tuple[list[str], list[str]]:
    """(resolved in A but not in B, resolved in B but not in A), problem ids in order."""
    pairs = list(zip(results_a, results_b))
    lost = [a.problem_id for a, b in pairs if a.resolved and not b.resolved]
    gained = [a.problem_id for a, b in pairs if b.resolved and not a.resolved]
    return lost, gained


def _step_ids(a: ProblemResult, b: ProblemResult) -> list[str]:
    ordered = [sid for sid, _ in a.verdicts]
    ordered += [sid for sid, _ in b.verdicts if sid not in dict(a.verdicts)]
    return ordered


def step_flips(
    results_a: Sequence[ProblemResult], results_b: Sequence[ProblemResult]
) -> tuple[list[StepFlip], list[StepFlip]]:
    """(steps passing in A but not in B, steps passing in B but not in A), with both statuses."""
    lost: list[StepFlip] = []
    gained: list[StepFlip] = []
    for a, b in zip(results_a, results_b):
        for step_id in _step_ids(a, b):
            flip = StepFlip(a.problem_id, step_id, a.status_of(step_id), b.status_of(step_id))
            if flip.status_a == "pass" and flip.status_b != "pass":
                lost.append(flip)
            elif flip.status_b == "pass" and flip.status_a != "pass":
                gained.append(flip)
    return lost, gained


def _attempt_metrics(results: Sequence[ProblemResult]) -> dict[str, Any] | str:
    """The run's attempt metrics, or why they cannot be computed."""
    try:
        return metrics_from_outcomes([result.outcomes for result in results])
    except PassKError as error:
        return str(error)


# ---------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------


def _rate_row(label: str, a: Mapping[str, Any], b: Mapping[str, Any], part: str, whole: str) -> tuple[str, ...]:
    """One metrics row: run A's and run B's `part`/`whole` rates and B's change in points."""
    return (label, ratio(a[part], a[whole]), ratio(b[part], b[whole]), rate_delta(a[part], a[whole], b[part], b[whole]))


def signed(value: int | float, digits: int = 0) -> str:
    """`+1`, `-2`, `+0.5`: the sign always shown, and no `-0.0`."""
    if digits == 0:
        return f"{int(value):+d}"
    rounded = round(float(value), digits)
    return f"{rounded if rounded != 0 else 0.0:+.{digits}f}"


def rate_delta(part_a: int, whole_a: int, part_b: int, whole_b: int) -> str:
    """Percentage-point change of B against A, with the change of the numerator."""
    if not whole_a or not whole_b:
        return f"n/a ({signed(part_b - part_a)})"
    points = 100.0 * (part_b / whole_b - part_a / whole_a)
    return f"{signed(points, 1)} pp ({signed(part_b - part_a)})"


def percent(value: float | None, denominator: str) -> str:
    return f"n/a ({denominator})" if value is None else f"{100.0 * value:.1f}% ({denominator})"


def points_delta(value_a: float | None, value_b: float | None) -> str:
    return "n/a" if value_a is None or value_b is None else f"{signed(100.0 * (value_b - value_a), 1)} pp"


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell).replace("|", "\\|") for cell in row) + " |" for row in rows]
    return lines


Row = tuple[Any, ...]


def _identity_rows(run_a: RunInfo, run_b: RunInfo) -> list[Row]:
    return [
        ("run directory", str(run_a.run_dir), str(run_b.run_dir)),
        ("model", run_a.model, run_b.model),
        ("run", run_a.run, run_b.run),
        ("split", run_a.split, run_b.split),
        ("mode", run_a.mode, run_b.mode),
        ("with_background", run_a.with_background, run_b.with_background),
        ("problems selected", len(run_a.selection), len(run_b.selection)),
    ]


# config.json settings that name the runs themselves rather than how they were made (the model is named apart)
NOT_A_DIFFERENCE: frozenset[str] = frozenset({"model", "run", "runs"})


def _recorded(run: RunInfo) -> dict[str, Any]:
    """Every setting, library version and the confinement line config.json recorded, by one flat name."""
    config = run.results.config or {}
    settings = config.get("settings") if isinstance(config.get("settings"), Mapping) else {}
    versions = config.get("versions") if isinstance(config.get("versions"), Mapping) else {}
    found: dict[str, Any] = {name: value for name, value in (settings or {}).items() if name not in NOT_A_DIFFERENCE}
    found.update({f"version of {name}": value for name, value in (versions or {}).items()})
    found["confinement"] = config.get("confinement")
    return found


def setting_differences(run_a: RunInfo, run_b: RunInfo) -> list[Row]:
    """(name, A, B) for every recorded setting, library version or confinement line that differs, by name."""
    recorded_a, recorded_b = _recorded(run_a), _recorded(run_b)
    return [
        (name, _value_text(recorded_a.get(name)), _value_text(recorded_b.get(name)))
        for name in sorted(set(recorded_a) | set(recorded_b))
        if recorded_a.get(name) != recorded_b.get(name)
    ]


def _value_text(value: Any) -> str:
    if value is None:
        return "(not recorded)"
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)


def differences_line(rows: Sequence[Row], *, markdown: bool = False) -> str:
    """The one line under the significance line: every setting that differs besides the model (names read from
    the runs' files: in code spans in Markdown)."""
    if not rows:
        return "Only the model differs."
    names = ", ".join(shown(str(row[0]), markdown=markdown) for row in rows)
    return f"Besides the model, {len(rows)} setting(s) differ: {names}."


def _difference_lines(rows: Sequence[Row]) -> list[str]:
    if not rows:
        return []
    cells = [(name, shown(str(a), markdown=True), shown(str(b), markdown=True)) for name, a, b in rows]
    return ["## Settings that differ", ""] + table(("setting", "A", "B"), cells) + [""]


def _identity_lines(rows: Sequence[Row]) -> list[str]:
    """Folder, model and run names come from the runs' own files: shown neutralised, in code spans."""
    cells = [(name, shown(a, markdown=True), shown(b, markdown=True)) for name, a, b in rows[:3]]
    return table(("", "A", "B"), [*cells, *rows[3:]]) + [""]


def _scope_notes(run_a: RunInfo, run_b: RunInfo, common: Sequence[str]) -> list[tuple[str, str]]:
    """(kind, text) lines: kind `warning` (bold in Markdown), `item` (a list item) or `text`."""
    only_a = [pid for pid in run_a.entries if pid not in run_b.entries]
    only_b = [pid for pid in run_b.entries if pid not in run_a.entries]
    notes: list[tuple[str, str]] = []
    if run_a.split != run_b.split:
        notes.append(
            (
                "warning",
                f"Splits differ (A: {run_a.split}, B: {run_b.split}): only the {len(common)} problems "
                f"selected in both runs are compared.",
            )
        )
    elif only_a or only_b:
        notes.append(
            ("warning", f"The selections differ: only the {len(common)} problems selected in both runs are compared.")
        )
    else:
        notes.append(("text", f"Compared problems: all {len(common)} selected problems (the same in both runs)."))
    if only_a:
        notes.append(("item", f"only in A ({len(only_a)}): {', '.join(only_a)}"))
    if only_b:
        notes.append(("item", f"only in B ({len(only_b)}): {', '.join(only_b)}"))
    changed = [pid for pid in common if run_a.entries[pid].fingerprint != run_b.entries[pid].fingerprint]
    if changed:
        notes.append(("item", f"problem statement differs between the runs ({len(changed)}): {', '.join(changed)}"))
    notes.append(
        (
            "text",
            f"Verdicts, the one-run-only lists and status counts are those of attempt {COMPARED_ATTEMPT + 1} of "
            "each problem; deltas are B minus A.",
        )
    )
    return notes


def _scope_lines(notes: Sequence[tuple[str, str]]) -> list[str]:
    marks = {"warning": "**{}**", "item": "- {}", "text": "{}"}
    return [marks[kind].format(text) for kind, text in notes] + [""]


def _metric_rows(a: RunTotals, b: RunTotals) -> list[Row]:
    return [
        (
            "main_problem_resolve_rate",
            ratio(a.resolved, a.problems),
            ratio(b.resolved, b.problems),
            rate_delta(a.resolved, a.problems, b.resolved, b.problems),
        ),
        (
            "subproblem",
            ratio(a.steps_passed, a.steps_scored),
            ratio(b.steps_passed, b.steps_scored),
            rate_delta(a.steps_passed, a.steps_scored, b.steps_passed, b.steps_scored),
        ),
        ("main_problem_resolved", a.resolved, b.resolved, signed(b.resolved - a.resolved)),
        ("main_problem_total", a.problems, b.problems, signed(b.problems - a.problems)),
        ("subproblem_correct", a.steps_passed, b.steps_passed, signed(b.steps_passed - a.steps_passed)),
        ("subproblem_total", a.steps_scored, b.steps_scored, signed(b.steps_scored - a.steps_scored)),
        (
            "Error (generation failed or no details)",
            ratio(a.errors, a.problems),
            ratio(b.errors, b.problems),
            signed(b.errors - a.errors),
        ),
        (
            "no valid details file",
            ratio(a.no_details, a.problems),
            ratio(b.no_details, b.problems),
            signed(b.no_details - a.no_details),
        ),
    ]


def _with_intervals(rows: list[Row], intervals: Sequence[Row]) -> list[Row]:
    """The two rate rows, each followed by its interval row."""
    return [rows[0], intervals[0], rows[1], intervals[1], *rows[2:]]


def _metric_lines(rows: Sequence[Row]) -> list[str]:
    return ["## Metrics", ""] + table(("metric", "A", "B", "delta"), rows) + [""]


def _status_rows(a: RunTotals, b: RunTotals) -> list[Row]:
    total_a, total_b = sum(a.status_counts.values()), sum(b.status_counts.values())
    return [
        (
            status,
            ratio(a.status_counts[status], total_a),
            ratio(b.status_counts[status], total_b),
            signed(b.status_counts[status] - a.status_counts[status]),
        )
        for status in CELL_STATUSES
    ]


STATUS_NOTE = (
    "`no_verdict`: a scored step without a verdict (no details file, or missing from it). "
    "Percentages are of all steps, skipped ones included."
)


def _status_lines(rows: Sequence[Row]) -> list[str]:
    return ["## Step statuses", ""] + table(("status", "A", "B", "delta"), rows) + ["", STATUS_NOTE, ""]


def _pass_at_k_rows(metrics_a: Mapping[str, Any], metrics_b: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    ks = sorted({int(k) for k in metrics_a["pass_at_k"]} | {int(k) for k in metrics_b["pass_at_k"]})
    rows = []
    for k in ks:
        value_a, value_b = metrics_a["pass_at_k"].get(str(k)), metrics_b["pass_at_k"].get(str(k))
        rows.append(
            (
                f"pass@{k}",
                percent(value_a, f"mean over {metrics_a['problems']} problems"),
                percent(value_b, f"mean over {metrics_b['problems']} problems"),
                points_delta(value_a, value_b),
            )
        )
    return rows


def _attempt_rows(metrics_a: dict[str, Any] | str, metrics_b: dict[str, Any] | str) -> list[Row] | str:
    """The attempt rows, or why they are unavailable."""
    if isinstance(metrics_a, str) or isinstance(metrics_b, str):
        reasons = [f"{name}: {value}" for name, value in (("A", metrics_a), ("B", metrics_b)) if isinstance(value, str)]
        return "Attempt metrics unavailable: " + "; ".join(reasons)
    any_a, any_b = metrics_a["any_attempt"], metrics_b["any_attempt"]
    rows = [
        (
            "attempts per problem",
            metrics_a["attempts"],
            metrics_b["attempts"],
            signed(metrics_b["attempts"] - metrics_a["attempts"]),
        ),
        (
            "mean main_problem_resolve_rate (avg)",
            percent(
                metrics_a["mean_main_problem_resolve_rate"],
                f"{metrics_a['problems']} problems x {metrics_a['attempts']} attempts",
            ),
            percent(
                metrics_b["mean_main_problem_resolve_rate"],
                f"{metrics_b['problems']} problems x {metrics_b['attempts']} attempts",
            ),
            points_delta(metrics_a["mean_main_problem_resolve_rate"], metrics_b["mean_main_problem_resolve_rate"]),
        ),
        (
            "mean subproblem (avg)",
            percent(
                metrics_a["mean_subproblem_rate"],
                f"{any_a['subproblem_total']} steps x {metrics_a['attempts']} attempts",
            ),
            percent(
                metrics_b["mean_subproblem_rate"],
                f"{any_b['subproblem_total']} steps x {metrics_b['attempts']} attempts",
            ),
            points_delta(metrics_a["mean_subproblem_rate"], metrics_b["mean_subproblem_rate"]),
        ),
        *_pass_at_k_rows(metrics_a, metrics_b),
        _rate_row("resolved by any attempt (pass)", any_a, any_b, "main_problem_resolved", "main_problem_total"),
        _rate_row("steps passed by any attempt (pass)", any_a, any_b, "subproblem_correct", "subproblem_total"),
    ]
    return rows


def _attempt_lines(rows: Sequence[Row] | str) -> list[str]:
    lines = ["## Attempts", ""]
    if isinstance(rows, str):
        return lines + [rows, ""]
    return lines + table(("metric", "A", "B", "delta"), rows) + [""]


def _problem_flip_rows(
    problem_ids: Sequence[str], by_a: Mapping[str, ProblemResult], by_b: Mapping[str, ProblemResult]
) -> list[Row]:
    rows = []
    for pid in problem_ids:
        a, b = by_a[pid], by_b[pid]
        loser = b if a.resolved else a
        rows.append(
            (pid, ratio(a.steps_passed, a.scored_steps), ratio(b.steps_passed, b.scored_steps), loser.first_failure())
        )
    return rows


def _problem_flip_lines(title: str, rows: Sequence[Row]) -> list[str]:
    lines = [f"### {title} ({len(rows)})", ""]
    if not rows:
        return lines + ["(none)", ""]
    return lines + table(("problem", "A steps", "B steps", "first failure where unresolved"), rows) + [""]


def _step_flip_lines(title: str, flips: Sequence[StepFlip]) -> list[str]:
    lines = [f"### {title} ({len(flips)})", ""]
    if not flips:
        return lines + ["(none)", ""]
    return lines + table(("step", "A", "B"), [(f.step_id, f.status_a, f.status_b) for f in flips]) + [""]


def _cost_rows(a: Cost, b: Cost) -> list[Row]:
    return [
        (
            "input tokens",
            a.usage.input_tokens,
            b.usage.input_tokens,
            signed(b.usage.input_tokens - a.usage.input_tokens),
        ),
        (
            "output tokens",
            a.usage.output_tokens,
            b.usage.output_tokens,
            signed(b.usage.output_tokens - a.usage.output_tokens),
        ),
        (
            "total tokens",
            a.usage.total_tokens,
            b.usage.total_tokens,
            signed(b.usage.total_tokens - a.usage.total_tokens),
        ),
        ("model calls", a.usage.calls, b.usage.calls, signed(b.usage.calls - a.usage.calls)),
        ("model latency (s, summed)", f"{a.latency_s:.1f}", f"{b.latency_s:.1f}", signed(b.latency_s - a.latency_s, 1)),
        (
            "attempts reporting usage",
            f"{a.attempts_reporting}/{a.attempts_total}",
            f"{b.attempts_reporting}/{b.attempts_total}",
            signed(b.attempts_reporting - a.attempts_reporting),
        ),
    ]


COST_NOTE = "From each attempt's details meta (usage, latency_s), else from the steps of generations/<id>.json."


def _cost_lines(rows: Sequence[Row]) -> list[str]:
    return ["## Tokens and latency", ""] + table(("quantity", "A", "B", "delta"), rows) + ["", COST_NOTE, ""]


DEFINITIONS = (
    "main_problem_resolve_rate: problems whose every scored step passed and whose generation had no error, "
    "over the compared problems. subproblem: passed scored steps over scored steps (micro-averaged; prefilled "
    "steps are not scored). A problem without a valid details file counts as unresolved with none of its steps "
    "passed. pass@k: the unbiased estimator 1 - C(n-c, k)/C(n, k) over n attempts with c resolving ones, "
    "averaged over problems."
)


@dataclass(frozen=True)
class Comparison:
    """Everything the comparison shows, computed once; rendered as Markdown and as HTML."""

    run_a: RunInfo
    run_b: RunInfo
    identity: list[Row]
    scope: list[tuple[str, str]]
    metrics: list[Row]
    statuses: list[Row]
    attempts: list[Row] | str | None
    problems_lost: list[Row]
    problems_gained: list[Row]
    steps_lost: list[StepFlip]
    steps_gained: list[StepFlip]
    cost: list[Row]
    paired: PairedSection
    differences: list[Row]  # every recorded setting, library version and confinement line that differs

    @property
    def differences_line(self) -> str:
        return differences_line(self.differences)


def build_comparison(
    run_a: RunInfo,
    run_b: RunInfo,
    common: Sequence[str],
    results_a: Sequence[ProblemResult],
    results_b: Sequence[ProblemResult],
) -> Comparison:
    totals_a, totals_b = run_totals(results_a), run_totals(results_b)
    lost, gained = problem_flips(results_a, results_b)
    steps_lost, steps_gained = step_flips(results_a, results_b)
    by_a = {result.problem_id: result for result in results_a}
    by_b = {result.problem_id: result for result in results_b}
    several = max(result.outcomes.n for result in (*results_a, *results_b)) > 1
    return Comparison(
        run_a=run_a,
        run_b=run_b,
        identity=_identity_rows(run_a, run_b),
        scope=_scope_notes(run_a, run_b, common),
        metrics=_with_intervals(_metric_rows(totals_a, totals_b), interval_rows(results_a, results_b)),
        statuses=_status_rows(totals_a, totals_b),
        attempts=_attempt_rows(_attempt_metrics(results_a), _attempt_metrics(results_b)) if several else None,
        problems_lost=_problem_flip_rows(lost, by_a, by_b),
        problems_gained=_problem_flip_rows(gained, by_a, by_b),
        steps_lost=steps_lost,
        steps_gained=steps_gained,
        cost=_cost_rows(totals_a.cost, totals_b.cost),
        paired=paired_section(results_a, results_b, run_a.entries, run_b.entries),
        differences=setting_differences(run_a, run_b),
    )


def render_markdown(comparison: Comparison) -> str:
    c = comparison
    lines = [
        c.paired.first_line,
        "",
        differences_line(c.differences, markdown=True),
        "",
        f"# Comparison: {shown(c.run_a.label, markdown=True)} (A) vs {shown(c.run_b.label, markdown=True)} (B)",
        "",
    ]
    lines += _identity_lines(c.identity)
    lines += _difference_lines(c.differences)
    lines += _scope_lines(c.scope)
    lines += paired_lines(c.paired)
    lines += _metric_lines(c.metrics)
    lines += _status_lines(c.statuses)
    if c.attempts is not None:
        lines += _attempt_lines(c.attempts)
    lines += ["## Problems resolved by one run only", ""]
    lines += _problem_flip_lines("resolved in A, unresolved in B", c.problems_lost)
    lines += _problem_flip_lines("unresolved in A, resolved in B", c.problems_gained)
    lines += ["## Steps passed by one run only", ""]
    lines += _step_flip_lines("pass in A, not pass in B", c.steps_lost)
    lines += _step_flip_lines("not pass in A, pass in B", c.steps_gained)
    lines += _cost_lines(c.cost)
    lines += ["## Definitions", "", DEFINITIONS, ""]
    return "\n".join(lines)


def render_report(
    run_a: RunInfo,
    run_b: RunInfo,
    common: Sequence[str],
    results_a: Sequence[ProblemResult],
    results_b: Sequence[ProblemResult],
) -> str:
    return render_markdown(build_comparison(run_a, run_b, common, results_a, results_b))


# ---------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------


def _compare(run_a: Path, run_b: Path, allow_split_mismatch: bool) -> Comparison:
    info_a, info_b = load_run(run_a), load_run(run_b)
    check_splits(info_a, info_b, allow_split_mismatch)
    common = common_problem_ids(info_a, info_b)
    return build_comparison(info_a, info_b, common, run_results(info_a, common), run_results(info_b, common))


def compare_runs(run_a: Path, run_b: Path, *, allow_split_mismatch: bool = False) -> str:
    """The Markdown comparison of the runs in folders `run_a` and `run_b` (deltas are B minus A)."""
    return render_markdown(_compare(Path(run_a), Path(run_b), allow_split_mismatch))


def resolve_run_dir(entry: str, results_dir: Path) -> Path:
    """A run folder given as a path, or as `<model>/<run>` under `<results_dir>/scicode/`."""
    given = Path(entry)
    if given.is_dir():
        return given
    under_results = ResultsPaths(Path(results_dir)).named_run(entry)
    return under_results if under_results.is_dir() else given


def write_comparison(settings: Settings) -> Path:
    """Write the comparison of the two runs named by `runs=` (Markdown, and an HTML page beside it linking to
    both runs' reports) and return the Markdown path (both are printed)."""
    if len(settings.runs) != 2:
        raise CompareError(f"invalid runs={','.join(settings.runs)}: expected exactly two run folders, A,B")
    run_a, run_b = (resolve_run_dir(entry, Path(settings.results_dir)) for entry in settings.runs)
    comparison = _compare(run_a, run_b, settings.allow_split_mismatch)
    results = ResultsPaths(Path(settings.results_dir))
    path = results.comparison(comparison.run_a.file_label, comparison.run_b.file_label)
    atomic_write_text(path, render_markdown(comparison))
    page = results.comparison_page(comparison.run_a.file_label, comparison.run_b.file_label)
    atomic_write_text(page, render_html(comparison, page.parent))
    print(f"comparison written to {path}")
    print(f"comparison page: {page}")
    return path


def render_html(comparison: Comparison, page_dir: Path) -> str:
    """The comparison as a self-contained page; flipped problems and steps link to both runs' reports."""
    from stages.report import COMPARE_SCRIPT, COMPARE_TEMPLATE, problem_anchor, relative_link, render, step_anchor

    reports = {
        side: RunPaths(run.run_dir).written_report() for side, run in (("A", comparison.run_a), ("B", comparison.run_b))
    }

    def links(anchor: str) -> dict[str, str]:
        return {side: relative_link(page_dir, report, anchor) for side, report in reports.items()}

    return render(
        COMPARE_TEMPLATE,
        COMPARE_SCRIPT,
        c=comparison,
        definitions=DEFINITIONS,
        status_note=STATUS_NOTE,
        cost_note=COST_NOTE,
        paired_note=PAIRED_NOTE,
        reports_present={side: report.is_file() for side, report in reports.items()},
        report_links=links("headline"),
        problem_links={
            row[0]: links(problem_anchor(row[0])) for row in (*comparison.problems_lost, *comparison.problems_gained)
        },
        step_links={
            flip.step_id: links(step_anchor(flip.step_id, COMPARED_ATTEMPT))
            for flip in (*comparison.steps_lost, *comparison.steps_gained)
        },
    )
