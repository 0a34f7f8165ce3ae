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
from stages.storage.artifacts import atomic_write_text, write_artifact
from stages.storage.paths import ResultsPaths

__all__ = ["CompareError", "compare_runs", "resolve_run_dir", "write_comparison"]


# ---------------------------------------------------------------------------
# What the command line narrows the comparison to
# ---------------------------------------------------------------------------


def narrowing_of(settings: Settings) -> tuple[tuple[str, ...], tuple[str, ...] | None]:
    """(sample_ids, categories) of the command line: empty ids and None for every problem."""
    return tuple(settings.sample_ids), settings.categories


def narrowing_text(sample_ids: Sequence[str], categories: Sequence[str] | None) -> str | None:
    """`sample_ids=1,19 category=x`, or None when nothing narrows the comparison."""
    parts = [f"sample_ids={','.join(sample_ids)}"] if sample_ids else []
    parts += [f"category={','.join(categories)}"] if categories is not None else []
    return " ".join(parts) or None


def view_tag(sample_ids: Sequence[str], categories: Sequence[str] | None) -> str:
    """The summary tag of the view these sample_ids/categories select (Settings.summary_tag, one attempt): the
    run folders' own selection of that view, and the tag of the narrowed comparison's files; "" for none."""
    return Settings(sample_ids=tuple(sample_ids), category=tuple(categories or ("all",))).summary_tag


def narrowed_ids(
    run: RunInfo, common: Sequence[str], sample_ids: Sequence[str], categories: Sequence[str] | None
) -> list[str]:
    """The compared problems among `common` that the command line's sample_ids and categories select."""
    entries = run.entries
    return [
        pid
        for pid in common
        if (not sample_ids or pid in sample_ids)
        and (categories is None or any(entries[pid].taxonomy.matches(name) for name in categories))
    ]


# ---------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------


def _compare(
    run_a: Path,
    run_b: Path,
    allow_split_mismatch: bool,
    sample_ids: Sequence[str] = (),
    categories: Sequence[str] | None = None,
    view: str = "",
) -> Comparison:
    info_a, info_b = load_run(run_a, view), load_run(run_b, view)
    check_splits(info_a, info_b, allow_split_mismatch)
    selected_in_both = common_problem_ids(info_a, info_b)
    narrowed = narrowing_text(sample_ids, categories)
    if narrowed is None:
        return build_comparison(info_a, info_b, selected_in_both)
    common = narrowed_ids(info_a, selected_in_both, sample_ids, categories)
    if not common:
        raise CompareError(f"no problem selected in both {info_a.run_dir} and {info_b.run_dir} matches {narrowed}")
    unmatched = [pid for pid in sample_ids if pid not in selected_in_both]
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
    view = view_tag(sample_ids, categories)
    comparison = _compare(Path(run_a), Path(run_b), allow_split_mismatch, sample_ids, categories, view)
    return comparison_markdown(comparison)


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
    sample_ids, categories = narrowing_of(settings)
    tag = view_tag(sample_ids, categories)
    comparison = _compare(run_a, run_b, settings.allow_split_mismatch, sample_ids, categories, tag)
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
