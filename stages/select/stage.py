"""select stage: the ordered problems of a run (split, category, sample_ids) and the run's config.json."""

from __future__ import annotations

import platform

from stages.benchmark.categories import allowed_names_text, table_digest, unknown_names
from stages.benchmark.datasets import Dataset
from stages.benchmark.problems import Problem
from stages.config.fingerprints import FingerprintParts, digest, settings_slice
from stages.config.settings import ConfigError, Settings
from stages.errors import PipelineError
from stages.execution.confinement import check_confinement
from stages.execution.versions import package_versions
from stages.records.manifest import read_manifest_file
from stages.records.results import cached_selection
from stages.records.selection import KIND, LayoutStep, Selection, SelectionEntry, StepLayout
from stages.records.stamp import Stamp
from stages.storage.artifacts import fingerprint, write_artifact
from stages.storage.json_values import JSONObject, JSONValue

VERSIONED_PACKAGES: tuple[str, ...] = ("doit", "openai", "numpy", "scipy", "sympy", "h5py")


def select_problems(settings: Settings) -> tuple[Problem, ...]:
    """The selected problems in official order; ConfigError for an unknown id or an empty selection."""
    candidates = settings.benchmark.problems(settings.split)
    _check_sample_ids(settings, candidates)
    _check_categories(settings, candidates)
    view = settings.view
    chosen = tuple(problem for problem in candidates if view.selects(problem.problem_id, problem.taxonomy))
    if not chosen:
        raise ConfigError(
            f"empty selection: no problem of split={settings.split} matches "
            f"category={','.join(settings.category)} sample_ids={','.join(settings.sample_ids) or '(all)'}"
        )
    return chosen


def _check_sample_ids(settings: Settings, candidates: tuple[Problem, ...]) -> None:
    known = {problem.problem_id for problem in candidates}
    unknown = [pid for pid in settings.sample_ids if pid not in known]
    if unknown:
        raise ConfigError(
            f"invalid sample_ids: problem id {unknown[0]} is not in split={settings.split} "
            f"(known ids: {_id_range(known)})"
        )


def _check_categories(settings: Settings, candidates: tuple[Problem, ...]) -> None:
    if settings.categories is None:
        return
    known = [problem.taxonomy for problem in candidates]
    unknown = unknown_names(settings.categories, known)
    if unknown:
        raise ConfigError(
            f"invalid category={unknown[0]}: expected all, or one or more (any case) of the {allowed_names_text(known)}"
        )


def _id_range(ids: set[str]) -> str:
    ordered = sorted(ids, key=lambda pid: (len(pid), pid))
    return ", ".join(ordered) if len(ordered) <= 12 else f"{', '.join(ordered[:6])}, ..., {', '.join(ordered[-3:])}"


LAYOUT_FORMAT = 1  # how a problem's step layout is recorded (`step_layout`); a change makes every selection stale


def selection_fingerprint(settings: Settings) -> str:
    """What selection.json must carry to be current: the select settings, the problem files' identity, the
    category table's, and what decides each problem's step layout (the prefilled steps, the layout format)."""
    return selection_fingerprint_parts(settings).value


def selection_fingerprint_parts(settings: Settings) -> FingerprintParts:
    """`selection_fingerprint` and what it covers by named part (settings slice, problem files, category table,
    step layout rules)."""
    problems, categories = _problem_files_identity(settings), table_digest()
    layout = _layout_identity(settings.benchmark.dataset)
    value = fingerprint(
        {"settings": settings.fingerprint("select"), "problems": problems, "categories": categories, "layout": layout}
    )
    files = {name: sha[:16] for name, sha in problems.items()} if problems is not None else {"manifest.json": None}
    return FingerprintParts(
        value,
        settings=settings_slice(settings, "select"),
        inputs={**files, "category table": categories[:16]},
        code={"step layout": digest(layout)},
    )


def _layout_identity(dataset: Dataset) -> dict[str, int | list[str]]:
    """What decides which problems and steps a selection holds besides the files: the layout format, the prefilled
    steps, and (for a dataset that has them) the problems never selected."""
    identity: dict[str, int | list[str]] = {"format": LAYOUT_FORMAT, "prefilled": sorted(dataset.prefilled_steps)}
    if dataset.excluded_problems:
        identity["excluded"] = sorted(dataset.excluded_problems)
    return identity


def _problem_files_identity(settings: Settings) -> dict[str, str] | None:
    manifest = read_manifest_file(settings.benchmark.record_path)
    if manifest is None:
        return None
    return {name: entry.sha256 for name, entry in sorted(manifest.by_name.items()) if name.endswith(".jsonl")}


def config_fingerprint(settings: Settings) -> str:
    return fingerprint(settings.redacted())


def config_fingerprint_parts(settings: Settings) -> FingerprintParts:
    """config.json covers every setting (as shown, secrets redacted)."""
    shown = settings.redacted()
    return FingerprintParts(fingerprint(shown), settings=shown)


def library_versions(settings: Settings) -> dict[str, str]:
    return {
        "python": platform.python_version(),
        "python_binary": settings.python_binary,
        **package_versions(VERSIONED_PACKAGES),
    }


def write_run_config(settings: Settings) -> JSONObject:
    """config.json: every resolved setting (secrets redacted) and each stage's fingerprint."""
    record: JSONObject = {
        **config_fingerprint_parts(settings).record(),
        "status": "complete",
        "settings": settings.redacted(),
        "stage_fingerprints": {
            stage: settings.fingerprint(stage) for stage in ("download", "select", "generate", "score")
        },
        "versions": dict(library_versions(settings)),
        "confinement": check_confinement("auto", settings.python_binary),
    }
    return write_artifact(settings.run_paths.config, "config", record)


def step_layout(problem: Problem) -> list[JSONValue]:
    """Every step of the problem in order, marked prefilled (official code, not scored) or not."""
    return [step.to_record() for step in _layout(problem)]


def _layout(problem: Problem) -> StepLayout:
    return tuple(LayoutStep(step.step_id, step.prefilled) for step in problem.steps)


def selection_entry(problem: Problem) -> SelectionEntry:
    """One selected problem as selection.json records it: what later stages need without the problem files."""
    return SelectionEntry(
        problem_id=problem.problem_id,
        split=problem.split,
        category=problem.category,
        fingerprint=problem.fingerprint,
        steps=len(problem.steps),
        scored_steps=len(problem.scored_steps),
        layout=_layout(problem),
        field=problem.field,
        subfield=problem.subfield,
    )


def run_select(settings: Settings) -> JSONObject:
    """Write `<run>/selection.json` and `<run>/config.json`; returns the selection record."""
    problems = select_problems(settings)
    parts = selection_fingerprint_parts(settings)
    selection = Selection(
        split=settings.split,
        category=tuple(settings.category),
        sample_ids=tuple(settings.sample_ids),
        entries=tuple(selection_entry(problem) for problem in problems),
        stamp=Stamp.of(parts),
        dataset=settings.dataset,
        problems_md5=settings.benchmark.problems_md5(),
    )
    write_run_config(settings)
    return write_artifact(settings.run_paths.selection, KIND, selection.to_record())


def current_selection(settings: Settings) -> Selection | None:
    """The run's selection.json when it is current; None when it is missing or stale."""
    selection = cached_selection(settings.run_paths)
    if selection is None or selection.fingerprint != selection_fingerprint(settings):
        return None
    return selection


def selected_problem_ids(settings: Settings) -> list[str] | None:
    """The problem ids of a current selection.json; None when it is missing or stale."""
    selection = current_selection(settings)
    return None if selection is None else [entry.problem_id for entry in selection.entries]


def selected_entries(settings: Settings) -> tuple[SelectionEntry, ...]:
    """The entries of a current selection.json (ids, split, step layout); empty when it is missing or stale."""
    selection = current_selection(settings)
    return () if selection is None else selection.entries


def viewed_problem_ids(settings: Settings) -> list[str]:
    """For list, info, forget, clean, ...: the problems the command line's own split/category/sample_ids select,
    read from the problem files when that selection was never written (only a subset ran), so a subset run never
    changes what these commands see. Empty when the problem files are not there yet or the selection is invalid."""
    try:
        return [problem.problem_id for problem in select_problems(settings)]
    except (PipelineError, OSError, ValueError):
        return []
