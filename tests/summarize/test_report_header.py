"""report.html stands alone: the run's whole configuration (secrets redacted), the library versions, the
confinement line, the project's version and commit, the headline intervals and the cost."""

from __future__ import annotations

import html
import re
import subprocess
from pathlib import Path

import pytest

from stages.numbers.provenance import project_record
from stages.select.stage import write_run_config
from stages.summarize.stage import run_summarize
from tests.support.run_artifacts import (
    FIXED_NOW,
    OFFICIAL,
    make_settings,
    selection_entry,
    write_details,
    write_selection,
)

SECRET = "sk-report-header-secret-4b1c"


@pytest.fixture
def priced_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    settings = make_settings(
        tmp_path,
        model_params='{"temperature": 0.2, "extra_headers": {"x-api-key": "' + SECRET + '"}}',
        base_url=f"https://user:{SECRET}@api.example/v1",
        price_input_per_mtok="2.5",
        price_output_per_mtok="10",
    )
    ids = [f"P{n}" for n in range(1, 6)]
    write_selection(settings, [selection_entry(pid, "physics", 2, 2) for pid in ids])
    usage = {"usage": {"input_tokens": 400_000, "output_tokens": 100_000, "total_tokens": 500_000, "calls": 2}}
    for n, pid in enumerate(ids):
        write_details(
            settings, pid, "physics", [(f"{pid}.1", "pass"), (f"{pid}.2", "pass" if n < 2 else "fail")], meta=usage
        )
    write_run_config(settings)
    run_summarize(settings, targets=OFFICIAL, now=FIXED_NOW)
    return settings


def cell(page: str, element_id: str) -> str:
    found = re.search(rf'id="{element_id}"[^>]*>(.*?)</', page, re.S)
    assert found, element_id
    return html.unescape(found.group(1)).strip()


def test_report_header_holds_the_whole_configuration_without_secrets(priced_run) -> None:
    page = priced_run.run_paths.report_html.read_text(encoding="utf-8")
    assert SECRET not in page
    table = page.split('id="settings-table"', 1)[1].split("</table>", 1)[0]
    names = re.findall(r"<tr><td>([a-z0-9_]+)</td>", table)
    assert names == sorted(priced_run.redacted())  # every setting of config.json, in name order
    assert "<td>step_timeout_seconds</td><td><code>1800.0</code>" in table
    assert "&lt;redacted&gt;" in table and "api.example/v1" in table
    versions = page.split('id="versions-table"', 1)[1].split("</table>", 1)[0]
    assert "<td>numpy</td>" in versions and "<td>python</td>" in versions
    assert cell(page, "confinement") not in ("", "unknown (config.json has none)")


def test_report_names_the_project_version_and_commit(priced_run) -> None:
    page = priced_run.run_paths.report_html.read_text(encoding="utf-8")
    project = project_record()
    shown = cell(page, "project-version")
    assert shown.startswith(f"scicode-pipeline {project['version']}")
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent, check=False
    ).stdout.strip()
    if commit:
        assert f"commit {commit}" in shown


def _repository_with_one_commit(folder: Path) -> str:
    identity = ["-c", "user.name=someone", "-c", "user.email=someone@example.invalid"]
    for command in (["init", "-q"], [*identity, "commit", "-q", "--allow-empty", "-m", "one"]):
        subprocess.run(["git", *command], cwd=folder, check=True, capture_output=True)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, check=True, capture_output=True, text=True).stdout


def test_a_package_installed_inside_another_repository_names_no_commit(tmp_path: Path, monkeypatch) -> None:
    """A venv kept inside a user's project: that project's commit is not this package's."""
    from stages.numbers import provenance

    commit = _repository_with_one_commit(tmp_path).strip()
    site_packages = tmp_path / ".venv" / "lib" / "python3" / "site-packages"
    site_packages.mkdir(parents=True)
    monkeypatch.setattr(provenance, "IMPORT_ROOT", site_packages)
    provenance.project_version.cache_clear()
    try:
        assert provenance.project_record()["commit"] is None
        assert provenance.project_record()["dirty"] is None
        monkeypatch.setattr(provenance, "IMPORT_ROOT", tmp_path)  # imported from the top of its checkout
        provenance.project_version.cache_clear()
        assert provenance.project_record()["commit"] == commit
    finally:
        provenance.project_version.cache_clear()


def test_report_headline_has_intervals_and_cost(priced_run) -> None:
    page = priced_run.run_paths.report_html.read_text(encoding="utf-8")
    # 2 of 5 resolved: Wilson [0.117621, 0.769277]
    assert cell(page, "resolve-interval") == "11.8% to 76.9% (Wilson)"
    # steps (2,2) (2,2) (1,2) (1,2) (1,2): N = 10, p = 0.7; sums 0.6, 0.6, -0.4, -0.4, -0.4;
    # V_cl = (0.36 + 0.36 + 3 * 0.16) / 100 = 0.012, below V_bin = 0.21 / 10 = 0.021: deff 1, n_eff 10;
    # Wilson of 7 of 10: centre = (7 + 1.920729) / 13.841459 = 0.644494, half = 0.141601 * sqrt(2.1 + 0.960365)
    # = 0.247715 -> [39.7%, 89.2%]
    assert cell(page, "subproblem-interval") == "39.7% to 89.2% (clustered Wilson, effective n 10.0 of 10 steps)"
    assert "subproblem (and pass@k) the clustered Wilson interval" in cell(page, "intervals-note")
    # 5 problems x (0.4 M in x $2.50 + 0.1 M out x $10.00) = 5 x $2.00 = $10.00
    assert cell(page, "run-cost") == "$10.00"
    assert page.count('<td class="num">$2.00</td>') == 5  # one per problem row of the grid


def test_targets_that_cannot_be_resolved_are_named_without_a_class_name(tmp_path, monkeypatch) -> None:
    import stages.targets
    from stages.config.settings import load_settings
    from stages.summarize.targets_info import resolve_targets_info
    from stages.targets.errors import TargetsError

    def unresolvable(settings):
        raise TargetsError("invalid h5py_file=/nowhere/test_data.h5: no such file")

    monkeypatch.setattr(stages.targets, "resolve_targets", unresolvable)
    info = resolve_targets_info(load_settings({"results_dir": str(tmp_path / "results")}, cwd=tmp_path))
    assert info.note == "targets could not be resolved: invalid h5py_file=/nowhere/test_data.h5: no such file"
