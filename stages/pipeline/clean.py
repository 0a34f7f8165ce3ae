"""`doit clean`: remove a run's derived outputs; generations (which cost money) only when named and confirmed.

- `doit clean` (the default task, summarize): details/, not_scored/ and the summaries, plots, report and export of
  the full run and of every view the folder holds records of, by the exact names the pipeline writes
  (`RunPaths.derived_outputs`); a file of the researcher's own beside them is never touched.
- `doit clean score` / `score:<id>`: the details file(s) of those problems (and their not-scored records).
- `doit clean generate` / `generate:<id>`: the generation files of those problems (every attempt), only when the
  command line names the run (`model=` / `run=`) and says `confirm=true`; otherwise nothing is removed and one line
  names the run folder, the number of paid answers in it and the command that would remove them. `doit clean -a`
  keeps them and says so.

A symbolic link where the pipeline writes a file or folder is unlinked, never followed. A path that cannot be
removed (a read-only folder, an immutable file) stops the clean with one line and exit code 5.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from stages.config.command_line import invoked
from stages.config.run_command import clean_generations_command, names_run
from stages.config.settings import Settings
from stages.exit_codes import CONFIG_ERROR, UNWRITABLE
from stages.pipeline.doit_adapter import command_line_variables
from stages.pipeline.interrupts import exit_now


def _remove(path: Path) -> bool:
    """Remove a file, a folder, or a symbolic link itself (never what it points to); False when absent."""
    if path.is_symlink():
        path.unlink()
        return True
    if path.is_dir():
        shutil.rmtree(path)
        return True
    if path.exists():
        path.unlink()
        return True
    return False


def _stop(line: str, code: int) -> None:
    """One line on stderr and exit `code` (doit would print a traceback for an exception and exit 0). doit captures
    a clean action's sys.stderr and never shows it, so the line goes to the process's own stderr."""
    import sys

    print(f"scicode: {line}", file=sys.__stderr__)
    exit_now(code)


def _removed(path: Path) -> bool:
    try:
        return _remove(path)
    except OSError as error:
        inside = f" ({error.filename})" if error.filename and Path(error.filename) != path else ""
        _stop(
            f"cannot clean {path}: {error.strerror or error}{inside} (nothing after it was removed; make the folder "
            "writable and run the clean again)",
            UNWRITABLE.code,
        )
        return False


def _removed_line(paths: Sequence[Path], what: str) -> None:
    removed = [path for path in paths if _removed(path)]
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
    own = paths.view_outputs()
    return [path for pid in problem_ids for path in (paths.details(pid), paths.not_scored(pid))] + own


def clean_derived(settings: Settings, subset_ids: Callable[[Settings], Sequence[str]]) -> None:
    """`doit clean`: the derived outputs of the run, or of the subset whose problems `subset_ids` finds (asked only
    when the clean runs; see `derived_outputs`)."""
    _removed_line(derived_outputs(settings, subset_ids(settings)), f"derived outputs of {settings.run_paths.run_dir}")
    generations = settings.run_paths.generations_dir
    if not invoked().names_generate and any(generations.glob("*.json")):
        print(
            f"clean: generations kept in {generations} (model calls cost money): "
            f"`{clean_generations_command(settings)}` removes them"
        )


def clean_details(settings: Settings, problem_id: str) -> None:
    paths = settings.run_paths
    _removed_line([paths.details(problem_id), paths.not_scored(problem_id)], f"details of problem {problem_id}")


def generation_files(settings: Settings, problem_id: str) -> list[Path]:
    return settings.run_paths.generation_files(problem_id)


def confirmed_generation_clean(settings: Settings) -> bool:
    """Whether this command may remove generations: it names the run (`model=` / `run=`) and says `confirm=true`."""
    return settings.confirm and names_run(command_line_variables())


def answers_named(settings: Settings) -> tuple[int, int]:
    """(generation files, problems) the `generate` tasks named on the clean command line hold in the run folder:
    every problem's for `generate`, else those of the `generate:<id>` names."""
    folder = settings.run_paths.generations_dir
    named = [word.split(":", 1)[1] for word in invoked().words if word.startswith("generate:")]
    if "generate" in invoked().words or not named:
        files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    else:
        files = [path for problem_id in named for path in settings.run_paths.generation_files(problem_id)]
        files = [path for path in files if path.parent == folder]
    problems = {path.stem.split("@", 1)[0] for path in files}
    return len(files), len(problems)


def refuse_generation_clean(settings: Settings) -> None:
    """Remove nothing: one line naming the run folder, its paid answers and the command that removes them; exit 3."""
    files, problems = answers_named(settings)
    given = names_run(command_line_variables())
    why = "confirm=true is missing" if given else "the command names no run (model= / run=) and has no confirm=true"
    tasks = [word for word in invoked().words if word == "generate" or word.startswith("generate:")]
    task = tasks[0] if len(tasks) == 1 else "generate"
    _stop(
        f"clean generate removed nothing: {why}; run folder {settings.run_paths.run_dir} holds {files} generation "
        f"file(s) of {problems} problem(s) (paid model answers); to remove them: `{clean_generations_command(settings, task)}`",
        CONFIG_ERROR.code,
    )


def clean_generations(settings: Settings, problem_id: str) -> None:
    """Remove the problem's generation files when `generate` was named and the removal confirmed (else one line
    and nothing removed, `refuse_generation_clean`). Once no generation is left, the folder's identity goes too:
    its next run records the configuration it is run with (stages/generate/identity.py)."""
    from stages.generate.identity import forget_identity

    if not invoked().names_generate:
        return
    if not confirmed_generation_clean(settings):
        refuse_generation_clean(settings)
        return
    _removed_line(generation_files(settings, problem_id), f"generations of problem {problem_id}")
    if not any(settings.run_paths.generations_dir.glob("*.json")) and forget_identity(settings):
        print(f"clean: removed the run identity of {settings.run_paths.run_dir} (no generation is left)")


def says_no_generation(settings: Settings) -> bool:
    """Whether this is `doit clean generate` on a folder without generations (no problem's action runs)."""
    folder = settings.run_paths.generations_dir
    return invoked().names_generate and not (folder.is_dir() and any(folder.glob("*.json")))


def say_when_no_generation(settings: Settings) -> None:
    """`doit clean generate` on a folder without generations: one line saying so."""
    if says_no_generation(settings):
        print(f"clean: run folder {settings.run_paths.run_dir} holds no generation (nothing to remove)")


def removes(name: str, settings: Settings, problem_id: str) -> bool:
    """Whether the `doit clean` action `name` of this problem would act on a file (see `clean_actions`): an
    unconfirmed clean of generations acts too, to refuse with one line."""
    paths = settings.run_paths
    command_line = invoked()  # a plain `doit clean` removes every details file through summarize's clean, at once
    if name == "clean_generations":
        return command_line.names_generate and any(path.exists() for path in generation_files(settings, problem_id))
    return command_line.names_score and any(
        path.exists() for path in (paths.details(problem_id), paths.not_scored(problem_id))
    )
