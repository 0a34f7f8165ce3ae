"""Write `docs/statuses.md`, the statuses page, from the status glossary (`stages.records.status_glossary`).

    python -m scripts.statuses_page [--check] [--page FILE]

`--check` writes nothing and exits 1 when the committed page differs.
"""

from __future__ import annotations

import sys
from pathlib import Path

from scripts.generated_page import page_main
from stages.records.status_glossary import glossary_markdown

PAGE = Path(__file__).resolve().parents[1] / "docs" / "statuses.md"


def statuses_page() -> str:
    """The text of docs/statuses.md."""
    lines = [
        "# Statuses",
        "",
        "Generated from `stages/records/status_glossary.py` by `python -m scripts.statuses_page`; do not edit by hand.",
        "",
        "A *verdict* status is a scored step's, as the step-status tables, the step grid and compare count it "
        "(attempt 1). A *generation* status is a step's in `generations/<id>.json`. Every scored step of every "
        "selected problem is in the denominator of `subproblem`, and every selected problem in that of "
        "`main_problem_resolve_rate`: a problem is resolved when every scored step passed.",
        "",
        *glossary_markdown(),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return page_main(
        argv,
        description="Write docs/statuses.md from the status glossary.",
        default=PAGE,
        build=statuses_page,
        module="scripts.statuses_page",
    )


if __name__ == "__main__":
    sys.exit(main())
