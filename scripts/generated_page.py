"""The command line of a docs page generated from declarations: write it, or `--check` that it is current."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def page_main(argv: list[str] | None, *, description: str, default: Path, build: Callable[[], str], module: str) -> int:
    """Write the page `build` makes to `--page` (default `default`); with `--check`, write nothing and exit 1 when
    the page on disk differs, naming `python -m <module>` as the command that brings it up to date."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when the page is stale")
    parser.add_argument("--page", type=Path, default=default, help=f"the page (default: {default})")
    args = parser.parse_args(argv)
    target: Path = args.page
    page = build()
    if args.check:
        current = target.read_text(encoding="utf-8") if target.is_file() else ""
        if current != page:
            print(f"{target} is stale: run python -m {module}", file=sys.stderr)
            return 1
        print(f"{target} is current")
        return 0
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(page, encoding="utf-8")
    print(f"wrote {target}")
    return 0
