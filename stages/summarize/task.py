"""The `summarize` task kind: the run's summary, never up to date while the run has failures."""

from __future__ import annotations

from typing import TYPE_CHECKING

from doit.exceptions import TaskFailed

from stages.config.fingerprints import run_relative
from stages.config.task_kind import ArtifactCheck, TaskKind

if TYPE_CHECKING:
    from stages.config.settings import Settings
    from stages.records.summary import FailedProblem


def summarize_and_report(settings: Settings) -> TaskFailed | None:
    """Write the summary, then fail the task when problems failed (the summary still counts them)."""
    from stages.summarize.stage import run_summarize

    outcome = run_summarize(settings)
    print(outcome.one_line)
    print(f"summary: {outcome.summary_md}")
    print(f"report: {outcome.report_html}")
    return run_failure(settings)


def summary_is_up_to_date(settings: Settings) -> bool:
    """The summary is current and the run has no failure: a run with failed problems (or a failed sandbox) is
    never up to date, so every rerun says again what failed."""
    from stages.summarize.stage import summary_is_current

    return summary_is_current(settings) and run_failure(settings) is None


def summarize_artifacts(settings: Settings) -> list[ArtifactCheck]:
    from stages.records.results import ResultsError, read_selection
    from stages.summarize.stage import summary_fingerprint_parts

    try:
        selection = read_selection(settings.run_paths)
    except ResultsError:
        return []  # summarize_reasons names the missing selection
    return [
        ArtifactCheck(
            settings.run_paths.summary_json, "summary", lambda: summary_fingerprint_parts(settings, selection)
        )
    ]


def summarize_reasons(settings: Settings) -> list[str]:
    from stages.records.results import ResultsError, read_selection
    from stages.records.summary import read_summary_file
    from stages.summarize.stage import stale_outputs

    paths = settings.run_paths
    try:
        read_selection(paths)
    except ResultsError:
        return [f"no readable {run_relative(settings, paths.selection)} (select runs first)"]
    summary = read_summary_file(paths.summary_json)
    plots = summary.plots if summary else ()
    expected = [paths.summary_md, paths.report_html, *(paths.run_dir / plot for plot in plots)]
    missing = [run_relative(settings, path) for path in expected if not path.is_file()]
    stale = [
        run_relative(settings, path)
        for path in (stale_outputs(paths, summary.fingerprint) if summary else ())
        if path.is_file()
    ]
    failure = run_failure(settings)
    return (
        ([f"missing: {', '.join(missing)}"] if missing else [])
        + ([f"of another summary than summary.json: {', '.join(stale)}"] if stale else [])
        + ([f"the run has failures, so it is never up to date ({failure})"] if failure is not None else [])
    )


def failed_problems(settings: Settings) -> tuple[FailedProblem, ...]:
    from stages.records.summary import read_summary_file

    summary = read_summary_file(settings.run_paths.summary_json)
    return summary.failed_problems if summary else ()


def run_failure(settings: Settings) -> TaskFailed | None:
    """One line saying which problems failed and what would fix them; None for a clean run."""
    from stages.records.run_conditions import sandbox_failure_line
    from stages.records.summary import read_summary_file

    summary = read_summary_file(settings.run_paths.summary_json)
    if summary is None:
        return None
    sandbox_line = sandbox_failure_line(summary.tool_calls)
    if sandbox_line:
        return TaskFailed(sandbox_line)
    failed = summary.failed_problems
    if not failed:
        return None
    from stages.records import not_generated, not_scored

    ungenerated = [entry for entry in failed if entry.reason.startswith(not_generated.PREFIX)]
    unscored = [entry for entry in failed if entry.reason.startswith(not_scored.PREFIX)]
    recorded = unscored + ungenerated
    untargeted = set(summary.steps_without_targets)  # eval_error reasons only the trusted side writes
    steps = {problem.problem_id: problem.step_ids for problem in summary.problems}
    without_targets = [
        entry.problem_id
        for entry in failed
        if entry not in recorded and steps.get(entry.problem_id, frozenset()) & untargeted
    ]
    others = [entry.problem_id for entry in failed if entry not in recorded and entry.problem_id not in without_targets]
    parts = []
    if ungenerated:
        named = ", ".join(f"{entry.problem_id} ({entry.reason})" for entry in ungenerated)
        parts.append(
            f"{len(ungenerated)} problem(s) not generated: {named}; rerun to generate them again "
            f"(the error of each is in {settings.run_paths.not_generated_dir}/)"
        )
    if unscored:
        named = ", ".join(f"{entry.problem_id} ({entry.reason})" for entry in unscored)
        parts.append(
            f"{len(unscored)} problem(s) not scored: {named}; rerun to score them again "
            f"(the error of each is in {settings.run_paths.not_scored_dir}/)"
        )
    if others:
        parts.append(
            f"{len(others)} problem(s) failed in generation or scoring ({', '.join(others)}): "
            "rerun `doit run` to retry them"
        )
    if without_targets:
        parts.append(
            f"{len(without_targets)} problem(s) have steps without targets ({', '.join(without_targets)}): "
            f"stage the official {settings.benchmark.dataset.targets_file} in {settings.benchmark.folder} or set h5py_file="
        )
    return TaskFailed("; ".join(parts) + "; the summary counts them as unresolved")


SUMMARIZE = TaskKind("summarize", summarize_and_report, summary_is_up_to_date, summarize_artifacts, summarize_reasons)
