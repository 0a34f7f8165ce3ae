"""One `TaskKind` record per doit task kind (a stage, the targets or the preflight): its action, its up-to-date
check and what that check compares (`stages.config.settings.Stage` names the stages whose settings are fingerprinted).

Every task kind has the same shape: `run(settings, *key)` is the doit action and `is_up_to_date(settings, *key)` its
up-to-date check, where `key` is `()` for a run-level task and `(problem_id,)` for `generate:<id>` / `score:<id>`
(the generate action also takes the problem's admission priority). `artifacts(settings, *key)` names the artifacts
the check compares and the fingerprint parts they must carry, so `explain` can say why a task will run.

Stage modules are imported inside these functions only: listing tasks or a no-op rerun must not import the model
client or the scoring engine unless a check needs it.
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from doit.exceptions import TaskFailed

from stages.config.fingerprints import FingerprintParts, changed_parts, run_relative
from stages.pipeline.command_line import generation_only

if TYPE_CHECKING:
    from stages.config.settings import Settings
    from stages.records.details import Details
    from stages.records.summary import FailedProblem

ProblemKey = tuple[str, ...]  # () for a run-level task, (problem_id,) for a per-problem task


@dataclass(frozen=True)
class ArtifactCheck:
    """One artifact an up-to-date check compares: its file, its kind and the fingerprint parts it must carry."""

    path: Path
    kind: str
    expected: Callable[[], FingerprintParts]

    def reasons(self, settings: Settings, named: bool = False) -> list[str]:
        """Why this artifact is not current (empty when it carries the expected fingerprint); `named` puts the
        file's name before each changed part (for a task with several artifacts)."""
        from stages.storage.artifacts import read_artifact

        where = run_relative(settings, self.path)
        if not self.path.exists():
            return [f"no artifact yet ({where})"]
        record = read_artifact(self.path, self.kind)
        if record is None:
            return [f"artifact invalid ({where} does not validate against schemas/{self.kind}.schema.json)"]
        return [f"{where}: {line}" if named else line for line in changed_parts(record, self.expected())]


def _no_artifacts(settings: Settings, *key: str) -> list[ArtifactCheck]:
    return []


def _no_other_reason(settings: Settings, *key: str) -> list[str]:
    return ["its up-to-date condition is not met although its artifacts are current"]


@dataclass(frozen=True)
class TaskKind:
    """A doit task kind: `run` is its action, `is_up_to_date` its check, both called as `(settings, *key)`.

    `artifacts` lists what the check compares; `other_reasons` says why the task runs when every artifact is
    current (a generation that ended in error, a run with failed problems, ...)."""

    name: str
    run: Callable[..., object]
    is_up_to_date: Callable[..., bool]
    artifacts: Callable[..., list[ArtifactCheck]] = _no_artifacts
    other_reasons: Callable[..., list[str]] = _no_other_reason
    per_problem: bool = False


# ---------------------------------------------------------------------------
# download
# ---------------------------------------------------------------------------


def run_download(settings: Settings) -> object:
    from stages.download.stage import run_download as download

    return download(settings)


def download_artifacts(settings: Settings) -> list[ArtifactCheck]:
    from stages.download.stage import download_fingerprint_parts

    return [ArtifactCheck(settings.data_paths.manifest, "manifest", lambda: download_fingerprint_parts(settings))]


def download_is_current(settings: Settings) -> bool:
    from stages.download.stage import download_fingerprint
    from stages.storage.artifacts import is_current

    return is_current(settings.data_paths.manifest, "manifest", download_fingerprint(settings))


# ---------------------------------------------------------------------------
# select
# ---------------------------------------------------------------------------


def run_select(settings: Settings) -> object:
    from stages.select.stage import run_select as select

    return select(settings)


def select_artifacts(settings: Settings) -> list[ArtifactCheck]:
    from stages.select.stage import config_fingerprint_parts, selection_fingerprint_parts

    paths = settings.run_paths
    return [
        ArtifactCheck(paths.selection, "selection", lambda: selection_fingerprint_parts(settings)),
        ArtifactCheck(paths.config, "config", lambda: config_fingerprint_parts(settings)),
    ]


def selection_is_current(settings: Settings) -> bool:
    from stages.select.stage import config_fingerprint, selection_fingerprint
    from stages.storage.artifacts import is_current

    paths = settings.run_paths
    return is_current(paths.selection, "selection", selection_fingerprint(settings)) and is_current(
        paths.config, "config", config_fingerprint(settings)
    )


# ---------------------------------------------------------------------------
# targets
# ---------------------------------------------------------------------------


def run_targets(settings: Settings) -> object:
    from stages.targets import derive_targets

    return derive_targets(settings)


def targets_needed(settings: Settings) -> bool:
    """True when the selection has validation problems and no usable targets exist yet."""
    from stages.select.stage import selected_entries
    from stages.targets import resolve_targets

    if resolve_targets(settings).kind != "missing":
        return False
    return any(entry.split == "validation" for entry in selected_entries(settings))


def targets_are_available(settings: Settings) -> bool:
    return not targets_needed(settings)


def targets_artifacts(settings: Settings) -> list[ArtifactCheck]:
    from stages.targets.derive import RECORD_KIND, derived_record_path, derived_targets_fingerprint_parts

    return [
        ArtifactCheck(
            derived_record_path(settings.data_paths), RECORD_KIND, lambda: derived_targets_fingerprint_parts(settings)
        )
    ]


def targets_reasons(settings: Settings) -> list[str]:
    return [
        "selected validation problems have no usable targets (no official test_data.h5, no current derived targets)"
    ]


# ---------------------------------------------------------------------------
# preflight
# ---------------------------------------------------------------------------


def run_preflight(settings: Settings) -> None:
    """The checks before anything runs, one line each: the Dask scheduler when scores will run on it, the endpoint
    when a model will be called (stages.preflight.endpoint), the sandbox and the targets, then python_binary's
    environment when something will run in it (stages.preflight.checks)."""
    from stages.pipeline.command_line import rescore_only
    from stages.preflight.checks import check_before_generation, check_before_running
    from stages.preflight.endpoint import check_endpoint, check_scheduler, preflight_line

    argv = sys.argv[1:]
    only_generation = generation_only(argv)
    lines: list[str] = []
    if remote_scores_pending(settings):
        lines += [line for line in (check_scheduler(settings),) if line]
    pending = problems_to_generate(settings)
    if pending and not rescore_only(argv):
        lines += check_endpoint(settings)
    if pending:
        lines += check_before_generation(settings, only_generation)
    for line in lines + check_before_running(settings, only_generation):
        print(preflight_line(f"preflight: {line}"))


def remote_scores_pending(settings: Settings) -> bool:
    """True when this command will score some problem on a Dask scheduler= (whose reachability is then checked)."""
    from stages.select.stage import selected_problem_ids

    if settings.executor != "dask" or not settings.scheduler or generation_only(sys.argv[1:]):
        return False
    return any(not score_is_current(settings, pid) for pid in selected_problem_ids(settings) or ())


def problems_to_generate(settings: Settings) -> list[str] | None:
    """The selected problems whose generations are not current; None when there is no current selection."""
    from stages.generate.stage import generations_current
    from stages.select.stage import selected_problem_ids

    selected = selected_problem_ids(settings)
    return None if selected is None else [pid for pid in selected if not generations_current(settings, pid)]


def nothing_to_generate(settings: Settings) -> bool:
    """True when every selected problem's generations are current: no model will be called."""
    from stages.generate.stage import generations_current
    from stages.select.stage import selected_problem_ids

    selected = selected_problem_ids(settings)
    return selected is not None and all(generations_current(settings, pid) for pid in selected)


def problems_to_score(settings: Settings) -> list[str] | None:
    """The selected problems whose details are not current (none for a command that only generates); None when
    there is no current selection."""
    from stages.records.details import current_details
    from stages.score.parent.stage import score_fingerprint
    from stages.select.stage import selected_problem_ids

    selected = selected_problem_ids(settings)
    if selected is None:
        return None
    if generation_only(sys.argv[1:]):
        return []
    return [
        pid
        for pid in selected
        if current_details(settings.run_paths.details(pid), score_fingerprint(settings, pid)) is None
    ]


def nothing_to_run(settings: Settings) -> bool:
    """True when no model will be called and nothing will be scored: the preflight has nothing to check."""
    return nothing_to_generate(settings) and problems_to_score(settings) == []


def preflight_reasons(settings: Settings) -> list[str]:
    pending = problems_to_generate(settings)
    if pending is None:
        return ["no current selection.json yet (select runs first)"]
    unscored = problems_to_score(settings) or []
    scheduler = [f"scores will run on scheduler={settings.scheduler}"] if remote_scores_pending(settings) else []
    return [
        "; ".join(
            [f"problems to generate: {', '.join(pending)}"] * bool(pending)
            + [f"problems to score: {', '.join(unscored)}"] * bool(unscored)
            + scheduler
        )
    ]


# ---------------------------------------------------------------------------
# generate:<id>
# ---------------------------------------------------------------------------


def run_generate(settings: Settings, problem_id: str, priority: float = 0.0) -> object:
    """`run_generate_attempts`; a problem whose generation ended in error is counted as failed in the live view.

    Generation never blocks the summary: should the task fail for a reason that is not a stop of the run (an
    unreadable or unwritable file, a bug of ours), the failure is recorded (`stages.records.not_generated`: the problem is
    "not generated: <reason>" in every report, unresolved in every denominator, generated again on the next run)
    and, when this command runs `summarize`, the task succeeds for doit so that the problem's score task and the
    summary still run (the summary's task then fails naming it); otherwise the task fails with that reason. A run
    that stops on purpose stays stopped: a key refused, an interruption, every problem failing the same permanent
    model-level way (`RunAborted`, so that no summary claims 0/N)."""
    from stages.errors import RunStopped
    from stages.execution import live_processes
    from stages.execution.activity import ACTIVITY
    from stages.generate.stage import RunAborted, run_generate_attempts
    from stages.pipeline.command_line import runs_summary
    from stages.records import not_generated

    if not generation_only(sys.argv[1:]):
        warm_up_later_stages(settings)
    not_generated.clear(settings.run_paths, problem_id)
    try:
        outcome = run_generate_attempts(settings, problem_id, priority)
    except (live_processes.RunInterrupted, RunStopped, RunAborted):
        raise  # stops of the run are the run's outcome, not this problem's
    except Exception as error:  # noqa: BLE001 - any other failure of one problem's generation is that problem's
        if live_processes.stopping():
            raise
        failure = not_generated.record(settings.run_paths, problem_id, error)
        ACTIVITY.add_generation_failure(problem_id)
        return None if runs_summary(sys.argv[1:]) else TaskFailed(failure.line)
    if "error" in outcome["attempts"]:
        ACTIVITY.add_generation_failure(problem_id)
    return outcome


def warm_up_later_stages(settings: Settings) -> None:
    """While the model answers (scoring and summarizing follow in this process): start the test processes'
    zygote and import the summary's plotting and report modules, in background threads, once per process, so
    neither the first verdict nor the summary waits seconds for imports."""
    if settings.executor == "local":
        from stages.score.parent.launcher import start_zygote_in_background

        start_zygote_in_background(settings.python_binary)
    _import_summary_modules_in_background()


@lru_cache(maxsize=1)
def _import_summary_modules_in_background() -> None:
    def import_them() -> None:
        for name in SUMMARY_MODULES:
            importlib.import_module(name)

    threading.Thread(target=import_them, name="summary-imports", daemon=True).start()


SUMMARY_MODULES = ("stages.summarize.plots", "stages.summarize.report")


def generations_are_current(settings: Settings, problem_id: str) -> bool:
    from stages.generate.stage import generations_current

    return generations_current(settings, problem_id)


def generate_artifacts(settings: Settings, problem_id: str) -> list[ArtifactCheck]:
    from stages.benchmark.problems import problem_by_id
    from stages.generate.stage import generation_fingerprint_parts, generation_path

    def expected(attempt: int) -> Callable[[], FingerprintParts]:
        return lambda: generation_fingerprint_parts(settings, problem_by_id(settings.data_paths, problem_id), attempt)

    return [
        ArtifactCheck(generation_path(settings, problem_id, attempt), "generation", expected(attempt))
        for attempt in range(settings.attempts)
    ]


def generate_reasons(settings: Settings, problem_id: str) -> list[str]:
    from stages.execution.untrusted import shown
    from stages.records.generation import read_generation_file

    lines = []
    for check in generate_artifacts(settings, problem_id):
        generation = read_generation_file(check.path)
        status, error = (generation.status, generation.error) if generation else (None, None)
        if status != "complete":
            lines.append(f"{run_relative(settings, check.path)} has status {status}: {shown(error)}")
    return lines or _no_other_reason(settings, problem_id)


# ---------------------------------------------------------------------------
# score:<id>
# ---------------------------------------------------------------------------


def score_and_count(settings: Settings, problem_id: str) -> dict[str, Any] | TaskFailed | None:
    """`run_score`, its attempt-0 step counts published to the live view.

    One problem never takes the others down: should scoring fail for any reason (a bug included), the failure
    is recorded (`stages.records.not_scored`: the problem is "not scored: <reason>" in every report, unresolved in
    every denominator, and scored again on the next run). When this command runs `summarize`, the task then
    succeeds for doit, which runs no task whose dependency failed: the reporter still shows it as failed (it
    reads the failure from the live view's activity), and the summary's task fails naming it. Otherwise the
    task fails with that reason."""
    from stages.execution import live_processes
    from stages.execution.activity import ACTIVITY
    from stages.pipeline.command_line import runs_summary
    from stages.records import not_scored
    from stages.score.parent.stage import run_score

    try:
        outcome = run_score(settings, problem_id)
    except live_processes.RunInterrupted:
        raise
    except Exception as error:  # noqa: BLE001 - any failure of one problem's scoring is that problem's outcome
        if live_processes.stopping():
            raise
        failure = not_scored.record(settings.run_paths, problem_id, error)
        ACTIVITY.add_not_scored(problem_id, failure.line, failure.detail)
        return None if runs_summary(sys.argv[1:]) else TaskFailed(failure.line)
    ACTIVITY.add_scored(problem_id, outcome["passed"], outcome["scored"])
    return outcome


def score_is_current(settings: Settings, problem_id: str) -> bool:
    """Whether `details/<id>.json` carries the current score fingerprint (nothing published)."""
    from stages.score.parent.stage import score_fingerprint
    from stages.storage.artifacts import is_current

    return is_current(settings.run_paths.details(problem_id), "details", score_fingerprint(settings, problem_id))


def rescore_wanted(rescore: str, details: Details) -> bool:
    """`rescore=true`: every problem is scored again; `rescore=timeouts`: the problems with a timeout verdict."""
    if rescore == "true":
        return True
    return rescore == "timeouts" and details.has_status("timeout")


def details_current(settings: Settings, problem_id: str) -> bool:
    """Whether `details/<id>.json` is up to date; an up-to-date problem's step counts go to the live view."""
    from stages.execution.activity import ACTIVITY
    from stages.records.details import current_details
    from stages.score.parent.stage import score_fingerprint

    details = current_details(settings.run_paths.details(problem_id), score_fingerprint(settings, problem_id))
    if details is None or rescore_wanted(settings.rescore, details):
        return False
    evaluation = details.attempts[0].evaluation
    ACTIVITY.add_scored(problem_id, evaluation.total_correct, evaluation.total_steps)
    return True


def score_artifacts(settings: Settings, problem_id: str) -> list[ArtifactCheck]:
    from stages.score.parent.stage import score_fingerprint_parts

    return [
        ArtifactCheck(
            settings.run_paths.details(problem_id), "details", lambda: score_fingerprint_parts(settings, problem_id)
        )
    ]


# ---------------------------------------------------------------------------
# summarize
# ---------------------------------------------------------------------------


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

    paths = settings.run_paths
    try:
        read_selection(paths)
    except ResultsError:
        return [f"no readable {run_relative(settings, paths.selection)} (select runs first)"]
    summary = read_summary_file(paths.summary_json)
    plots = summary.plots if summary else ()
    expected = [paths.summary_md, paths.report_html, *(paths.run_dir / plot for plot in plots)]
    missing = [run_relative(settings, path) for path in expected if not path.is_file()]
    failure = run_failure(settings)
    return ([f"missing: {', '.join(missing)}"] if missing else []) + (
        [f"the run has failures, so it is never up to date ({failure})"] if failure is not None else []
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
            f"stage the official test_data.h5 in {settings.data_paths.scicode_dir} or set h5py_file="
        )
    return TaskFailed("; ".join(parts) + "; the summary counts them as unresolved")


# ---------------------------------------------------------------------------
# The stages, and why a task will run
# ---------------------------------------------------------------------------

DOWNLOAD = TaskKind("download", run_download, download_is_current, download_artifacts)
SELECT = TaskKind("select", run_select, selection_is_current, select_artifacts)
TARGETS = TaskKind("targets", run_targets, targets_are_available, targets_artifacts, targets_reasons)
PREFLIGHT = TaskKind("preflight", run_preflight, nothing_to_run, other_reasons=preflight_reasons)
GENERATE = TaskKind(
    "generate", run_generate, generations_are_current, generate_artifacts, generate_reasons, per_problem=True
)
SCORE = TaskKind("score", score_and_count, details_current, score_artifacts, per_problem=True)
SUMMARIZE = TaskKind("summarize", summarize_and_report, summary_is_up_to_date, summarize_artifacts, summarize_reasons)
STAGES: dict[str, TaskKind] = {
    stage.name: stage for stage in (DOWNLOAD, SELECT, TARGETS, PREFLIGHT, GENERATE, SCORE, SUMMARIZE)
}


class UnknownTask(ValueError):
    """A task name `explain` cannot explain; one line naming the allowed names."""


def stage_and_key(task: str) -> tuple[TaskKind, ProblemKey]:
    """`score:10` -> (SCORE, ("10",)); `select` -> (SELECT, ())."""
    name, _, problem_id = task.partition(":")
    stage = STAGES.get(name)
    allowed = ", ".join(f"{s.name}:<id>" if s.per_problem else s.name for s in STAGES.values())
    if stage is None or stage.per_problem != bool(problem_id):
        raise UnknownTask(f"cannot explain task {task!r}; allowed: {allowed}")
    return stage, ((problem_id,) if problem_id else ())


def explain(settings: Settings, task: str) -> str:
    """One line: whether `task` is up to date and, if not, which named parts changed since its artifact was written."""
    from stages.benchmark.problems import ProblemDataError

    stage, key = stage_and_key(task)
    try:
        if stage.is_up_to_date(settings, *key):
            return f"{task} is up to date"
        checks = stage.artifacts(settings, *key)
        reasons = [line for check in checks for line in check.reasons(settings, named=len(checks) > 1)]
    except ProblemDataError as error:
        return f"{task} will run: its problem data cannot be read yet ({error})"
    return f"{task} will run: {'; '.join(reasons or stage.other_reasons(settings, *key))}"
