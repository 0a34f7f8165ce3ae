"""A run folder's identity pins its configuration only once it holds an answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stages.config.settings import Settings, load_settings
from stages.generate.identity import check_identity, recorded_identity


def settings_in(folder: Path, **values: str) -> Settings:
    return load_settings({"model": "m", "mode": "naive", **values}, cwd=folder)


def identity_of(settings: Settings) -> dict[str, Any]:
    """The identity recorded for the run folder of `settings`, which must have one."""
    recorded = recorded_identity(settings)
    assert recorded is not None
    return recorded


def test_a_folder_without_generations_takes_the_new_configuration(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    first = settings_in(tmp_path, api_protocol="openai-responses")
    assert check_identity(first, record=True) is None
    assert identity_of(first)["api_protocol"] == "openai-responses"
    # the first run stopped before any answer (e.g. in the endpoint preflight): nothing pins the folder yet
    second = settings_in(tmp_path, api_protocol="openai-chat")
    assert check_identity(second, record=True) is None
    assert identity_of(second)["api_protocol"] == "openai-chat"


def test_a_folder_with_a_generation_refuses_another_configuration(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    first = settings_in(tmp_path, api_protocol="openai-chat")
    assert check_identity(first, record=True) is None
    first.run_paths.generations_dir.mkdir(parents=True)
    (first.run_paths.generations_dir / "1.json").write_text("{}")
    found = check_identity(settings_in(tmp_path, api_protocol="openai-responses"), record=True)
    assert found is not None and [name for name, _, _ in found.changes] == ["api_protocol"]
    assert identity_of(first)["api_protocol"] == "openai-chat"


@pytest.mark.parametrize("record", [True, False])
def test_the_same_configuration_is_no_difference(tmp_path: Path, monkeypatch, record: bool) -> None:
    monkeypatch.chdir(tmp_path)
    settings = settings_in(tmp_path)
    check_identity(settings, record=True)
    settings.run_paths.generations_dir.mkdir(parents=True)
    (settings.run_paths.generations_dir / "1.json").write_text("{}")
    assert check_identity(settings_in(tmp_path), record=record) is None
