"""`doit export`: write the steps table and the inspect_ai log of the run of the settings (or of each run named
by `runs=`), under the run's `export/` folder (`export-<tag>/` for a subset or several attempts)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from stages.config.settings import Settings
from stages.errors import PipelineError
from stages.export.inspect_log import eval_log, iso, log_file_name
from stages.export.steps import csv_text, jsonl_text, step_rows
from stages.numbers.provenance import project_record, run_started
from stages.numbers.rows import collect_rows
from stages.records.invocations import invocations
from stages.records.results import ResultsError, read_run
from stages.records.summary import read_summary_file
from stages.storage.artifacts import atomic_write_text
from stages.storage.paths import RunPaths


class ExportError(PipelineError, ValueError):
    """A run cannot be exported (no folder, no selection), stated in one line."""


def run_times(paths: RunPaths, problem_ids: list[str]) -> tuple[str, str]:
    """(started, completed) of the log: the first recorded invocation's start and the last one's end
    (`stages.records.invocations`); for a run recorded before invocations were, its start as the summary
    estimates it and the time of the export."""
    recorded = invocations(paths, frozenset(problem_ids))
    if recorded:
        return iso(recorded[0].started_text()), iso(recorded[-1].ended_text())
    return iso(run_started(paths, problem_ids)), iso(datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))


def export_run(run_dir: Path, summary_tag: str = "", attempts: int = 1) -> list[Path]:
    """Write the exports of the run at `run_dir`; return the files written."""
    try:
        run = read_run(run_dir, attempts=attempts, summary_tag=summary_tag)
    except ResultsError as error:
        raise ExportError(f"cannot export {run_dir}: {error} ({_runs_of_the_model(run_dir)})") from None
    paths = RunPaths(run_dir, summary_tag)
    model = str(run.settings.get("model") or run_dir.parent.name)
    steps = list(step_rows(run, model))
    written = [paths.export_steps_csv, paths.export_steps_jsonl]
    atomic_write_text(paths.export_steps_csv, csv_text(steps))
    atomic_write_text(paths.export_steps_jsonl, jsonl_text(steps))
    created, completed = run_times(paths, [result.problem_id for result in run.problems])
    summary = read_summary_file(paths.summary_json)
    log = eval_log(
        run,
        collect_rows(run),
        model=model,
        created=created,
        completed=completed,
        project=project_record(),
        caveats=tuple(caveat.text for caveat in summary.caveats) if summary else (),
        published=summary.published.to_record() if summary else None,
    )
    target = paths.export_inspect_dir / log_file_name(run, created)
    for older in paths.export_inspect_dir.glob("*_scicode_*.json"):
        if older != target:
            older.unlink()
    atomic_write_text(target, json.dumps(log, ensure_ascii=False, indent=1, allow_nan=False))
    return [*written, target]


def _runs_of_the_model(run_dir: Path) -> str:
    """What to do instead: the runs that exist for the same model (name one with run=), else run it first."""
    from stages.runs.index import is_listed_run

    model_dir = run_dir.parent
    folders = model_dir.iterdir() if model_dir.is_dir() else ()
    others = sorted(path.name for path in folders if path.is_dir() and is_listed_run(path))
    if not others:
        return f"no run of model={model_dir.name} under {model_dir.parent}: run `doit select` / `doit run` first"
    return f"runs of model={model_dir.name} that exist: {', '.join(others)}; name one with run=<name>"


def write_export(settings: Settings) -> list[Path]:
    """`doit export`: the run of the settings, or every run named by `runs=`; prints each file written."""
    from stages.compare.stage import resolve_run_dir

    if settings.runs:
        targets = [(resolve_run_dir(entry, Path(settings.results_dir)), "", 1) for entry in settings.runs]
    else:
        targets = [(settings.run_paths.run_dir, settings.summary_tag, settings.attempts)]
    written = []
    for run_dir, tag, attempts in targets:
        files = export_run(run_dir, tag, attempts)
        for path in files:
            print(f"export: {path}")
        written += files
    return written
