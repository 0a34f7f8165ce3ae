"""Configuration: precedence, coercion, and one clear line for every invalid input."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import pytest

from stages.config.settings import ConfigError, Settings, load_settings


def test_defaults_with_gold_pick_validation(tmp_path: Path) -> None:
    settings = load_settings({}, cwd=tmp_path)
    assert settings.model == "gold"
    assert settings.split == "validation"
    assert settings.mode == "tool_use"
    assert settings.tool_use_max_loops == 15
    assert settings.with_background is True
    assert settings.python_binary == sys.executable
    assert settings.carry == "full"
    assert settings.run_name == "validation-tool_use-bg"
    assert settings.run_paths.run_dir == Path("results/scicode/gold/validation-tool_use-bg")


def test_real_model_defaults_to_all(tmp_path: Path) -> None:
    settings = load_settings({"model": "gpt-4o-mini", "mode": "naive", "with_background": "false"}, cwd=tmp_path)
    assert settings.split == "all"
    assert settings.run_name == "all-naive-nobg"


def test_non_default_carry_is_in_the_run_name_and_config(tmp_path: Path) -> None:
    settings = load_settings({"carry": "definition"}, cwd=tmp_path)
    assert settings.run_name == "validation-tool_use-bg-carrydef"
    assert settings.run_paths.run_dir == Path("results/scicode/gold/validation-tool_use-bg-carrydef")
    assert load_settings({"carry": "full"}, cwd=tmp_path).run_name == "validation-tool_use-bg"
    assert load_settings({"carry": "definition", "run": "mine"}, cwd=tmp_path).run_name == "mine"
    assert settings.redacted()["carry"] == "definition"


def test_precedence_builtin_toml_blocks_cli(tmp_path: Path) -> None:
    (tmp_path / "scicode.toml").write_text(
        'model = "m-toml"\nconcurrency = 3\nscore_workers = 5\nstep_timeout_seconds = 99\n'
        "[model_params]\ntemperature = 0.5\ntop_p = 0.9\n"
        "[harness_params]\nscore_workers = 6\n",
        encoding="utf-8",
    )
    settings = load_settings(
        {
            "harness_params": json.dumps({"concurrency": 4, "score_workers": 7}),
            "model_params": json.dumps({"temperature": 0.1}),
            "concurrency": "8",
        },
        cwd=tmp_path,
    )
    assert settings.model == "m-toml"  # TOML over built-in
    assert settings.step_timeout_seconds == 99.0
    assert settings.score_workers == 7  # CLI block over TOML block
    assert settings.concurrency == 8  # name=value over CLI block
    assert dict(settings.model_params) == {"temperature": 0.1, "top_p": 0.9}  # deep-merged, CLI wins


def test_explicit_config_file_and_benchmark_params(tmp_path: Path) -> None:
    (tmp_path / "other.toml").write_text('model = "x"\nsplit = "test"\n', encoding="utf-8")
    settings = load_settings(
        {"config": "other.toml", "benchmark_params": '{"sample_ids": ["2", "5"], "with_background": false}'},
        cwd=tmp_path,
    )
    assert settings.split == "test"
    assert settings.sample_ids == ("2", "5")
    assert settings.with_background is False


def test_list_forms(tmp_path: Path) -> None:
    assert load_settings({"sample_ids": "1, 3,10"}, cwd=tmp_path).sample_ids == ("1", "3", "10")
    assert load_settings({"sample_ids": '["1", 3]'}, cwd=tmp_path).sample_ids == ("1", "3")
    assert load_settings({"category": "a,b"}, cwd=tmp_path).categories == ("a", "b")
    assert load_settings({}, cwd=tmp_path).categories is None


@pytest.mark.parametrize(
    ("cli", "message"),
    [
        ({"nonsense": "1"}, "unknown variable 'nonsense' (on the command line); known variables:"),
        ({"split": "train", "model": "m"}, "invalid split=train: expected one of validation, test, all"),
        ({"mode": "agent"}, "invalid mode=agent: expected one of naive, tool_use"),
        ({"api_protocol": "grpc"}, "invalid api_protocol=grpc: expected one of openai-chat, openai-responses"),
        ({"step_timeout_seconds": "abc"}, "invalid step_timeout_seconds=abc: expected a number > 0"),
        ({"step_timeout_seconds": "-1"}, "invalid step_timeout_seconds=-1: expected a number > 0"),
        ({"concurrency": "0"}, "invalid concurrency=0: expected a whole number >= 1"),
        ({"concurrency": "2.5"}, "invalid concurrency=2.5: expected a whole number >= 1"),
        ({"with_background": "maybe"}, "invalid with_background=maybe: expected true or false"),
        ({"carry": "all"}, "invalid carry=all: expected one of full, definition"),
        ({"tool_names": "browser"}, "invalid tool_names=browser: expected a non-empty list of: code_interpreter"),
        ({"model_params": "{bad"}, "invalid model_params={bad: expected a JSON object"),
        ({"model_params": '{"model": "x"}'}, "invalid model_params="),
        ({"harness_params": '{"colour": 1}'}, "unknown variable 'colour' (in harness_params on the command line)"),
        ({"model": "gold", "split": "test"}, "invalid split=test with model=gold"),
        ({"model": "replay:"}, "invalid model=replay:: expected replay:<file.json> naming a JSON file"),
        ({"base_url": "ftp://x"}, "invalid base_url=ftp://x: expected an http://, https:// or file:// URL, or empty"),
        ({"scheduler": "tcp://h:1"}, "invalid scheduler=tcp://h:1: a scheduler needs executor=dask"),
        ({"sample_ids": "1,1"}, "invalid sample_ids: problem id 1 is listed twice"),
        ({"config": "missing.toml"}, "missing.toml: no such file"),
        ({"executor": "ray"}, "invalid executor=ray: expected one of local, dask"),
        ({"attempts": "0"}, "invalid attempts=0: expected a whole number >= 1"),
    ],
)
def test_every_invalid_value_is_one_clear_line(tmp_path: Path, cli: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(cli, cwd=tmp_path)
    text = str(raised.value)
    assert message in text
    assert "\n" not in text


def test_invalid_toml_is_reported(tmp_path: Path) -> None:
    (tmp_path / "scicode.toml").write_text("model = \n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not readable TOML"):
        load_settings({}, cwd=tmp_path)
    (tmp_path / "scicode.toml").write_text("modle = 'x'\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="unknown variable 'modle'"):
        load_settings({}, cwd=tmp_path)


def test_api_key_only_from_environment_and_never_in_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_KEY_VAR", "sk-secret-value")
    settings = load_settings(
        {
            "api_key_env": "MY_KEY_VAR",
            "model": "m",
            "model_params": '{"api_token": "t0k"}',
            "base_url": "https://user:pw@api.example/v1",
        },
        cwd=tmp_path,
    )
    assert settings.api_key == "sk-secret-value"
    redacted = json.dumps(settings.redacted())
    assert "sk-secret-value" not in redacted and "t0k" not in redacted and "pw@" not in redacted
    assert settings.redacted()["api_key_present"] is True
    with pytest.raises(ConfigError, match="unknown variable 'api_key'"):
        load_settings({"api_key": "sk-x"}, cwd=tmp_path)


def test_stage_fingerprints_cover_exactly_their_settings(tmp_path: Path) -> None:
    base = load_settings({"model": "m"}, cwd=tmp_path)
    slower = load_settings({"model": "m", "step_timeout_seconds": "10"}, cwd=tmp_path)
    assert base.fingerprint("score") != slower.fingerprint("score")
    assert base.fingerprint("generate") == slower.fingerprint("generate")
    moved = load_settings({"model": "m", "base_url": "http://127.0.0.1:9/v1", "concurrency": "2"}, cwd=tmp_path)
    assert moved.fingerprint("generate") == base.fingerprint("generate")  # where, not what
    other_mode = load_settings({"model": "m", "mode": "naive"}, cwd=tmp_path)
    assert other_mode.fingerprint("generate") != base.fingerprint("generate")
    assert other_mode.fingerprint("select") == base.fingerprint("select")
    carried = load_settings({"model": "m", "carry": "definition"}, cwd=tmp_path)
    assert carried.fingerprint("generate") != base.fingerprint("generate")
    assert carried.fingerprint("score") != base.fingerprint("score")
    assert carried.fingerprint("select") == base.fingerprint("select")


def test_scratch_limit_is_a_score_setting_and_a_tool_use_generation_setting_only_when_not_default(
    tmp_path: Path,
) -> None:
    from stages.config.settings import STAGE_INPUTS
    from stages.storage.artifacts import fingerprint

    base = load_settings({"model": "m"}, cwd=tmp_path)
    assert base.scratch_limit_mb == 512
    # At its default it is not in the generation fingerprint: generations made before the setting stay current.
    before = fingerprint(
        {"stage": "generate", **{n: json.loads(json.dumps(getattr(base, n))) for n in STAGE_INPUTS["generate"]}}
    )
    assert base.fingerprint("generate") == before
    smaller = load_settings({"model": "m", "scratch_limit_mb": "64"}, cwd=tmp_path)
    assert smaller.fingerprint("score") != base.fingerprint("score")
    assert smaller.fingerprint("generate") != base.fingerprint("generate")
    naive = {"model": "m", "mode": "naive"}
    assert load_settings({**naive, "scratch_limit_mb": "64"}, cwd=tmp_path).fingerprint("generate") == load_settings(
        naive, cwd=tmp_path
    ).fingerprint("generate")
    with pytest.raises(
        ConfigError, match=r"invalid scratch_limit_mb=9000: the scratch folder is memory .* step_memory_mb=8192"
    ):
        load_settings({"scratch_limit_mb": "9000"}, cwd=tmp_path)
    with pytest.raises(ConfigError, match="invalid scratch_limit_mb=0: expected a whole number >= 1"):
        load_settings({"scratch_limit_mb": "0"}, cwd=tmp_path)


def test_settings_are_frozen(tmp_path: Path) -> None:
    settings = load_settings({}, cwd=tmp_path)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.model = "x"  # type: ignore[misc]
    assert isinstance(settings, Settings)


def test_relative_h5py_file_resolves_under_data_dir(tmp_path: Path) -> None:
    settings = load_settings({"h5py_file": "targets/t.h5", "data_dir": "d"}, cwd=tmp_path)
    assert settings.explicit_targets_file() == Path("d/targets/t.h5")
    absolute = os.path.abspath("/x/t.h5")
    assert load_settings({"h5py_file": absolute}, cwd=tmp_path).explicit_targets_file() == Path(absolute)


def test_server_settings_are_validated_in_one_line(tmp_path: Path) -> None:
    settings = load_settings(
        {"model": "m", "max_tokens": "128", "tool_choice": "code_interpreter", "server_wait_seconds": "60"},
        cwd=tmp_path,
    )
    assert (settings.max_tokens, settings.tool_choice, settings.server_wait_seconds) == (128, "code_interpreter", 60.0)
    assert (
        settings.check_model is True
        and load_settings({"model": "m", "max_tokens": ""}, cwd=tmp_path).max_tokens is None
    )
    for name, value, expected in (
        ("max_tokens", "0", "a whole number of tokens >= 1"),
        ("tool_choice", "python", "auto, none, required, or a tool: code_interpreter"),
        ("server_wait_seconds", "-1", ">= 0"),
        ("check_model", "maybe", "true or false"),
    ):
        with pytest.raises(ConfigError, match=f"invalid {name}=") as raised:
            load_settings({"model": "m", name: value}, cwd=tmp_path)
        assert expected in str(raised.value)
    with pytest.raises(ConfigError, match="max_tokens is set there and by max_tokens=128"):
        load_settings({"model": "m", "max_tokens": "128", "model_params": '{"max_tokens": 64}'}, cwd=tmp_path)
    assert load_settings({"model": "m", "model_params": '{"max_tokens": 64}'}, cwd=tmp_path).model_params == {
        "max_tokens": 64
    }
    for owned in ("tool_choice", "n", "stream", "tools", "messages"):
        with pytest.raises(ConfigError, match="invalid model_params="):
            load_settings({"model": "m", "model_params": json.dumps({owned: 1})}, cwd=tmp_path)


def test_new_generation_settings_enter_the_fingerprint_only_when_set(tmp_path: Path) -> None:
    base = load_settings({"model": "m"}, cwd=tmp_path)
    assert "max_tokens" not in base.stage_inputs("generate") and "tool_choice" not in base.stage_inputs("generate")
    # Unset, they leave the fingerprint of a run made before they existed (the value main computed before them).
    assert base.fingerprint("generate") == "5f5711c1f4c93faa5caad0bf784f5e264f98413fec3f441103ee7f2929f8ca1e"
    waits = load_settings({"model": "m", "server_wait_seconds": "5", "check_model": "false"}, cwd=tmp_path)
    assert waits.fingerprint("generate") == base.fingerprint("generate")  # how to reach a server, not what it says
    capped = load_settings({"model": "m", "max_tokens": "128"}, cwd=tmp_path)
    chosen = load_settings({"model": "m", "tool_choice": "auto"}, cwd=tmp_path)
    assert len({base.fingerprint("generate"), capped.fingerprint("generate"), chosen.fingerprint("generate")}) == 3
    naive = load_settings({"model": "m", "mode": "naive"}, cwd=tmp_path)
    naive_chosen = load_settings({"model": "m", "mode": "naive", "tool_choice": "auto"}, cwd=tmp_path)
    assert naive.fingerprint("generate") == naive_chosen.fingerprint("generate")  # no tools, no effect
    from stages.config.fingerprints import settings_slice

    assert (
        "max_tokens" not in settings_slice(base, "generate") and settings_slice(capped, "generate")["max_tokens"] == 128
    )


@pytest.mark.parametrize(
    ("cli", "start"),
    [
        ({"sampel_ids": "1"}, "unknown variable 'sampel_ids' (on the command line); did you mean sample_ids? known"),
        ({"Step_Timeout_Second": "9"}, "unknown variable 'Step_Timeout_Second' (on the command line); did you mean "),
        (
            {"harness_params": '{"concurency": 2}'},
            "unknown variable 'concurency' (in harness_params on the command line); did you mean concurrency? known",
        ),
    ],
)
def test_an_unknown_variable_suggests_the_closest_names_before_listing_all(
    tmp_path: Path, cli: dict[str, str], start: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(cli, cwd=tmp_path)
    text = str(raised.value)
    assert text.startswith(start) and "\n" not in text
    assert text.index("did you mean") < text.index("known variables: all_environments, allow_missing_targets")
    if "Step_Timeout" in text:
        assert text.split("did you mean ", 1)[1].startswith("step_timeout_seconds")


def test_an_unknown_variable_in_the_toml_file_suggests_too(tmp_path: Path) -> None:
    (tmp_path / "scicode.toml").write_text("modle = 'x'\n", encoding="utf-8")
    with pytest.raises(
        ConfigError, match=r"^unknown variable 'modle' \(in .*scicode.toml\); did you mean mode or model\?"
    ):
        load_settings({}, cwd=tmp_path)


@pytest.mark.parametrize(
    ("cli", "message"),
    [
        (
            {"split": "tset", "model": "m"},
            "invalid split=tset: did you mean test? expected one of validation, test, all",
        ),
        ({"split": "Validation"}, "invalid split=Validation: did you mean validation? expected one of"),
        ({"mode": "tool-use"}, "invalid mode=tool-use: did you mean tool_use? expected one of naive, tool_use"),
        (
            {"rescore": "timeout"},
            "invalid rescore=timeout: did you mean timeouts? expected one of false, true, timeouts",
        ),
        (
            {"tool_names": "code_interpreter,code_interp"},
            "invalid tool_names=code_interpreter,code_interp: did you mean code_interpreter? expected a non-empty list",
        ),
        ({"tool_choice": "requried"}, "invalid tool_choice=requried: did you mean required? expected empty (not sent)"),
        ({"executor": "dsak"}, "invalid executor=dsak: did you mean dask? expected one of local, dask"),
    ],
)
def test_a_bad_value_of_a_setting_with_allowed_values_suggests_the_closest(
    tmp_path: Path, cli: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(cli, cwd=tmp_path)
    assert str(raised.value) == message or str(raised.value).startswith(message)
    assert "\n" not in str(raised.value)


def test_a_bad_value_like_no_allowed_value_gets_no_suggestion(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings({"executor": "ray"}, cwd=tmp_path)
    assert str(raised.value) == "invalid executor=ray: expected one of local, dask"
