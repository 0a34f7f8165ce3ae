"""A comparison of two runs (`stages.compare.comparison.Comparison`) as Markdown (compare.md) and as a self-contained
HTML page (compare.html) whose flipped problems and steps link to both runs' reports. Folder, model, run and
setting names come from the runs' own files: the Markdown shows them neutralised, in code spans."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from stages.compare.comparison import COMPARED_ATTEMPT, Comparison, Row, StepFlip, differences_line
from stages.compare.paired import PAIRED_NOTE, paired_lines
from stages.execution.untrusted import shown
from stages.numbers.text import CAVEATS_LIMIT
from stages.records.results import OCCASIONAL_STATUSES
from stages.records.status_glossary import GLOSSARY_LINK, VERDICT_ENTRIES
from stages.records.summary import caveats_text
from stages.storage.markdown_table import markdown_table
from stages.storage.paths import RunPaths

NOTED_STATUSES = tuple(entry for entry in VERDICT_ENTRIES if entry.status in OCCASIONAL_STATUSES)
PERCENT_NOTE = f"Percentages are of all steps, skipped ones included (every status: {GLOSSARY_LINK})."
STATUS_NOTE = " ".join(f"`{entry.status}`: {entry.meaning}." for entry in NOTED_STATUSES) + f" {PERCENT_NOTE}"
COST_NOTE = "From each attempt's details meta (usage, latency_s), else from the steps of generations/<id>.json."
DEFINITIONS = (
    "main_problem_resolve_rate: problems whose every scored step passed and whose generation had no error, "
    "over the compared problems. subproblem: passed scored steps over scored steps (micro-averaged; prefilled "
    "steps are not scored). A problem without a valid details file counts as unresolved with none of its steps "
    "passed. pass@k: the unbiased estimator 1 - C(n-c, k)/C(n, k) over n attempts with c resolving ones, "
    "averaged over problems."
)


# ---------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """A table of compare.md through the one Markdown table writer (every column left-aligned)."""
    return markdown_table(header, list(rows), (False,) * len(header), padded=False)


def _identity_lines(rows: Sequence[Row]) -> list[str]:
    cells = [(name, shown(a, markdown=True), shown(b, markdown=True)) for name, a, b in rows[:3]]
    return table(("", "A", "B"), [*cells, *rows[3:]]) + [""]


def _difference_lines(rows: Sequence[Row]) -> list[str]:
    if not rows:
        return []
    cells = [(name, shown(str(a), markdown=True), shown(str(b), markdown=True)) for name, a, b in rows]
    return ["## Settings that differ", ""] + table(("setting", "A", "B"), cells) + [""]


def _scope_lines(notes: Sequence[tuple[str, str]]) -> list[str]:
    marks = {"warning": "**{}**", "item": "- {}", "text": "{}"}
    return [marks[kind].format(text) for kind, text in notes] + [""]


def _delta_table(title: str, header: Sequence[str], rows: Sequence[Row], note: str | None = None) -> list[str]:
    return [f"## {title}", ""] + table(header, rows) + ([""] + [note] if note else []) + [""]


def _attempt_lines(rows: Sequence[Row] | str) -> list[str]:
    lines = ["## Attempts", ""]
    if isinstance(rows, str):
        return lines + [rows, ""]
    return lines + table(("metric", "A", "B", "delta"), rows) + [""]


def _problem_flip_lines(title: str, rows: Sequence[Row]) -> list[str]:
    lines = [f"### {title} ({len(rows)})", ""]
    if not rows:
        return lines + ["(none)", ""]
    return lines + table(("problem", "A steps", "B steps", "first failure where unresolved"), rows) + [""]


def _step_flip_lines(title: str, flips: Sequence[StepFlip]) -> list[str]:
    lines = [f"### {title} ({len(flips)})", ""]
    if not flips:
        return lines + ["(none)", ""]
    return lines + table(("step", "A", "B"), [(f.step_id, f.status_a, f.status_b) for f in flips]) + [""]


def caveat_lines(comparison: Comparison) -> list[str]:
    """`**Caveats of A:** ...` for each run whose summary records caveats, then `**Published setting of A:** ...` for
    each run with a summary (what its summary decided)."""
    sides = (("A", comparison.run_a), ("B", comparison.run_b))
    lines = [
        f"**Caveats of {side}:** {shown(caveats_text(run.caveats), limit=CAVEATS_LIMIT)}"
        for side, run in sides
        if run.caveats
    ]
    lines += [
        f"**Published setting of {side}:** {shown(run.published.text, limit=CAVEATS_LIMIT)}"
        for side, run in sides
        if run.published is not None
    ]
    return [line for pair in zip(lines, [""] * len(lines)) for line in pair]


def comparison_markdown(comparison: Comparison) -> str:
    """compare.md: the significance line, the settings that differ, then the details."""
    c = comparison
    lines = [
        c.paired.first_line,
        "",
        differences_line(c.differences, same_model=c.same_model, markdown=True),
        "",
        f"# Comparison: {shown(c.run_a.label, markdown=True)} (A) vs {shown(c.run_b.label, markdown=True)} (B)",
        "",
    ]
    lines += caveat_lines(c)
    lines += _identity_lines(c.identity)
    lines += _difference_lines(c.differences)
    lines += _scope_lines(c.scope)
    lines += paired_lines(c.paired)
    lines += _delta_table("Metrics", ("metric", "A", "B", "delta"), c.metrics)
    lines += _delta_table("Step statuses", ("status", "A", "B", "delta"), c.statuses, STATUS_NOTE)
    if c.attempts is not None:
        lines += _attempt_lines(c.attempts)
    lines += ["## Problems resolved by one run only", ""]
    lines += _problem_flip_lines("resolved in A, unresolved in B", c.problems_lost)
    lines += _problem_flip_lines("unresolved in A, resolved in B", c.problems_gained)
    lines += ["## Steps passed by one run only", ""]
    lines += _step_flip_lines("pass in A, not pass in B", c.steps_lost)
    lines += _step_flip_lines("not pass in A, pass in B", c.steps_gained)
    lines += _delta_table("Tokens and latency", ("quantity", "A", "B", "delta"), c.cost, COST_NOTE)
    lines += ["## Definitions", "", DEFINITIONS, ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------


def comparison_html(comparison: Comparison, page_dir: Path) -> str:
    """The comparison as a self-contained page; flipped problems and steps link to both runs' reports."""
    from stages.pages.writer import COMPARE_PAGE, problem_anchor, relative_link, render, step_anchor

    reports = {
        side: RunPaths(run.run_dir).written_report() for side, run in (("A", comparison.run_a), ("B", comparison.run_b))
    }

    def links(anchor: str) -> dict[str, str]:
        return {side: relative_link(page_dir, report, anchor) for side, report in reports.items()}

    return render(
        COMPARE_PAGE,
        c=comparison,
        definitions=DEFINITIONS,
        noted_statuses=NOTED_STATUSES,
        percent_note=PERCENT_NOTE,
        cost_note=COST_NOTE,
        paired_note=PAIRED_NOTE,
        reports_present={side: report.is_file() for side, report in reports.items()},
        report_links=links("headline"),
        problem_links={
            row[0]: links(problem_anchor(row[0])) for row in (*comparison.problems_lost, *comparison.problems_gained)
        },
        step_links={
            flip.step_id: links(step_anchor(flip.step_id, COMPARED_ATTEMPT))
            for flip in (*comparison.steps_lost, *comparison.steps_gained)
        },
    )
