"""Each setting is declared once (`Settings` fields with their `Declared` records); the configuration page,
the coercers, the stage-input lists and summary.md's recorded list are derived from those declarations."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields
from pathlib import Path
from typing import get_type_hints

from scripts.configuration_page import PAGE, configuration_page
from stages.config.declaration import STAGES
from stages.config.settings import (
    COERCERS,
    DECLARED,
    GROUPS,
    OPTIONAL_STAGE_INPUTS,
    RECORDED_SETTINGS,
    STAGE_INPUTS,
    VARIABLES,
    Settings,
)
from stages.storage.json_values import freeze_object

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_configuration_page_is_the_generated_one() -> None:
    assert PAGE == PROJECT_ROOT / "docs" / "configuration.md"
    assert PAGE.read_text(encoding="utf-8") == configuration_page(), (
        "docs/configuration.md is stale: run python -m scripts.configuration_page"
    )


def test_the_page_check_fails_on_a_stale_page_and_passes_on_a_current_one(tmp_path: Path) -> None:
    page = tmp_path / "configuration.md"

    def check() -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "scripts.configuration_page", "--check", "--page", str(page)]
        return subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)

    missing = check()
    assert missing.returncode == 1 and "is stale: run python -m scripts.configuration_page" in missing.stderr
    page.write_text(PAGE.read_text(encoding="utf-8").replace("one code_interpreter execution", "one run"), "utf-8")
    assert check().returncode == 1  # a doc line edited by hand
    page.write_text(configuration_page(), encoding="utf-8")
    current = check()
    assert current.returncode == 0 and "is current" in current.stdout, current.stderr


def test_every_setting_has_one_row_on_the_page_with_its_doc_line() -> None:
    page = configuration_page()
    for name, record in DECLARED.items():
        rows = [line for line in page.splitlines() if line.startswith(f"| `{name}` |")]
        assert len(rows) == 1, name
        assert record.doc.replace("|", "\\|") in rows[0]
        assert record.doc.strip() and record.group in GROUPS


def test_the_coercers_stage_inputs_and_recorded_list_come_from_the_declarations() -> None:
    assert VARIABLES == tuple(item.name for item in fields(Settings))
    assert set(COERCERS) == set(VARIABLES)
    assert all(COERCERS[name] is DECLARED[name].coerce for name in VARIABLES)
    for stage in STAGES:
        assert STAGE_INPUTS[stage] == tuple(name for name in VARIABLES if stage in DECLARED[name].stages)
        assert set(OPTIONAL_STAGE_INPUTS.get(stage, {})) == {
            name for name in VARIABLES if stage in DECLARED[name].stages_when
        }
    assert RECORDED_SETTINGS == tuple(name for name in VARIABLES if DECLARED[name].recorded)
    # The settings whose values may hold a secret are redacted by what their declaration says.
    assert {name for name in VARIABLES if DECLARED[name].secrecy} == {"base_url", "sandbox_url", "model_params"}


def test_every_condition_of_a_declaration_is_a_function_of_the_settings() -> None:
    """A `stages_when` condition is typed over Any in the declaration (which cannot import `Settings` without an
    import circle): each is a function annotated `(settings: Settings) -> bool`, so mypy checks its body."""
    conditions = [condition for name in VARIABLES for condition in DECLARED[name].stages_when.values()]
    assert len(conditions) >= 6
    for condition in conditions:
        assert get_type_hints(condition) == {"settings": Settings, "return": bool}, condition


def test_summary_markdown_records_the_declared_settings() -> None:
    from stages.summarize import markdown, summary_json

    assert vars(summary_json)["RECORDED_SETTINGS"] is RECORDED_SETTINGS  # the name the summary record's module reads
    chosen = summary_json._recorded_settings(
        freeze_object({"executor": "dask", "step_memory_mb": 64, "concurrency": 3})
    )
    text = markdown._recorded_settings_text(chosen)  # summary.md renders what the record chose
    assert text == "step_memory_mb=64, executor=dask"
