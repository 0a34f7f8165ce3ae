"""Finding a run's summary files, and locking a folder of it: a run of a subset (sample_ids, category) or of several attempts writes
`summary-<tag>.json/.md` beside the full run's `summary.json/.md` (Settings.summary_tag)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def summary_file(run: Path, extension: str = "json") -> Path:
    """The one summary file of `run` with `extension` (`summary.json` or `summary-<tag>.json`)."""
    return _only(run, f"summary*.{extension}")


def report_file(run: Path) -> Path:
    """The one report of `run` (`report.html` or `report-<tag>.html`)."""
    return _only(run, "report*.html")


def config_file(run: Path) -> Path:
    """The config file of the selection that ran last (`config.json` or a subset's `config-<tag>.json`)."""
    return _newest(run, "config*.json")


def selection_file(run: Path) -> Path:
    """The selection file of the selection that ran last (`selection.json` or `selection-<tag>.json`)."""
    return _newest(run, "selection*.json")


def _newest(run: Path, pattern: str) -> Path:
    found = sorted(run.glob(pattern), key=lambda path: path.stat().st_mtime_ns)
    assert found, f"no {pattern} in {run}"
    return found[-1]


def _only(run: Path, pattern: str) -> Path:
    found = sorted(run.glob(pattern))
    assert len(found) == 1, f"expected one {pattern} in {run}, found {[p.name for p in found]}"
    return found[0]


@contextmanager
def locked_folder(folder: Path) -> Iterator[None]:
    """Nothing can be added to or removed from `folder`: immutable for root (who ignores modes, `chattr +i`),
    read-only for anyone else."""
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(folder)], check=True)
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
    else:
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)
