"""Finding a run's summary files: a run of a subset (sample_ids, category) or of several attempts writes
`summary-<tag>.json/.md` beside the full run's `summary.json/.md` (Settings.summary_tag)."""

from __future__ import annotations

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
