"""What the comparison of two runs holds, computed once from their problem rows (`stages.numbers.rows`) and
metrics (`stages.numbers.metrics`), in the same sense as the summary: every compared problem counts; a problem
without a (valid) details file, or whose generation failed, is unresolved and its scored steps did not pass;
each problem's number of scored steps comes from its selection entry. Verdicts, the one-run-only lists and
status counts are those of the first attempt of each problem; when a run holds several attempts, the attempt
metrics (averages and pass@k) are added. Whether a difference is more than noise is `stages.compare.paired`.

`stages.compare.page` renders a `Comparison` as Markdown and HTML, `stages.compare.record` as compare.json;
`stages.compare.stage` reads the two runs and writes the three files.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stages.benchmark.datasets import DEFAULT_DATASET, dataset_named
from stages.compare.paired import PairedSection, interval_rows, paired_section
from stages.errors import PipelineError
from stages.execution.untrusted import shown
from stages.numbers.metrics import Metrics, ReportedCost, metrics_of, reported_cost, status_counts
from stages.numbers.passk import PassKError, ProblemOutcomes, metrics_from_outcomes, result_outcomes
from stages.numbers.rows import SCORED_ATTEMPT, ProblemRow, problem_row
from stages.numbers.text import ratio
from stages.records.results import (
    CELL_STATUSES,
    CellStatus,
    ResultsError,
    RunResults,
    SelectionEntry,
    max_attempts,
    read_run,
)
from stages.records.summary import Caveat, PublishedSetting, read_summary_file
from stages.storage.json_values import JSONObject, JSONValue
from stages.storage.paths import RunPaths

COMPARED_ATTEMPT = SCORED_ATTEMPT
UNKNOWN = "(unknown)"

Row = tuple[Any, ...]
AttemptMetrics = dict[str, Any] | str  # a run's attempt metrics (stages.numbers.passk), or why they cannot be computed


class CompareError(PipelineError, ValueError):
    """Two runs cannot be compared (missing run, no selection, different splits), stated in one line."""


# ---------------------------------------------------------------------------
# The two runs
# ---------------------------------------------------------------------------


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
    caveats: tuple[Caveat, ...] = ()  # those of the run's summary (none without a readable one)
    published: PublishedSetting | None = None  # whether it is a published setting, as its summary says
    targets: str = UNKNOWN  # what its steps were scored against, as its summary records it (official, derived, ...)
    dataset: str = DEFAULT_DATASET

    @property
    def split_scope(self) -> tuple[str, ...]:
        """The splits of its dataset the run's split means (`all` under `verified` is its test split)."""
        try:
            return dataset_named(self.dataset).split_names(self.split)
        except ValueError:  # a dataset this version does not describe: its split as written
            return (self.split,)

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


def load_run(run_dir: Path, view: str = "") -> RunInfo:
    """The run at `run_dir`, read once; CompareError when the folder or a valid selection.json is missing.
    `view` names a subset (Settings.summary_tag) whose own selection is read when the folder holds one; else
    the folder's full selection (or, when it only ever ran a subset, the most recent one: `RunPaths.viewed`)."""
    run_dir = Path(run_dir)
    tag = view if view and RunPaths(run_dir, view).selection.is_file() else ""
    try:
        results = read_run(run_dir, summary_tag=tag)
    except ResultsError:
        if not run_dir.is_dir():
            raise CompareError(f"run directory not found: {run_dir}") from None
        selection = RunPaths(run_dir).selection
        raise CompareError(
            f"not a run directory: {selection} is {'invalid' if selection.exists() else 'missing'}"
        ) from None
    settings = results.settings
    background = settings.get("with_background")
    summary = read_summary_file(RunPaths(run_dir, tag).summary_json)  # its caveats and published setting
    return RunInfo(
        run_dir=run_dir,
        model=str(settings.get("model") or run_dir.parent.name),
        run=run_dir.name,
        split=results.selection.split,
        mode=str(settings.get("mode") or UNKNOWN),
        with_background=UNKNOWN if background is None else str(bool(background)).lower(),
        selection=results.selection.entries,
        results=results,
        caveats=summary.caveats if summary is not None else (),
        published=summary.published if summary is not None else None,
        targets=summary.targets.kind if summary is not None and summary.targets.kind else UNKNOWN,
        dataset=results.selection.dataset,
    )


# How each kind of targets is said in a comparison (a kind not listed is said by its name).
TARGETS_WORDS: dict[str, str] = {
    "official": "the official test_data.h5",
    "explicit": "an explicit h5py_file",
    "derived": "targets derived from the reference code (not the official test_data.h5)",
    "missing": "no targets",
    UNKNOWN: "unknown targets (no summary)",
}


def targets_note(run_a: RunInfo, run_b: RunInfo) -> tuple[str, str]:
    """One plain line on what each run was scored against: a warning when they differ or either is derived."""
    said = {side: TARGETS_WORDS.get(run.targets, run.targets) for side, run in (("A", run_a), ("B", run_b))}
    if run_a.targets == run_b.targets:
        kind = "warning" if run_a.targets != "official" else "text"
        return kind, f"Both runs were scored against {said['A']}."
    return "warning", f"The runs were scored against different targets: A against {said['A']}, B against {said['B']}."


@dataclass(frozen=True)
class ComparedRun:
    """One run over the compared problems: the summary's rows and metrics, attempt outcomes and their metrics."""

    info: RunInfo
    rows: tuple[ProblemRow, ...]
    outcomes: tuple[ProblemOutcomes, ...]
    metrics: Metrics
    statuses: Mapping[str, int]
    cost: ReportedCost

    @property
    def attempts(self) -> int:
        return max((outcome.n for outcome in self.outcomes), default=1)

    def attempt_metrics(self) -> AttemptMetrics:
        """The run's attempt metrics, or why they cannot be computed."""
        try:
            return metrics_from_outcomes(self.outcomes)
        except PassKError as error:
            return str(error)


def compared_run(run: RunInfo, problem_ids: Sequence[str]) -> ComparedRun:
    """`run` over `problem_ids` (in that order)."""
    by_id = run.results.by_id
    chosen = [by_id[pid] for pid in problem_ids]
    attempts = max_attempts(chosen)
    rows = tuple(problem_row(result) for result in chosen)
    return ComparedRun(
        info=run,
        rows=rows,
        outcomes=tuple(result_outcomes(result, attempts) for result in chosen),
        metrics=metrics_of(rows),
        statuses=status_counts(rows),
        cost=reported_cost(rows),
    )


# ---------------------------------------------------------------------------
# Matching the two runs
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class StepFlip:
    problem_id: str
    step_id: str
    status_a: CellStatus
    status_b: CellStatus


def check_splits(run_a: RunInfo, run_b: RunInfo, allow_split_mismatch: bool) -> None:
    """CompareError for runs of different splits (by what they mean in their datasets) unless allowed."""
    if run_a.split_scope != run_b.split_scope and not allow_split_mismatch:
        raise CompareError(
            f"runs of different splits: {run_a.run_dir} is {_split_text(run_a, run_b)}, {run_b.run_dir} is "
            f"{_split_text(run_b, run_a)} (set allow_split_mismatch=true to compare their common problems)"
        )


def _split_text(run: RunInfo, other: RunInfo) -> str:
    """`split=all`, and what it means in its dataset when the two runs' datasets differ."""
    if run.dataset == other.dataset:
        return f"split={run.split}"
    return f"split={run.split} of dataset {run.dataset} ({', '.join(run.split_scope)})"


def common_problem_ids(run_a: RunInfo, run_b: RunInfo) -> list[str]:
    """Problems selected in both runs, in run A's order; CompareError when there is none."""
    in_b = run_b.entries
    common = [pid for pid in run_a.entries if pid in in_b]
    if not common:
        raise CompareError(f"no problem is selected in both {run_a.run_dir} and {run_b.run_dir}")
    return common


def problem_flips(rows_a: Sequence[ProblemRow], rows_b: Sequence[ProblemRow]) -> tuple[list[str], list[str]]:
    """(resolved in A but not in B, resolved in B but not in A), problem ids in order."""
    pairs = list(zip(rows_a, rows_b))
    lost = [a.problem_id for a, b in pairs if a.resolved and not b.resolved]
    gained = [a.problem_id for a, b in pairs if b.resolved and not a.resolved]
    return lost, gained


def _step_ids(a: ProblemRow, b: ProblemRow) -> list[str]:
    ordered = [step.step_id for step in a.steps]
    known = set(ordered)
    return ordered + [step.step_id for step in b.steps if step.step_id not in known]


def step_flips(rows_a: Sequence[ProblemRow], rows_b: Sequence[ProblemRow]) -> tuple[list[StepFlip], list[StepFlip]]:
    """(steps passing in A but not in B, steps passing in B but not in A), with both statuses."""
    lost: list[StepFlip] = []
    gained: list[StepFlip] = []
    for a, b in zip(rows_a, rows_b):
        for step_id in _step_ids(a, b):
            flip = StepFlip(a.problem_id, step_id, a.status_of(step_id), b.status_of(step_id))
            if flip.status_a == "pass" and flip.status_b != "pass":
                lost.append(flip)
            elif flip.status_b == "pass" and flip.status_a != "pass":
                gained.append(flip)
    return lost, gained


def one_run_only_line(problems: tuple[int, int], steps: tuple[int, int]) -> str:
    """How many paired problems and steps change verdict in each direction, in words."""
    return (
        f"Over the paired problems, {steps[0]} step(s) pass only in A and {steps[1]} only in B; "
        f"{problems[0]} problem(s) are resolved only in A and {problems[1]} only in B."
    )


def first_failure(row: ProblemRow) -> str:
    """Why an unresolved problem is: its first step with a verdict other than pass, else its state, else that
    some of its scored steps have no verdict."""
    failing = next((step for step in row.steps if step.status not in ("pass", "skipped", "no_verdict")), None)
    if failing is not None:
        return f"{failing.step_id} {failing.status}"
    return row.state.replace("_", " ") if row.is_error else "steps without a verdict"


# ---------------------------------------------------------------------------
# Table rows
# ---------------------------------------------------------------------------


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


def _rate_row(label: str, a: Mapping[str, Any], b: Mapping[str, Any], part: str, whole: str) -> Row:
    """One metrics row: run A's and run B's `part`/`whole` rates and B's change in points."""
    return (label, ratio(a[part], a[whole]), ratio(b[part], b[whole]), rate_delta(a[part], a[whole], b[part], b[whole]))


def _identity_rows(run_a: RunInfo, run_b: RunInfo) -> list[Row]:
    return [
        ("run directory", str(run_a.run_dir), str(run_b.run_dir)),
        ("model", run_a.model, run_b.model),
        ("run", run_a.run, run_b.run),
        ("dataset", run_a.dataset, run_b.dataset),
        ("split", run_a.split, run_b.split),
        ("mode", run_a.mode, run_b.mode),
        ("with_background", run_a.with_background, run_b.with_background),
        ("problems selected", len(run_a.selection), len(run_b.selection)),
    ]


# config.json settings that name the runs themselves rather than how they were made (the model is named apart)
NOT_A_DIFFERENCE: frozenset[str] = frozenset({"model", "run", "runs"})


def _recorded(run: RunInfo) -> JSONObject:
    """Every setting, library version and the confinement line config.json recorded, by one flat name."""
    config = run.results.config or {}
    versions = config.get("versions") if isinstance(config.get("versions"), Mapping) else {}
    found = {name: value for name, value in run.results.settings.items() if name not in NOT_A_DIFFERENCE}
    found.update({f"version of {name}": value for name, value in (versions or {}).items()})
    found["confinement"] = config.get("confinement")
    return found


def _value_text(value: JSONValue) -> str:
    if value is None:
        return "(not recorded)"
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)


def setting_differences(run_a: RunInfo, run_b: RunInfo) -> list[Row]:
    """(name, A, B) for every recorded setting, library version or confinement line that differs, by name."""
    recorded_a, recorded_b = _recorded(run_a), _recorded(run_b)
    return [
        (name, _value_text(recorded_a.get(name)), _value_text(recorded_b.get(name)))
        for name in sorted(set(recorded_a) | set(recorded_b))
        if recorded_a.get(name) != recorded_b.get(name)
    ]


def differences_line(rows: Sequence[Row], *, same_model: bool, markdown: bool = False) -> str:
    """The one line under the significance line: whether the model differs, and every setting that differs (names
    read from the runs' files: in code spans in Markdown)."""
    names = ", ".join(shown(str(row[0]), markdown=markdown) for row in rows)
    if same_model:
        return f"Same model; {len(rows)} setting(s) differ: {names}." if rows else "Same model and settings."
    return f"Besides the model, {len(rows)} setting(s) differ: {names}." if rows else "Only the model differs."


def _scope_notes(
    run_a: RunInfo, run_b: RunInfo, common: Sequence[str], narrowed: str | None, unmatched: Sequence[str]
) -> list[tuple[str, str]]:
    """(kind, text) lines: kind `warning` (bold in Markdown), `item` (a list item) or `text`."""
    only_a = [pid for pid in run_a.entries if pid not in run_b.entries]
    only_b = [pid for pid in run_b.entries if pid not in run_a.entries]
    notes: list[tuple[str, str]] = []
    if run_a.dataset != run_b.dataset:
        notes.append(
            (
                "warning",
                f"Datasets differ (A: {run_a.dataset}, B: {run_b.dataset}): the {len(common)} problems selected in "
                "both are paired, step by step; a problem's statement, tests and targets may differ between them.",
            )
        )
    if run_a.split_scope != run_b.split_scope:
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
    if narrowed is not None:
        notes.append(("warning", f"Narrowed to {narrowed}: {len(common)} of the problems both runs selected."))
    if unmatched:
        notes.append(("item", f"sample_ids not selected in both runs ({len(unmatched)}): {', '.join(unmatched)}"))
    notes.append(targets_note(run_a, run_b))
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


def _count_row(label: str, part_a: int, whole_a: int, part_b: int, whole_b: int) -> Row:
    return (label, ratio(part_a, whole_a), ratio(part_b, whole_b), signed(part_b - part_a))


def _metric_rows(a: Metrics, b: Metrics) -> list[Row]:
    return [
        (
            "main_problem_resolve_rate",
            ratio(a.resolved, a.total),
            ratio(b.resolved, b.total),
            rate_delta(a.resolved, a.total, b.resolved, b.total),
        ),
        (
            "subproblem",
            ratio(a.steps_passed, a.steps_scored),
            ratio(b.steps_passed, b.steps_scored),
            rate_delta(a.steps_passed, a.steps_scored, b.steps_passed, b.steps_scored),
        ),
        ("main_problem_resolved", a.resolved, b.resolved, signed(b.resolved - a.resolved)),
        ("main_problem_total", a.total, b.total, signed(b.total - a.total)),
        ("subproblem_correct", a.steps_passed, b.steps_passed, signed(b.steps_passed - a.steps_passed)),
        ("subproblem_total", a.steps_scored, b.steps_scored, signed(b.steps_scored - a.steps_scored)),
        _count_row("Error (generation failed or no details)", a.errors, a.total, b.errors, b.total),
        _count_row("no valid details file", a.no_details, a.total, b.no_details, b.total),
    ]


def _with_intervals(rows: list[Row], intervals: Sequence[Row]) -> list[Row]:
    """The two rate rows, each followed by its interval row."""
    return [rows[0], intervals[0], rows[1], intervals[1], *rows[2:]]


def _status_rows(a: Mapping[str, int], b: Mapping[str, int]) -> list[Row]:
    total_a, total_b = sum(a.values()), sum(b.values())
    shown = [status for status in CELL_STATUSES if status != "not_generated" or a[status] or b[status]]
    return [_count_row(status, a[status], total_a, b[status], total_b) for status in shown]


def _pass_at_k_rows(metrics_a: Mapping[str, Any], metrics_b: Mapping[str, Any]) -> list[Row]:
    ks = sorted({int(k) for k in metrics_a["pass_at_k"]} | {int(k) for k in metrics_b["pass_at_k"]})
    rows: list[Row] = []
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


def _mean_row(label: str, key: str, a: Mapping[str, Any], b: Mapping[str, Any], units_a: str, units_b: str) -> Row:
    return (
        label,
        percent(a[key], f"{units_a} x {a['attempts']} attempts"),
        percent(b[key], f"{units_b} x {b['attempts']} attempts"),
        points_delta(a[key], b[key]),
    )


def _attempt_rows(metrics_a: AttemptMetrics, metrics_b: AttemptMetrics) -> list[Row] | str:
    """The attempt rows, or why they are unavailable."""
    if isinstance(metrics_a, str) or isinstance(metrics_b, str):
        reasons = [f"{name}: {value}" for name, value in (("A", metrics_a), ("B", metrics_b)) if isinstance(value, str)]
        return "Attempt metrics unavailable: " + "; ".join(reasons)
    any_a, any_b = metrics_a["any_attempt"], metrics_b["any_attempt"]
    problems_a, problems_b = f"{metrics_a['problems']} problems", f"{metrics_b['problems']} problems"
    steps_a, steps_b = f"{any_a['subproblem_total']} steps", f"{any_b['subproblem_total']} steps"
    attempts_a, attempts_b = metrics_a["attempts"], metrics_b["attempts"]
    return [
        ("attempts per problem", attempts_a, attempts_b, signed(attempts_b - attempts_a)),
        _mean_row(
            "mean main_problem_resolve_rate (avg)",
            "mean_main_problem_resolve_rate",
            metrics_a,
            metrics_b,
            problems_a,
            problems_b,
        ),
        _mean_row("mean subproblem (avg)", "mean_subproblem_rate", metrics_a, metrics_b, steps_a, steps_b),
        *_pass_at_k_rows(metrics_a, metrics_b),
        _rate_row("resolved by any attempt (pass)", any_a, any_b, "main_problem_resolved", "main_problem_total"),
        _rate_row("steps passed by any attempt (pass)", any_a, any_b, "subproblem_correct", "subproblem_total"),
    ]


def _problem_flip_rows(
    problem_ids: Sequence[str], by_a: Mapping[str, ProblemRow], by_b: Mapping[str, ProblemRow]
) -> list[Row]:
    rows: list[Row] = []
    for pid in problem_ids:
        a, b = by_a[pid], by_b[pid]
        loser = b if a.resolved else a
        rows.append(
            (pid, ratio(a.steps_passed, a.steps_scored), ratio(b.steps_passed, b.steps_scored), first_failure(loser))
        )
    return rows


def _cost_rows(a: ReportedCost, b: ReportedCost) -> list[Row]:
    def tokens(label: str, value_a: int, value_b: int) -> Row:
        return (label, value_a, value_b, signed(value_b - value_a))

    return [
        tokens("input tokens", a.usage.input_tokens, b.usage.input_tokens),
        tokens("output tokens", a.usage.output_tokens, b.usage.output_tokens),
        tokens("total tokens", a.usage.total_tokens, b.usage.total_tokens),
        tokens("model calls", a.usage.calls, b.usage.calls),
        ("model latency (s, summed)", f"{a.latency_s:.1f}", f"{b.latency_s:.1f}", signed(b.latency_s - a.latency_s, 1)),
        (
            "attempts reporting usage",
            f"{a.attempts_reporting}/{a.attempts_total}",
            f"{b.attempts_reporting}/{b.attempts_total}",
            signed(b.attempts_reporting - a.attempts_reporting),
        ),
    ]


# ---------------------------------------------------------------------------
# The comparison
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """Everything the comparison shows, computed once; rendered as Markdown, HTML and compare.json."""

    side_a: ComparedRun
    side_b: ComparedRun
    common: tuple[str, ...]  # the compared problems, in run A's order
    narrowed: str | None  # the command line's own sample_ids/category, when they narrowed the comparison
    identity: list[Row]
    scope: list[tuple[str, str]]
    metrics: list[Row]
    statuses: list[Row]
    attempts_a: AttemptMetrics | None  # None when both runs hold one attempt per problem
    attempts_b: AttemptMetrics | None
    attempts: list[Row] | str | None
    problems_lost: list[Row]
    problems_gained: list[Row]
    steps_lost: list[StepFlip]
    steps_gained: list[StepFlip]
    cost: list[Row]
    paired: PairedSection
    differences: list[Row]  # every recorded setting, library version and confinement line that differs

    @property
    def run_a(self) -> RunInfo:
        return self.side_a.info

    @property
    def run_b(self) -> RunInfo:
        return self.side_b.info

    @property
    def same_model(self) -> bool:
        return self.run_a.model == self.run_b.model

    @property
    def differences_line(self) -> str:
        return differences_line(self.differences, same_model=self.same_model)


def build_comparison(
    run_a: RunInfo,
    run_b: RunInfo,
    common: Sequence[str],
    narrowed: str | None = None,
    unmatched: Sequence[str] = (),
) -> Comparison:
    """The comparison of `run_a` and `run_b` on the `common` problems (deltas are B minus A); `narrowed` names
    the command line's sample_ids/category that chose them, `unmatched` the sample_ids not selected in both."""
    side_a, side_b = compared_run(run_a, common), compared_run(run_b, common)
    rows_a, rows_b = side_a.rows, side_b.rows
    lost, gained = problem_flips(rows_a, rows_b)
    steps_lost, steps_gained = step_flips(rows_a, rows_b)
    by_a = {row.problem_id: row for row in rows_a}
    by_b = {row.problem_id: row for row in rows_b}
    several = max(side_a.attempts, side_b.attempts) > 1
    attempts_a = side_a.attempt_metrics() if several else None
    attempts_b = side_b.attempt_metrics() if several else None
    return Comparison(
        side_a=side_a,
        side_b=side_b,
        common=tuple(common),
        narrowed=narrowed,
        identity=_identity_rows(run_a, run_b),
        scope=[
            *_scope_notes(run_a, run_b, common, narrowed, unmatched),
            ("text", one_run_only_line((len(lost), len(gained)), (len(steps_lost), len(steps_gained)))),
        ],
        metrics=_with_intervals(
            _metric_rows(side_a.metrics, side_b.metrics), interval_rows(side_a.metrics, side_b.metrics)
        ),
        statuses=_status_rows(side_a.statuses, side_b.statuses),
        attempts_a=attempts_a,
        attempts_b=attempts_b,
        attempts=None if attempts_a is None or attempts_b is None else _attempt_rows(attempts_a, attempts_b),
        problems_lost=_problem_flip_rows(lost, by_a, by_b),
        problems_gained=_problem_flip_rows(gained, by_a, by_b),
        steps_lost=steps_lost,
        steps_gained=steps_gained,
        cost=_cost_rows(side_a.cost, side_b.cost),
        paired=paired_section(rows_a, rows_b, run_a.entries, run_b.entries),
        differences=setting_differences(run_a, run_b),
    )
