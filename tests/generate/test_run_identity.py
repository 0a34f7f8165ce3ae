"""A run folder's identity pins its configuration only once it holds an answer."""

from __future__ import annotations

import json
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


def _answered(settings: Settings) -> None:
    settings.run_paths.generations_dir.mkdir(parents=True, exist_ok=True)
    (settings.run_paths.generations_dir / "1.json").write_text("{}")


def test_another_endpoint_is_a_change_of_configuration(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    first = settings_in(tmp_path, base_url="http://user:secret@127.0.0.1:8080/v1/?key=k2")
    assert check_identity(first, record=True) is None
    assert identity_of(first)["endpoint"] == "http://127.0.0.1:8080/v1"  # no credentials, no query
    _answered(first)
    found = check_identity(settings_in(tmp_path, base_url="http://127.0.0.1:9090/v1"), record=True)
    assert found is not None and [name for name, _, _ in found.changes] == ["endpoint"]
    assert "endpoint_change=resume" in found.refusal() and "secret" not in found.refusal()
    # the same server named with other credentials is the same endpoint
    assert check_identity(settings_in(tmp_path, base_url="http://127.0.0.1:8080/v1"), record=True) is None


def test_endpoint_change_resume_continues_and_takes_the_new_endpoint(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    first = settings_in(tmp_path, base_url="http://127.0.0.1:8080/v1")
    check_identity(first, record=True)
    _answered(first)
    resumed = settings_in(tmp_path, base_url="http://127.0.0.1:9090/v1", endpoint_change="resume")
    assert check_identity(resumed, record=True) is None
    assert identity_of(first)["endpoint"] == "http://127.0.0.1:9090/v1"
    assert check_identity(settings_in(tmp_path, base_url="http://127.0.0.1:9090/v1"), record=True) is None
    # resume lets the endpoint change, never another generation setting
    other = settings_in(
        tmp_path, base_url="http://127.0.0.1:8080/v1", endpoint_change="resume", api_protocol="openai-responses"
    )
    found = check_identity(other, record=True)
    assert found is not None and [name for name, _, _ in found.changes] == ["api_protocol"]


def test_an_identity_from_before_endpoints_takes_the_current_one(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    first = settings_in(tmp_path, base_url="http://127.0.0.1:8080/v1")
    check_identity(first, record=True)
    _answered(first)
    path = first.run_paths.identity
    old = json.loads(path.read_text(encoding="utf-8"))
    del old["settings"]["endpoint"]
    path.write_text(json.dumps(old), encoding="utf-8")
    assert check_identity(settings_in(tmp_path, base_url="http://127.0.0.1:9090/v1"), record=True) is None
    assert identity_of(first)["endpoint"] == "http://127.0.0.1:9090/v1"
    assert check_identity(settings_in(tmp_path, base_url="http://127.0.0.1:8080/v1"), record=True) is not None


def test_built_in_models_have_one_endpoint_whatever_base_url_says(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    first = load_settings({"model": "gold", "base_url": "http://127.0.0.1:1/v1"}, cwd=tmp_path)
    check_identity(first, record=True)
    assert identity_of(first)["endpoint"] == "built-in"
