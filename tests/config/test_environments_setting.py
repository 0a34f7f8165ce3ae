"""`environments=NAME:PYTHON,...` and `all_environments=`: read into one canonical text, refused with one line,
and part of the score settings only (changing them re-scores, never regenerates)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stages.config.environments import Environment, parse_environments
from stages.config.settings import ConfigError, load_settings


def settings_of(tmp_path: Path, **values: str):
    return load_settings(values, cwd=tmp_path)


def test_environments_are_read_in_order_into_one_canonical_text(tmp_path: Path) -> None:
    settings = settings_of(tmp_path, environments=" 2024-era : /v/a/bin/python ,current:python3,")
    assert settings.environments == "2024-era:/v/a/bin/python,current:python3"
    assert settings.grading_environments == (
        Environment("2024-era", "/v/a/bin/python"),
        Environment("current", "python3"),
    )
    assert settings_of(tmp_path).grading_environments == ()
    assert parse_environments(settings.environments) == settings.grading_environments


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("2024-era", "'2024-era' is not NAME:PYTHON"),
        ("a:", "'a:' is not NAME:PYTHON"),
        ("a:/x,a:/y", "environment name 'a' is given twice"),
        ("bad name:/x", "environment name 'bad name' is malformed"),
        (":/x", "environment name '' is malformed"),
    ],
)
def test_a_bad_environments_value_is_one_line_naming_the_part_and_the_form(
    tmp_path: Path, value: str, named: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        settings_of(tmp_path, environments=value)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"invalid environments={value}")
    assert named in message and "expected NAME:PYTHON[,NAME:PYTHON...]" in message


def test_environments_change_the_score_settings_only_and_only_when_set(tmp_path: Path) -> None:
    plain = settings_of(tmp_path)
    one = settings_of(tmp_path, environments="a:/x")
    two = settings_of(tmp_path, environments="a:/x,b:/y")
    every = settings_of(tmp_path, environments="a:/x,b:/y", all_environments="true")
    assert "environments" not in plain.stage_inputs("score")  # artifacts scored before the setting stay current
    assert settings_of(tmp_path, all_environments="true").fingerprint("score") == plain.fingerprint("score")
    scores = {s.fingerprint("score") for s in (plain, one, two, every)}
    assert len(scores) == 4
    assert {s.fingerprint("generate") for s in (plain, one, two, every)} == {plain.fingerprint("generate")}
    assert {s.fingerprint("select") for s in (plain, one, two, every)} == {plain.fingerprint("select")}
    assert every.redacted()["environments"] == "a:/x,b:/y" and every.redacted()["all_environments"] is True
