"""Write `docs/statuses.md`, the statuses page, from the status glossary (`stages.records.status_glossary`).

    python -m scripts.statuses_page [--check] [--page FILE]

`--check` writes nothing and exits 1 when the committed page differs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

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
    parser = argparse.ArgumentParser(description="Write docs/statuses.md from the status glossary.")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when the page is stale")
    parser.add_argument("--page", type=Path, default=PAGE, help=f"the page (default: {PAGE})")
    args = parser.parse_args(argv)
    target: Path = args.page
    page = statuses_page()
    if args.check:
        current = target.read_text(encoding="utf-8") if target.is_file() else ""
        if current != page:
            print(f"{target} is stale: run python -m scripts.statuses_page", file=sys.stderr)
            return 1
        print(f"{target} is current")
        return 0
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(page, encoding="utf-8")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
