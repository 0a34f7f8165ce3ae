"""compare: two runs side by side: paired tests, deltas, and what one run alone passed (`doit compare runs=A,B`).

Numbers come from the details files (summary.json may be stale), counted by the summary's own rows and
metrics (`stages.compare.comparison`). Runs of different splits are refused unless `allow_split_mismatch` is set;
then, as whenever the two selections differ, only the problems selected in both runs are compared and the
comparison says so. Like `list`, `info` and `explain`, compare acts on the `sample_ids`/`category` of its own
command line: given, only those of the problems both runs selected are compared (and the files carry that
selection's tag, never replacing the full comparison); else both runs' whole selections, whatever subset ran
last. Written: compare.md, compare.html beside it, and the record compare.json (`stages.compare.record`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from stages.compare.comparison import (
    CompareError,
    Comparison,
    RunInfo,
    build_comparison,
    check_splits,
    common_problem_ids,
    load_run,
)
from stages.compare.page import comparison_html, comparison_markdown
from stages.compare.record import COMPARE_KIND, ComparisonRecord
from stages.config.settings import Settings
from stages.config.view import View
from stages.storage.artifacts import atomic_write_text, write_artifact
from stages.storage.paths import ResultsPaths

__all__ = ["CompareError", "compare_runs", "resolve_run_dir", "write_comparison"]


# ---------------------------------------------------------------------------
# What the command line narrows the comparison to
# ---------------------------------------------------------------------------


def narrowing_of(settings: Settings) -> View:
    """The view of the command line, one attempt: every problem when it names no sample_ids and no category."""
    return settings.view.of_one_attempt()


def narrowed_ids(run: RunInfo, common: Sequence[str], view: View) -> list[str]:
    """The compared problems among `common` that the command line's view selects."""
    entries = run.entries
    return [pid for pid in common if view.selects(pid, entries[pid].taxonomy)]


# ---------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------


def _compare(run_a: Path, run_b: Path, allow_split_mismatch: bool, view: View) -> Comparison:
    """The comparison of two runs over the problems both selected that `view` selects; each run is read as its
    own selection of that view (`view.tag`)."""
    info_a, info_b = load_run(run_a, view.tag), load_run(run_b, view.tag)
    check_splits(info_a, info_b, allow_split_mismatch)
    selected_in_both = common_problem_ids(info_a, info_b)
    narrowed = view.narrowing
    if narrowed is None:
        return build_comparison(info_a, info_b, selected_in_both)
    common = narrowed_ids(info_a, selected_in_both, view)
    if not common:
        raise CompareError(f"no problem selected in both {info_a.run_dir} and {info_b.run_dir} matches {narrowed}")
    unmatched = [pid for pid in view.sample_ids if pid not in selected_in_both]
    return build_comparison(info_a, info_b, common, narrowed, unmatched)


def compare_runs(
    run_a: Path,
    run_b: Path,
    *,
    allow_split_mismatch: bool = False,
    sample_ids: Sequence[str] = (),
    categories: Sequence[str] | None = None,
) -> str:
    """The Markdown comparison of the runs in folders `run_a` and `run_b` (deltas are B minus A), over the
    problems both selected (only those of `sample_ids` and `categories`, when given)."""
    view = View(tuple(sample_ids), None if categories is None else tuple(categories))
    return comparison_markdown(_compare(Path(run_a), Path(run_b), allow_split_mismatch, view))


def resolve_run_dir(entry: str, results_dir: Path) -> Path:
    """A run folder given as a path, or as `<model>/<run>` under `<results_dir>/scicode/`."""
    given = Path(entry)
    if given.is_dir():
        return given
    under_results = ResultsPaths(Path(results_dir)).named_run(entry)
    return under_results if under_results.is_dir() else given


def write_comparison(settings: Settings) -> Path:
    """Write the comparison of the two runs named by `runs=` (Markdown, an HTML page beside it linking to both
    runs' reports, and the compare.json record) and return the Markdown path (the first two are printed)."""
    if len(settings.runs) != 2:
        raise CompareError(f"invalid runs={','.join(settings.runs)}: expected exactly two run folders, A,B")
    run_a, run_b = (resolve_run_dir(entry, Path(settings.results_dir)) for entry in settings.runs)
    view = narrowing_of(settings)
    tag = view.tag
    comparison = _compare(run_a, run_b, settings.allow_split_mismatch, view)
    results = ResultsPaths(Path(settings.results_dir))
    labels = (comparison.run_a.file_label, comparison.run_b.file_label)
    path = results.comparison(*labels, tag)
    atomic_write_text(path, comparison_markdown(comparison))
    page = results.comparison_page(*labels, tag)
    atomic_write_text(page, comparison_html(comparison, page.parent))
    write_artifact(results.comparison_record(*labels, tag), COMPARE_KIND, ComparisonRecord.of(comparison).to_record())
    print(f"comparison written to {path}")
    print(f"comparison page: {page}")
    return path
