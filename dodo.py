"""doit wiring of the SciCode pipeline: download -> targets -> select -> generate:<id> -> score:<id> -> summarize.

Wiring only: every action is one public function of a module in `stages/`. A task is up to date when its
artifact exists, validates and carries the expected fingerprint (so deleting the doit database or a
SIGTERM never re-bills a model call).

Why one creator yields both `generate:<id>` and `score:<id>`: doit 0.37 links a `task_dep` across
delayed creators only when the dependency's creator has already run, so with one creator per stage
`score` had to be created after all of `generate` executed, and no problem was scored before the last
one was generated. Created together (after `select`), `score:<id>` depends on `generate:<id>` by name
and runs as soon as that problem's generation ends, while other problems are still being generated.
The problems are yielded slowest-to-score first (pinned reference durations, then the verdict cache's
last durations), which is also the order in which doit starts them; `run_generate_attempts` admits
`concurrency` problems at once in that order, and doit gets one thread per problem the run can select
(`wiring.worker_threads`), so a finished generation never waits for a thread to be scored.

For `doit run` the creator declares `creates=["generate", "score"]`, so `doit score:10` or
`doit generate` finds its tasks. doit never calls a creator with `creates` for commands that do not run
tasks, so for `list`, `info`, `forget`, `clean`, ... the creator is left undeclared and doit calls it
eagerly: those commands see every sub-task (the group tasks are yielded first, so both groups exist
even before a selection). `doit score` / `doit score:<id>` alone rescore existing generations: then
`score:<id>` has no dependency on generation, so no model is called.
"""
from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path

from doit import create_after

from stages import wiring
from stages.config import Settings
from stages.paths import STATE_DIR_NAME
from stages.reporter import ProgressReporter

Path(STATE_DIR_NAME).mkdir(exist_ok=True)
wiring.install_interrupt_handling()

DOIT_CONFIG = {
    "backend": "sqlite3",
    "dep_file": f"{STATE_DIR_NAME}/doit.sqlite3",
    "par_type": "thread",
    "num_process": wiring.worker_threads(),
    "continue": True,
    "default_tasks": ["summarize"],
    "reporter": ProgressReporter,
    "verbosity": 2,
}
RESCORE_ONLY = wiring.rescore_only(sys.argv[1:])


@lru_cache(maxsize=1)
def settings() -> Settings:
    return wiring.settings_or_exit()


def task_download():
    """Stage the official SciCode files (and targets when obtainable) under data_dir/scicode."""
    from stages.artifacts import is_current
    from stages.download import download_fingerprint, run_download

    config = settings()
    manifest = config.data_paths.manifest
    return {
        "actions": [wiring.guarded(run_download, config)],
        "targets": [manifest],
        "uptodate": [lambda: is_current(manifest, "manifest", download_fingerprint(config))],
    }


def task_select():
    """Choose the problems of the run (split, category, sample_ids); write selection.json and config.json."""
    from stages.artifacts import is_current
    from stages.select import config_fingerprint, run_select, selection_fingerprint

    config = settings()
    paths = config.run_paths
    return {
        "actions": [wiring.stop_on_config_error(run_select, config)],
        "task_dep": ["download"],
        "targets": [paths.selection, paths.config],
        "uptodate": [
            lambda: is_current(paths.selection, "selection", selection_fingerprint(config))
            and is_current(paths.config, "config", config_fingerprint(config))
        ],
    }


def task_targets():
    """Derive validation targets from reference code when the official test_data.h5 is absent."""
    from stages.targets import derive_targets

    config = settings()
    return {
        "actions": [wiring.guarded(derive_targets, config)],
        "task_dep": ["select", "preflight"],
        "uptodate": [lambda: not wiring.targets_needed(config)],
    }


def task_preflight():
    """Before the first model call: the sandbox answers, the selected steps have targets (one line each)."""
    config = settings()
    return {"actions": [wiring.stop_on_config_error(wiring.run_preflight, config)], "task_dep": ["select"],
            "uptodate": [lambda: wiring.nothing_to_generate(config)]}


@create_after(executed="select", creates=["generate", "score"] if wiring.executes_tasks(sys.argv[1:]) else None)
def task_problems():
    """generate:<id> and score:<id> of every selected problem, slowest to score first (see the module docstring)."""
    from stages.generate.stage import generations_current, run_generate_attempts
    from stages.select import selected_problem_ids

    config = settings()
    wiring.check_requested_problems(config, selected_problem_ids(config))
    yield {"basename": "generate", "name": None,
           "doc": "Ask the model for every step of one problem, `attempts` times (one sub-task per problem)."}
    yield {"basename": "score", "name": None,
           "doc": "Run the official test cases of every step of one problem, isolated (one sub-task per problem)."}
    for problem_id, expected_seconds in wiring.problems_in_generation_order(config):
        yield {
            "basename": "generate",
            "name": problem_id,
            "actions": [wiring.guarded(run_generate_attempts, config, problem_id, expected_seconds)],
            "task_dep": ["preflight"],
            "uptodate": [lambda pid=problem_id: generations_current(config, pid)],
            "clean": [wiring.clean_action("clean_generations", config, problem_id)],
        }
        yield {
            "basename": "score",
            "name": problem_id,
            "actions": [wiring.guarded(wiring.score_and_count, config, problem_id)],
            "task_dep": ["targets"] + ([] if RESCORE_ONLY else [f"generate:{problem_id}"]),
            "targets": [config.run_paths.details(problem_id)],
            "clean": [wiring.clean_action("clean_details", config, problem_id)],
            "uptodate": [lambda pid=problem_id: wiring.details_current(config, pid)],
        }


def task_summarize():
    """Write summary.md, summary.json and plots/ for the run."""
    from stages.summarize import summary_is_current

    config = settings()
    paths = config.run_paths
    return {
        "actions": [wiring.guarded(wiring.summarize_and_report, config)],
        "task_dep": ["score"],
        "targets": [paths.summary_md, paths.summary_json],
        "clean": [wiring.clean_action("clean_derived", config)],
        # A run with failed problems (or failed sandbox) is never "up to date": every rerun says again what failed.
        "uptodate": [lambda: summary_is_current(config) and wiring.run_failure(config) is None],
    }


def task_compare():
    """`doit compare runs=DIR1,DIR2`: a Markdown report of two runs side by side (never a default task)."""
    from stages.compare import write_comparison

    return {
        "actions": [wiring.guarded(write_comparison, settings())],
        "uptodate": [False],
    }
