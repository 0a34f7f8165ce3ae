"""The `preflight` task kind: the checks before anything runs, up to date when nothing will run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stages.config.command_line import invoked
from stages.config.task_kind import TaskKind

if TYPE_CHECKING:
    from stages.config.settings import Settings


def run_preflight(settings: Settings) -> None:
    """The checks before anything runs, one line each: the Dask scheduler when scores will run on it, the endpoint
    when a model will be called (stages.preflight.endpoint), the sandbox and the targets, then python_binary's
    environment when something will run in it (stages.preflight.checks)."""
    from stages.preflight.checks import check_before_generation, check_before_running
    from stages.preflight.endpoint import check_endpoint, check_scheduler, preflight_line

    command_line = invoked()
    only_generation = command_line.generation_only
    lines: list[str] = []
    if remote_scores_pending(settings):
        lines += [line for line in (check_scheduler(settings),) if line]
    pending = problems_to_generate(settings)
    if pending and not command_line.rescore_only:
        lines += check_endpoint(settings)
    if pending:
        lines += check_before_generation(settings, only_generation)
    for line in lines + check_before_running(settings, only_generation):
        print(preflight_line(f"preflight: {line}"))


def remote_scores_pending(settings: Settings) -> bool:
    """True when this command will score some problem on a Dask scheduler= (whose reachability is then checked)."""
    from stages.score.task import score_is_current
    from stages.select.stage import selected_problem_ids

    if settings.executor != "dask" or not settings.scheduler or invoked().generation_only:
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
    from stages.score import score_fingerprint
    from stages.select.stage import selected_problem_ids

    selected = selected_problem_ids(settings)
    if selected is None:
        return None
    if invoked().generation_only:
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


PREFLIGHT = TaskKind("preflight", run_preflight, nothing_to_run, other_reasons=preflight_reasons)
