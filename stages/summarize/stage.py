"""summarize stage: `<run>/summary.md`, `<run>/summary.json`, `<run>/plots/*.png` and `<run>/report.html`.

The run is read once through `stages.records.results` (selection, details, generations); this module checks whether
the summary is current, and writes it: the rows and their aggregation are the jobs of `stages.numbers` (`rows`,
`metrics`, `provenance`), their renderings those of `stages.summarize` (`markdown`, `summary_json`, the targets the
run was scored against `targets_info`), the plots `stages.summarize.plots`, the HTML report `stages.summarize.report`.

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

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from stages.benchmark.published import published_tables_digest
from stages.benchmark.weak_tests import weak_tests_digest
from stages.config.fingerprints import FingerprintParts, digest, run_relative
from stages.config.settings import Settings
from stages.errors import PipelineError
from stages.execution.untrusted import shown
from stages.numbers.metrics import attempt_metrics_of, status_counts, subfield_metrics
from stages.numbers.provenance import recorded_invocations, run_started
from stages.numbers.rows import ProblemRow, collect_rows
from stages.numbers.text import CAVEATS_LIMIT, NAME_LIMIT, ratio
from stages.numbers.uncertainty.intervals import methods_record
from stages.numbers.uncertainty.text import CLUSTERED_SHORT, RESOLVE_SHORT
from stages.records.results import ResultsError, Selection, read_config, read_run, read_selection, read_summary
from stages.records.summary import Summary, caveats_text
from stages.storage.artifacts import atomic_write_text, fingerprint, sha256_file, write_artifact
from stages.storage.paths import RunPaths
from stages.summarize.caveats import CaveatInputs, run_caveats
from stages.summarize.fingerprint_mark import carried_fingerprint, markdown_mark
from stages.summarize.markdown import render_markdown, resolve_range, step_range
from stages.summarize.published_setting import RunFacts, published_setting, reference_figures
from stages.summarize.summary_json import summary_record
from stages.summarize.targets_info import TargetsInfo, resolve_targets_info

__all__ = [
    "SummarizeError",
    "SummaryOutcome",
    "TargetsInfo",
    "run_summarize",
    "summary_fingerprint",
    "summary_is_current",
]


class SummarizeError(PipelineError, ValueError):
    """The run cannot be summarized (no selection), stated in one line."""


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
            "total": self.total,
            "evaluated": self.evaluated,
            "errors": self.errors,
            "resolved": self.resolved,
            "subproblem_correct": self.subproblem_correct,
            "subproblem_total": self.subproblem_total,
            "targets": self.targets_kind,
            "failed_problems": list(self.failed_problems),
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
    """The file's sha256; None when there is no readable file (absent, a folder, unreadable: the reader takes
    none of these for an artifact either)."""
    try:
        return sha256_file(path)
    except OSError:
        return None


def _config_identity(paths: RunPaths, settings: Settings) -> str:
    config = read_config(paths)
    return config["fingerprint"] if config is not None else fingerprint(settings.redacted())


FAILURE_RECORDS: dict[str, Callable[[RunPaths, str], Path]] = {
    "not_scored": RunPaths.not_scored,
    "not_generated": RunPaths.not_generated,
}


def _failure_digests(paths: RunPaths, problem_ids: Sequence[str]) -> dict[str, dict[str, str]]:
    """Digests of the records of problems not scored or not generated, by kind (only those that exist: a run
    without any keeps the fingerprint it had before such records existed)."""
    digests = {}
    for kind, path_of in FAILURE_RECORDS.items():
        found = {pid: _file_digest(path_of(paths, pid)) for pid in problem_ids}
        kept = {pid: sha for pid, sha in found.items() if sha is not None}
        if kept:
            digests[kind] = kept
    return digests


def _inputs_fingerprint(settings: Settings, selection: Selection) -> str:
    paths = settings.run_paths
    problem_ids = [entry.problem_id for entry in selection.entries]
    covered: dict[str, Any] = {
        "stage": "summarize",
        "selection": selection.fingerprint,
        "config": _config_identity(paths, settings),
        "details": {pid: _file_digest(paths.details(pid)) for pid in problem_ids},
        "generations": {pid: _file_digest(paths.generation(pid)) for pid in problem_ids},
        "weak_tests": weak_tests_digest(),
        "interval_methods": methods_record(),
        "published_tables": published_tables_digest(),
    }
    return fingerprint(covered | _failure_digests(paths, problem_ids))


INTERVAL_METHODS_PART = "stages/uncertainty interval methods"


def summary_fingerprint_parts(settings: Settings, selection: Selection) -> FingerprintParts:
    """The summary's fingerprint and what it covers by named part: every input file, by run-relative name."""
    paths = settings.run_paths
    problem_ids = [entry.problem_id for entry in selection.entries]
    inputs: dict[str, str | None] = {
        "selection.json": selection.fingerprint[:16],
        "config.json": _config_identity(paths, settings)[:16],
        "stages/benchmark/weak_tests.json": weak_tests_digest()[:16],
        "stages/benchmark/protocols.json, published.json": published_tables_digest()[:16],
    }
    for path in [*(paths.details(pid) for pid in problem_ids), *(paths.generation(pid) for pid in problem_ids)]:
        sha = _file_digest(path)
        inputs[run_relative(settings, path)] = sha and sha[:16]
    for kind, digests in _failure_digests(paths, problem_ids).items():
        for pid, sha in digests.items():
            inputs[run_relative(settings, FAILURE_RECORDS[kind](paths, pid))] = sha[:16]
    code = {INTERVAL_METHODS_PART: digest(methods_record())}
    return FingerprintParts(_inputs_fingerprint(settings, selection), inputs=inputs, code=code)


def summary_fingerprint(settings: Settings) -> str:
    """The fingerprint a current summary.json carries (for doit's up-to-date check): hashes of the inputs
    and the interval methods (a summary written with earlier methods is made again)."""
    try:
        selection = read_selection(settings.run_paths)
    except ResultsError:
        return fingerprint({"stage": "summarize", "selection": None})
    return _inputs_fingerprint(settings, selection)


def summary_is_current(settings: Settings) -> bool:
    """summary.json, summary.md and report.html carry the expected fingerprint and every plot it lists exists."""
    paths = settings.run_paths
    summary = read_summary(paths)
    if summary is None or summary.fingerprint != summary_fingerprint(settings):
        return False
    return not stale_outputs(paths, summary.fingerprint) and all(
        (paths.run_dir / plot).is_file() for plot in summary.plots
    )


def stale_outputs(paths: RunPaths, fingerprint: str) -> list[Path]:
    """summary.md and report.html when they do not carry `fingerprint` (absent, or of another summary)."""
    return [path for path in (paths.summary_md, paths.report_html) if carried_fingerprint(path) != fingerprint]


# ---------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------


def _write_plots(settings: Settings, rows: Sequence[ProblemRow]) -> tuple[Path, ...]:
    from stages.summarize.plots import CategoryBar, GridRow, write_plots

    grid = [
        GridRow(
            row.problem_id,
            tuple(step.status for step in row.steps),
            row.steps_passed,
            row.steps_scored,
            row.failed,
            group=row.split,
        )
        for row in rows
    ]
    categories = [
        CategoryBar(name, m.steps_passed, m.steps_scored, m.resolved, m.evaluated, field)
        for name, (field, m) in subfield_metrics(rows).items()
    ]
    return write_plots(
        settings.run_paths.plots_dir,
        grid_rows=grid,
        status_counts=status_counts(rows),
        categories=categories,
        run_label=f"{shown(settings.model, limit=NAME_LIMIT)} / {shown(settings.run_name, limit=NAME_LIMIT)}",
    )


# ---------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------


def one_line_summary(summary: Summary) -> str:
    """The final terminal line: the headline with every caveat of the run (`[targets derived ...; ...]`), then
    whether it is a published setting (`stages.summarize.published_setting`)."""
    metrics = summary.headline_metrics
    caveats = summary.caveats
    note = f" [{shown(caveats_text(caveats), limit=CAVEATS_LIMIT)}]" if caveats else ""
    names = f"{shown(summary.identity.model, limit=NAME_LIMIT)} / {shown(summary.identity.run, limit=NAME_LIMIT)}"
    return (
        f"{names}: resolved {ratio(metrics.resolved, metrics.evaluated)} "
        f"[95% {RESOLVE_SHORT} {resolve_range(metrics)}], steps {ratio(metrics.steps_passed, metrics.steps_scored)} "
        f"[95% {CLUSTERED_SHORT} {step_range(metrics)}], {metrics.errors} error(s), "
        f"{len(summary.failed_problems)} failed problem(s){note}; {summary.published.short}"
    )


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
    run = read_run(paths.run_dir, attempts=settings.attempts, summary_tag=paths.summary_tag)
    rows = collect_rows(run)
    targets = targets or resolve_targets_info(settings)
    started = run_started(paths, [row.problem_id for row in rows])
    recorded = recorded_invocations(paths, [row.problem_id for row in rows])
    summarized_at = (now or datetime.now(timezone.utc)).astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    plots = _write_plots(settings, rows)
    config = run.config
    caveats = run_caveats(CaveatInputs(settings, rows, targets, (config or {}).get("settings") or {}))
    facts = RunFacts(settings, rows, targets)
    summary = summary_record(
        settings,
        rows,
        fingerprint_parts=fingerprint_parts,
        targets=targets,
        config=config,
        started=started,
        summarized_at=summarized_at,
        plot_names=[path.relative_to(paths.run_dir).as_posix() for path in plots],
        attempts=attempt_metrics_of(settings, run),
        caveats=caveats,
        invocations=recorded,
    )
    summary = replace(
        summary,
        recorded_published=published_setting(facts),
        recorded_references=reference_figures(facts, summary.headline_metrics),
    )
    record = summary.to_record()
    from stages.summarize.report import write_report

    # Each output carries the summary's fingerprint (stages/summarize/fingerprint_mark.py); summary.json, which the
    # up-to-date check reads first, is written last.
    atomic_write_text(
        paths.summary_md, render_markdown(summary, paths.run_dir) + markdown_mark(summary.fingerprint) + "\n"
    )
    write_report(settings, run, rows, summary)
    write_artifact(paths.summary_json, "summary", record)
    return _outcome(paths, plots, summary)


def _outcome(paths: RunPaths, plots: tuple[Path, ...], summary: Summary) -> SummaryOutcome:
    metrics = summary.headline_metrics
    return SummaryOutcome(
        summary_md=paths.summary_md,
        summary_json=paths.summary_json,
        report_html=paths.report_html,
        plots=plots,
        total=metrics.total,
        evaluated=metrics.evaluated,
        errors=metrics.errors,
        resolved=metrics.resolved,
        subproblem_correct=metrics.steps_passed,
        subproblem_total=metrics.steps_scored,
        skipped_steps=metrics.steps_skipped,
        targets_kind=summary.targets.kind,
        failed_problems=tuple(failed.problem_id for failed in summary.failed_problems),
        one_line=one_line_summary(summary),
    )
