"""doit wiring of the SciCode pipeline: download -> targets -> select -> generate:<id> -> score:<id> -> summarize.

Wiring only: every task kind is one `TaskKind` of its stage's `task` module (listed in `stages/pipeline/tasks.py`), whose `run(settings, *key)` is the action
and `is_up_to_date(settings, *key)` the check. A task is up to date when its artifact exists, validates and
carries the expected fingerprint (so deleting the doit database or a SIGTERM never re-bills a model call);
each artifact also stores the named parts of that fingerprint, and `doit explain <task>` says which changed.

Why one creator yields both `generate:<id>` and `score:<id>`: doit 0.37 links a `task_dep` across
delayed creators only when the dependency's creator has already run, so with one creator per stage
`score` had to be created after all of `generate` executed, and no problem was scored before the last
one was generated. Created together (after `select`), `score:<id>` depends on `generate:<id>` by name
and runs as soon as that problem's generation ends, while other problems are still being generated.
The problems are yielded in generation order (`stages.execution.scheduling`: the slowest to score first, then in
turns the most test seconds per model answer and the most answers), which is also the order in which doit
starts them; `run_generate_attempts` admits `concurrency` problems at once in that order, and doit gets
one thread per problem the run can select (`wiring.worker_threads`), so a finished generation never waits
for a thread to be scored.

For `doit run` the creator declares `creates=["generate", "score"]`, so `doit score:10` or
`doit generate` finds its tasks. doit never calls a creator with `creates` for commands that do not run
tasks, so for `list`, `info`, `forget`, `clean`, ... the creator is left undeclared and doit calls it
eagerly: those commands see every sub-task (the group tasks are yielded first, so both groups exist
even before a selection). `doit score` / `doit score:<id>` alone rescore existing generations: then
`score:<id>` has no dependency on generation, so no model is called.
"""

from __future__ import annotations

from functools import lru_cache

from doit import create_after

from stages.config.command_line import invoked
from stages.config.settings import Settings
from stages.pipeline import tasks, wiring
from stages.pipeline.interrupts import install_interrupt_handling
from stages.progress.run import RunProgress
from stages.storage.paths import STATE_DIR_NAME

STATE_DATABASE = f"{STATE_DIR_NAME}/doit.sqlite3"
wiring.prepare_state_folder(STATE_DIR_NAME, STATE_DATABASE)
install_interrupt_handling()
wiring.exit_without_final_collection()

DOIT_CONFIG = {
    "backend": "sqlite3",
    "dep_file": STATE_DATABASE,
    "par_type": "thread",
    "num_process": wiring.worker_threads(),
    "continue": True,
    "default_tasks": ["summarize"],
    "reporter": RunProgress,
    "verbosity": 2,
}
COMMAND_LINE = invoked()


@lru_cache(maxsize=1)
def settings() -> Settings:
    return wiring.settings_or_exit()


def task_download():
    """Stage the official SciCode files (and targets when obtainable) under data_dir/scicode."""
    config = settings()
    return {
        "actions": [wiring.stop_on_setup_error(tasks.DOWNLOAD.run, config)],
        "targets": [config.data_paths.manifest],
        "uptodate": [(tasks.DOWNLOAD.is_up_to_date, [config])],
    }


def task_select():
    """Choose the problems of the run (split, category, sample_ids); write selection.json and config.json."""
    config = settings()
    paths = config.run_paths
    return {
        "actions": [wiring.stop_on_config_error(tasks.SELECT.run, config)],
        "task_dep": ["download"],
        "targets": [paths.selection, paths.config],
        "uptodate": [(tasks.SELECT.is_up_to_date, [config])],
    }


def task_targets():
    """Derive validation targets from reference code when the official test_data.h5 is absent."""
    config = settings()
    return {
        "actions": [wiring.guarded(tasks.TARGETS.run, config)],
        "task_dep": ["select", "preflight"],
        "uptodate": [(tasks.TARGETS.is_up_to_date, [config])],
    }


def task_preflight():
    """Before the first model call: the sandbox answers, the selected steps have targets (one line each)."""
    config = settings()
    return {
        "actions": [wiring.stop_on_config_error(tasks.PREFLIGHT.run, config)],
        "task_dep": ["select"],
        "uptodate": [(tasks.PREFLIGHT.is_up_to_date, [config])],
    }


@create_after(executed="select", creates=["generate", "score"] if COMMAND_LINE.executes_tasks else None)
def task_problems():
    """generate:<id> and score:<id> of every selected problem, in generation order (see the module docstring)."""
    from stages.select.stage import selected_problem_ids

    config = settings()
    wiring.check_requested_problems(config, selected_problem_ids(config))
    yield {
        "basename": "generate",
        "name": None,
        "doc": "Ask the model for every step of one problem, `attempts` times (one sub-task per problem).",
        "clean": wiring.group_clean_actions(config),
    }
    yield {
        "basename": "score",
        "name": None,
        "doc": "Run the official test cases of every step of one problem, isolated (one sub-task per problem).",
    }
    for problem_id, admission_priority in wiring.generation_admissions(config):
        yield {
            "basename": "generate",
            "name": problem_id,
            "actions": [wiring.guarded(tasks.GENERATE.run, config, problem_id, admission_priority)],
            "task_dep": ["preflight"],
            "uptodate": [(tasks.GENERATE.is_up_to_date, [config, problem_id])],
            "clean": wiring.clean_actions("clean_generations", config, problem_id),
        }
        yield {
            "basename": "score",
            "name": problem_id,
            "actions": [wiring.guarded(tasks.SCORE.run, config, problem_id)],
            "task_dep": ["targets"] + ([] if COMMAND_LINE.rescore_only else [f"generate:{problem_id}"]),
            "targets": [config.run_paths.details(problem_id)],
            "clean": wiring.clean_actions("clean_details", config, problem_id),
            "uptodate": [(tasks.SCORE.is_up_to_date, [config, problem_id])],
        }


def task_summarize():
    """Write summary.md, summary.json and plots/ for the run."""
    config = settings()
    paths = config.run_paths
    return {
        "actions": [wiring.guarded(tasks.SUMMARIZE.run, config)],
        "task_dep": ["score"],
        "targets": [paths.summary_md, paths.summary_json],
        "clean": [wiring.clean_action("clean_derived", config, wiring.subset_problem_ids)],
        "uptodate": [(tasks.SUMMARIZE.is_up_to_date, [config])],
    }


def task_explain():
    """`doit explain score:10 ...`: whether each named task is up to date, and if not which part changed (never a default task)."""
    return {
        "actions": [wiring.explain_action(settings())],
        "pos_arg": "names",
        "uptodate": [False],
        "verbosity": 2,
    }


def task_runs():
    """`doit runs`: an index of every run under results_dir, runs.md and runs.html (never a default task)."""
    config = settings()
    return {
        "actions": [wiring.guarded(tasks.RUNS.run, config)],
        "uptodate": [(tasks.RUNS.is_up_to_date, [config])],
    }


def task_export():
    """`doit export`: the run's steps as CSV/JSONL and an inspect_ai log under <run>/export/ (never a default task)."""
    config = settings()
    return {
        "actions": [wiring.guarded(tasks.EXPORT.run, config)],
        "uptodate": [(tasks.EXPORT.is_up_to_date, [config])],
    }


def task_environments():
    """`doit environments`: build SciCode-Verified's 2024-era and 2025-era grading environments as venvs and print the `environments=` value (never a default task)."""
    config = settings()
    return {
        "actions": [wiring.guarded(tasks.ENVIRONMENTS.run, config)],
        "uptodate": [(tasks.ENVIRONMENTS.is_up_to_date, [config])],
        "verbosity": 2,
    }


def task_compare():
    """`doit compare runs=DIR1,DIR2`: a Markdown report of two runs side by side (never a default task)."""
    config = settings()
    return {
        "actions": [wiring.guarded(tasks.COMPARE.run, config)],
        "uptodate": [(tasks.COMPARE.is_up_to_date, [config])],
    }
