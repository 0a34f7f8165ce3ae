"""`doit clean`: remove a run's derived outputs; generations (which cost money) only when named.

- `doit clean` (the default task, summarize): details/, not_scored/, summary*.md/.json, plots*/, report*.html of
  the run.
- `doit clean score` / `score:<id>`: the details file(s) of those problems (and their not-scored records).
- `doit clean generate` / `generate:<id>`: the generation files of those problems (every attempt). Only when
  `generate` is named on the command line; `doit clean -a` keeps them and says so.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from stages.config.command_line import invoked
from stages.config.settings import Settings


def _remove(path: Path) -> bool:
    if path.is_dir():
        shutil.rmtree(path)
        return True
    if path.exists():
        path.unlink()
        return True
    return False


def _removed_line(paths: Sequence[Path], what: str) -> None:
    removed = [path for path in paths if _remove(path)]
    if removed:
        print(f"clean: removed {what}: {', '.join(_name(path) for path in removed)}")


def _name(path: Path) -> str:
    """`details/3.json` for a problem's file, `summary.md` for a run file."""
    return (
        f"{path.parent.name}/{path.name}" if path.parent.name in ("details", "not_scored", "generations") else path.name
    )


def derived_outputs(settings: Settings, problem_ids: Sequence[str] = ()) -> list[Path]:
    """The full run: its details, summaries, plots and reports (every selection's, see Settings.summary_tag). A
    subset (`sample_ids=` / `category=` on the clean command line): the details of its problems (`problem_ids`) and its own
    summary, plots, report and export, so cleaning a view leaves the rest of the run as it was."""
    paths = settings.run_paths
    if not paths.summary_tag:
        return paths.derived_outputs()
    own = [paths.summary_md, paths.summary_json, paths.plots_dir, paths.report_html, paths.export_dir]
    return [path for pid in problem_ids for path in (paths.details(pid), paths.not_scored(pid))] + own


def clean_derived(settings: Settings, subset_ids: Callable[[Settings], Sequence[str]]) -> None:
    """`doit clean`: the derived outputs of the run, or of the subset whose problems `subset_ids` finds (asked only
    when the clean runs; see `derived_outputs`)."""
    _removed_line(derived_outputs(settings, subset_ids(settings)), f"derived outputs of {settings.run_paths.run_dir}")
    generations = settings.run_paths.generations_dir
    if not invoked().names_generate and any(generations.glob("*.json")):
        print(f"clean: generations kept in {generations} (model calls cost money): `doit clean generate` removes them")


def clean_details(settings: Settings, problem_id: str) -> None:
    paths = settings.run_paths
    _removed_line([paths.details(problem_id), paths.not_scored(problem_id)], f"details of problem {problem_id}")


def generation_files(settings: Settings, problem_id: str) -> list[Path]:
    return settings.run_paths.generation_files(problem_id)


def clean_generations(settings: Settings, problem_id: str) -> None:
    """Remove the problem's generation files when `generate` was named; else keep them (they cost money:
    `clean_derived` says so once). Once no generation is left, the folder's identity goes too: its next run
    records the configuration it is run with (stages/generate/identity.py)."""
    from stages.generate.identity import forget_identity

    if invoked().names_generate:
        _removed_line(generation_files(settings, problem_id), f"generations of problem {problem_id}")
        if not any(settings.run_paths.generations_dir.glob("*.json")) and forget_identity(settings):
            print(f"clean: removed the run identity of {settings.run_paths.run_dir} (no generation is left)")


def removes(name: str, settings: Settings, problem_id: str) -> bool:
    """Whether the `doit clean` action `name` of this problem would remove a file (see `clean_actions`)."""
    paths = settings.run_paths
    command_line = invoked()  # a plain `doit clean` removes every details file through summarize's clean, at once
    if name == "clean_generations":
        return command_line.names_generate and any(path.exists() for path in generation_files(settings, problem_id))
    return command_line.names_score and any(
        path.exists() for path in (paths.details(problem_id), paths.not_scored(problem_id))
    )
