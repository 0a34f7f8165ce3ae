"""`doit runs`: an index of every run under `<results_dir>/scicode/`, one row each, as `runs.md` and `runs.html`.

A run is a folder `<model>/<run>/` holding selection.json or config.json. Its row comes from its summary: the
full run's `summary.json`, else the most recent `summary-<tag>.json` (a subset or several attempts; the row
names the tag). A run without a valid summary, or one of whose details or generation files is newer than its
summary, is listed with that state and what to run. The page (`stages.runs.page`, which also draws the plots) sorts and
filters the rows by setting and plots resolve rate against cost (tokens where a run has no cost), one plot per
split and background setting, with the Pareto front marked. A run is marked with the published protocol
(`stages/benchmark/protocols.json`) its summary says it is (`Summary.published`, decided once per run by
`stages.summarize.published_setting`; the index has no rule of its own), and its row shows the published figures
of its model that its summary sets beside its own; a plot is captioned with the protocols whose split and
background it plots.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from stages.benchmark.datasets import DEFAULT_DATASET
from stages.benchmark.published import Protocol, protocols
from stages.execution.untrusted import shown
from stages.numbers.pricing import money
from stages.numbers.text import CAVEATS_LIMIT, name_span, ratio
from stages.numbers.uncertainty.intervals import CLUSTERED_METHOD, RESOLVE_METHOD, interval_methods
from stages.numbers.uncertainty.text import INTERVALS_SENTENCE, rate_range
from stages.records.results import cached_selection
from stages.records.summary import (
    Caveat,
    PublishedSetting,
    ReferenceFigure,
    Summary,
    caveats_text,
    read_summary_file,
)
from stages.storage.artifacts import read_frozen
from stages.storage.json_values import EMPTY, Frozen, FrozenObject, obj, optional_number, optional_text
from stages.storage.markdown_table import markdown_table
from stages.storage.paths import COMPARE_DIR_NAME, ResultsPaths, RunPaths

RowState = Literal["summarized", "stale", "not summarized", "invalid summary"]


@dataclass(frozen=True)
class MarkedSetting:
    """A published protocol that fixes a split and background (`stages/benchmark/protocols.json`): a run is marked
    with it when its summary says the run is that published setting (`Summary.published`, decided once per run), a
    plot is captioned with it when the plot's split and background are the protocol's."""

    key: str  # the protocol's name
    split: str
    with_background: bool
    label: str
    dataset: str = DEFAULT_DATASET  # the published settings are the original data's

    def is_setting_of(self, split: str | None, with_background: bool | None, dataset: str = DEFAULT_DATASET) -> bool:
        """Whether a dataset, split and background setting (a plot's) is this one."""
        return self.dataset == dataset and self.split == split and self.with_background == with_background


def _marked(protocol: Protocol) -> MarkedSetting | None:
    split, background = protocol.settings.get("split"), protocol.settings.get("with_background")
    dataset = protocol.settings.get("dataset", DEFAULT_DATASET)
    if not isinstance(split, str) or not isinstance(background, bool) or not isinstance(dataset, str):
        return None
    return MarkedSetting(protocol.name, split, background, protocol.title, dataset)


MARKED_SETTINGS: tuple[MarkedSetting, ...] = tuple(mark for entry in protocols() if (mark := _marked(entry)))


@dataclass(frozen=True)
class IndexRow:
    """One run as the index lists it; rates and intervals are None without a usable summary."""

    run_dir: Path
    model: str
    run: str
    split: str | None
    mode: str | None
    with_background: bool | None
    carry: str | None
    attempts: int | None
    summary_tag: str
    selected: int | None  # problems selected (the headline's Total)
    resolved: int | None
    problems: int | None
    resolve_interval: tuple[float, float] | None
    steps_passed: int | None
    steps_scored: int | None
    step_interval: tuple[float, float] | None
    tokens: int | None
    cost: float | None
    run_started: str | None
    summarized_at: str | None
    report: Path | None
    state: RowState
    note: str
    caveats: tuple[Caveat, ...] = ()  # the summary's (`stages.summarize.caveats`)
    published: PublishedSetting | None = None  # the summary's (`stages.summarize.published_setting`)
    references: tuple[ReferenceFigure, ...] = ()  # the summary's published figures of the run's model
    dataset: str = DEFAULT_DATASET

    @property
    def split_label(self) -> str:
        """The split as the index shows it: `test`, or `test (verified)` for a dataset other than the original."""
        split = self.split or "unknown"
        return split if self.dataset == DEFAULT_DATASET else f"{split} ({self.dataset})"

    @property
    def caveats_text(self) -> str:
        return caveats_text(self.caveats)

    @property
    def resolve_rate(self) -> float | None:
        return self.resolved / self.problems if self.resolved is not None and self.problems else None

    @property
    def step_rate(self) -> float | None:
        return self.steps_passed / self.steps_scored if self.steps_passed is not None and self.steps_scored else None

    @property
    def marks(self) -> tuple[MarkedSetting, ...]:
        """The published setting this run is, as its summary decided (none without a summary, or when it is none)."""
        published = self.published
        if published is None or not published.is_published:
            return ()
        return tuple(mark for mark in MARKED_SETTINGS if mark.key == published.protocol)

    @property
    def references_text(self) -> str:
        """The published figures of the run's model, `; `-joined ("" without any)."""
        return "; ".join(figure.text for figure in self.references)

    @property
    def setting(self) -> tuple[str, str]:
        """(split, background) of the run's plot (runs of different datasets are never plotted together)."""
        return (self.split_label, background_text(self.with_background))

    @property
    def date(self) -> str:
        return (self.run_started or self.summarized_at or "")[:10] or "-"


def background_text(with_background: bool | None) -> str:
    return "unknown" if with_background is None else ("with background" if with_background else "no background")


# ---------------------------------------------------------------------------
# Finding runs and reading their rows
# ---------------------------------------------------------------------------


def run_folders(results: ResultsPaths) -> list[Path]:
    """Every run folder under `<results_dir>/scicode/` (`is_listed_run`), in name order (the comparisons folder
    excluded)."""
    if not results.root.is_dir():
        return []
    found = []
    for model_dir in sorted(path for path in results.root.iterdir() if path.is_dir()):
        if model_dir.name == COMPARE_DIR_NAME:
            continue
        for run_dir in sorted(path for path in model_dir.iterdir() if path.is_dir()):
            if is_listed_run(run_dir):
                found.append(run_dir)
    return found


def is_listed_run(run_dir: Path) -> bool:
    """A folder with a selection and something made from it (a generation, details or a summary): a run that
    stopped before its first answer (a failed preflight, say) made nothing and is no run to list."""
    paths = RunPaths(run_dir)
    if not paths.has_selection():
        return False
    made = (paths.generations_dir.glob("*.json"), paths.details_dir.glob("*.json"), run_dir.glob("summary*.json"))
    return any(next(found, None) is not None for found in made)


def summary_files(run_dir: Path) -> list[Path]:
    """The run's summaries: the full run's first, then every tagged one."""
    full = RunPaths(run_dir).summary_json
    return ([full] if full.is_file() else []) + sorted(run_dir.glob("summary-*.json"))


def chosen_summary(run_dir: Path) -> tuple[Path | None, Summary | None, bool]:
    """(file, record, some summary file exists): the full run's valid summary, else the latest valid tagged one."""
    files = summary_files(run_dir)
    valid = [(path, record) for path in files if (record := read_summary_file(path)) is not None]
    full = RunPaths(run_dir).summary_json
    for path, record in valid:
        if path == full:
            return path, record, True
    if valid:
        path, record = max(valid, key=lambda item: item[1].summarized_at)
        return path, record, True
    return None, None, bool(files)


def _whole(value: Frozen) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def newest_input_time(run_dir: Path) -> float:
    """The latest modification time of the run's details and generation files (0 without any)."""
    paths = RunPaths(run_dir)
    times = [
        path.stat().st_mtime for folder in (paths.details_dir, paths.generations_dir) for path in folder.glob("*.json")
    ]
    return max(times, default=0.0)


def _interval(record: FrozenObject, method: str) -> tuple[float, float] | None:
    """(low, high) of an interval record computed by `method`; None otherwise (an earlier method is not shown)."""
    low, high = optional_number(record.get("low")), optional_number(record.get("high"))
    if record.get("method") != method or low is None or high is None:
        return None
    return low, high


def _report_of(run_dir: Path, summary_path: Path | None) -> Path | None:
    if summary_path is not None:
        report = summary_path.with_name(summary_path.name.replace("summary", "report", 1)).with_suffix(".html")
        if report.is_file():
            return report
    written = RunPaths(run_dir).written_report()
    return written if written.is_file() else None


def _tag_of(summary_path: Path | None) -> str:
    if summary_path is None or summary_path.stem == "summary":
        return ""
    return summary_path.stem.removeprefix("summary-")


def index_row(run_dir: Path) -> IndexRow:
    """The row of one run folder."""
    path, summary, any_summary = chosen_summary(run_dir)
    config = read_frozen(RunPaths(run_dir).recorded_config(), "config") or EMPTY
    settings = obj(config.get("settings"))
    selection = cached_selection(RunPaths(run_dir))
    state, note = _state(run_dir, path, any_summary, summary)
    identity = summary.identity if summary else None
    headline = summary.headline if summary else EMPTY
    intervals = obj(headline.get("intervals"))
    background = identity.with_background if identity else settings.get("with_background")
    return IndexRow(
        run_dir=run_dir,
        model=str((identity and identity.model) or settings.get("model") or run_dir.parent.name),
        run=run_dir.name,
        split=(identity and identity.split)
        or optional_text(settings.get("split"))
        or (selection.split if selection else None),
        mode=(identity and identity.mode) or optional_text(settings.get("mode")),
        with_background=None if background is None else bool(background),
        carry=(identity and identity.carry) or optional_text(settings.get("carry")),
        attempts=(identity and identity.attempts_per_problem) or _whole(settings.get("attempts")),
        summary_tag=_tag_of(path),
        selected=_whole(headline.get("Total")),
        resolved=_whole(headline.get("main_problem_resolved")),
        problems=_whole(headline.get("main_problem_total")),
        resolve_interval=_interval(obj(intervals.get("main_problem_resolve_rate")), RESOLVE_METHOD),
        steps_passed=_whole(headline.get("subproblem_correct")),
        steps_scored=_whole(headline.get("subproblem_total")),
        step_interval=_interval(obj(intervals.get("subproblem")), CLUSTERED_METHOD),
        tokens=summary.usage.total_tokens if summary else None,
        cost=summary.cost.total if summary else None,
        run_started=summary.run_started if summary else None,
        summarized_at=summary.summarized_at if summary else None,
        report=_report_of(run_dir, path),
        state=state,
        note=note,
        caveats=summary.caveats if summary else (),
        published=summary.published if summary else None,
        references=summary.references if summary else (),
        dataset=(identity and identity.dataset)
        or optional_text(settings.get("dataset"))
        or (selection.dataset if selection else DEFAULT_DATASET),
    )


def _state(
    run_dir: Path, summary_path: Path | None, any_summary: bool, summary: Summary | None
) -> tuple[RowState, str]:
    if summary_path is None and any_summary:
        return "invalid summary", "its summary does not validate (written by an older version?): run `doit summarize`"
    if summary_path is None:
        return "not summarized", "no summary yet: run `doit summarize` with the run's settings"
    if newest_input_time(run_dir) > summary_path.stat().st_mtime:
        return "stale", "details or generations changed since it was summarized: run `doit summarize`"
    if summary is not None and summary.uncertainty != interval_methods():
        return (
            "stale",
            "summarized with earlier interval methods (its step interval is not shown): run `doit summarize`",
        )
    return "summarized", ""


def index_rows(results: ResultsPaths) -> list[IndexRow]:
    """Every run's row, ordered by split, background, then resolve rate (highest first) and model."""
    rows = [index_row(run_dir) for run_dir in run_folders(results)]
    return sorted(rows, key=lambda row: (*row.setting, -(row.resolve_rate or -1.0), row.model, row.run))


# ---------------------------------------------------------------------------
# The Pareto front: best resolve rate for its cost
# ---------------------------------------------------------------------------


def pareto_front(points: Sequence[tuple[float, float]]) -> set[int]:
    """Indices of the points (cost, rate) that no other point dominates (no higher rate for at most the same
    cost, nor the same rate for less). Of identical points the first is on the front."""
    order = sorted(range(len(points)), key=lambda index: (points[index][0], -points[index][1], index))
    front: set[int] = set()
    best = float("-inf")
    for index in order:
        if points[index][1] > best:
            front.add(index)
            best = points[index][1]
    return front


# ---------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------


def _rate_cell(part: int | None, whole: int | None, interval: tuple[float, float] | None) -> str:
    if part is None or whole is None:
        return "-"
    return ratio(part, whole) + (f", 95% CI {rate_range(*interval)}" if interval else "")


def _marks_text(row: IndexRow) -> str:
    return "; ".join(f"({index + 1})" for index, mark in enumerate(MARKED_SETTINGS) if mark in row.marks)


def markdown_row(row: IndexRow, link_from: Path) -> tuple[str, ...]:
    from stages.pages.writer import relative_link

    link = f"[report]({relative_link(link_from, row.report, 'headline')})" if row.report else "-"
    return (
        name_span(row.model),
        name_span(row.run) + (f" ({shown(row.summary_tag)})" if row.summary_tag else ""),
        shown(row.split_label if row.split else "-"),
        shown(row.mode or "-"),
        background_text(row.with_background),
        shown(row.carry or "-"),
        str(row.attempts or "-"),
        _rate_cell(row.resolved, row.problems, row.resolve_interval),
        _rate_cell(row.steps_passed, row.steps_scored, row.step_interval),
        "-" if row.tokens is None else str(row.tokens),
        money(row.cost),
        shown(row.date),
        row.state + (f": {row.note}" if row.note else ""),
        _marks_text(row) or "-",
        link,
        shown(row.caveats_text, limit=CAVEATS_LIMIT) or "-",
        shown(row.references_text, limit=CAVEATS_LIMIT) or "-",
    )


MARKDOWN_HEADER = (
    "model",
    "run",
    "split",
    "mode",
    "background",
    "carry",
    "attempts",
    "main_problem_resolve_rate",
    "subproblem",
    "tokens",
    "cost",
    "date",
    "state",
    "marked",
    "report",
    "caveats",
    "published figures",
)


@dataclass(frozen=True)
class SettingFront:
    """The runs of one split and background setting with a resolve rate: those plotted against cost (or tokens,
    when some run of the setting has no cost) and the Pareto front among them."""

    split: str
    background: str
    x_kind: Literal["cost", "tokens"]
    plotted: tuple[IndexRow, ...]
    front: tuple[IndexRow, ...]  # in cost order
    not_plotted: tuple[IndexRow, ...]

    @property
    def title(self) -> str:
        return f"split {shown(self.split)}, {self.background}"

    @property
    def marks(self) -> tuple[MarkedSetting, ...]:
        """The published settings whose split and background this plot's are (its runs may be subsets)."""
        runs = self.plotted or self.not_plotted
        first = runs[0] if runs else None
        return tuple(
            mark
            for mark in MARKED_SETTINGS
            if first is not None and mark.is_setting_of(first.split, first.with_background, first.dataset)
        )


def x_value(row: IndexRow, kind: str) -> float | None:
    value = row.cost if kind == "cost" else row.tokens
    return None if value is None else float(value)


def setting_front(split: str, background: str, rows: Sequence[IndexRow]) -> SettingFront:
    rated = [row for row in rows if row.resolve_rate is not None]
    kind: Literal["cost", "tokens"] = "cost" if rated and all(row.cost is not None for row in rated) else "tokens"
    plotted = [row for row in rated if x_value(row, kind) is not None]
    on_front = pareto_front([(x_value(row, kind) or 0.0, row.resolve_rate or 0.0) for row in plotted])
    front = sorted((plotted[index] for index in on_front), key=lambda row: x_value(row, kind) or 0.0)
    return SettingFront(
        split, background, kind, tuple(plotted), tuple(front), tuple(row for row in rows if row not in plotted)
    )


def setting_fronts(rows: Sequence[IndexRow]) -> list[SettingFront]:
    """One per (split, background) setting that has a run with a resolve rate, in the rows' order."""
    groups: dict[tuple[str, str], list[IndexRow]] = {}
    for row in rows:
        if row.resolve_rate is not None:
            groups.setdefault(row.setting, [])
    for row in rows:
        if row.setting in groups:
            groups[row.setting].append(row)
    return [setting_front(split, background, members) for (split, background), members in groups.items()]


def point_text(row: IndexRow, kind: str) -> str:
    """`strong / test-tool_use-nobg (50.0% resolved, $6.00)`."""
    x = x_value(row, kind) or 0.0
    amount = money(x) if kind == "cost" else f"{int(x):,} tokens"
    return (
        f"{name_span(row.model)} / {name_span(row.run)} ({100.0 * (row.resolve_rate or 0.0):.1f}% resolved, {amount})"
    )


def front_lines(rows: Sequence[IndexRow]) -> list[str]:
    """Per split and background setting: the runs on the Pareto front of resolve rate against cost (or tokens)."""
    lines = ["## Pareto fronts (resolve rate against cost, or tokens where a run has no cost)", ""]
    fronts = setting_fronts(rows)
    if not fronts:
        return lines + ["No summarized run has a resolve rate to plot.", ""]
    lines += [f"- {found.title}: {', '.join(point_text(row, found.x_kind) for row in found.front)}" for found in fronts]
    return lines + [""]


def index_markdown(rows: Sequence[IndexRow], page_dir: Path) -> str:
    lines = ["# SciCode runs", "", f"{len(rows)} run(s) under {name_span(page_dir)}.", "", INTERVALS_SENTENCE, ""]
    lines += [f"({index + 1}) {mark.label}." for index, mark in enumerate(MARKED_SETTINGS)]
    lines.append("")
    table = [markdown_row(row, page_dir) for row in rows]
    lines += markdown_table(MARKDOWN_HEADER, table, [False] * len(MARKDOWN_HEADER)) if table else ["No run yet."]
    lines.append("")
    return "\n".join(lines + front_lines(rows))
