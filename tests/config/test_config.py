"""Configuration: precedence, coercion, and one clear line for every invalid input."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from stages.config.settings import DECLARED, VARIABLES, ConfigError, Settings, load_settings
from stages.config.values import MAX_NESTING, NumberCoercer


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


# ---------------------------------------------------------------------------
# Issue 39, finding 7: every setting usable by the run, or one line before any work
# ---------------------------------------------------------------------------

NUMBER_SETTINGS = tuple(name for name in VARIABLES if isinstance(DECLARED[name].coerce, NumberCoercer))
TEXT_SETTINGS = ("execution_preamble", "run", "api_key_env", "python_binary", "code_workdir", "scheduler")


def one_config_line(tmp_path: Path, words: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as raised:
        load_settings(words, cwd=tmp_path)
    line = str(raised.value)
    assert "\n" not in line and "\r" not in line and line.startswith("invalid ")
    line.encode("utf-8")  # printable: no lone surrogate of the bad value reaches the terminal
    return line


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("request_timeout_seconds", "1e10", "invalid request_timeout_seconds=1e10: expected a number > 0 and <= 86400"),
        ("code_timeout_seconds", "inf", "expected a number > 0 and <= 86400"),
        ("step_timeout_seconds", "1e999", "expected a number > 0 and <= 86400"),
        ("server_wait_seconds", "-inf", "expected a number >= 0 and <= 86400"),
        ("concurrency", "100000", "expected a whole number >= 1 and <= 4096"),
        ("max_tokens", "99999999999", "<= 10000000"),
        ("price_input_per_mtok", "inf", "expected a number >= 0 and <= 1e+06"),
        ("sandbox_memory_limit_mb", "1e9", "0 (no limit) or a whole number >= 16 and <= 1048576"),
    ],
)
def test_numbers_a_run_cannot_use_are_one_line(tmp_path: Path, name: str, value: str, message: str) -> None:
    assert message in one_config_line(tmp_path, {name: value})


def test_a_text_setting_that_is_not_utf8_is_one_line_before_the_run_holds_it(tmp_path: Path) -> None:
    """A byte that is not UTF-8 on the command line arrives as a lone surrogate: it was accepted and the run folder
    then refused its own configuration."""
    byte = os.fsdecode(b"x = '\xff'")
    line = one_config_line(tmp_path, {"execution_preamble": byte})
    assert line.startswith("invalid execution_preamble=x = '\\udcff'") and "not valid UTF-8" in line
    (tmp_path / "scicode.toml").write_bytes(b'execution_preamble = "x = \xff"\n')
    assert "not readable TOML" in one_config_line(tmp_path, {})


@pytest.mark.parametrize(
    "toml",
    [
        "code_timeout_seconds = 1979-05-27T07:32:00Z\n",
        "[model_params]\nseed = 1979-05-27\n",
        "[model_params]\ntemperature = inf\n",
        "[model_params]\ntemperature = nan\n",
        "harness_params = '{\"max_retries\": 1e999}'\n",
    ],
)
def test_toml_dates_and_non_finite_numbers_are_one_line(tmp_path: Path, toml: str) -> None:
    (tmp_path / "scicode.toml").write_text(toml, encoding="utf-8")
    line = one_config_line(tmp_path, {})
    assert any(words in line for words in ("TOML date or time", "not finite", "expected a whole number"))


@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 490, 100_000])
def test_json_blocks_nested_beyond_the_bound_are_one_line(tmp_path: Path, depth: int) -> None:
    nested = '{"a": ' * depth + "1" + "}" * depth
    for words in ({"model_params": nested}, {"harness_params": '{"model_params": ' + nested + "}"}):
        assert one_config_line(tmp_path, words).startswith(("invalid model_params=", "invalid harness_params="))
    within = '{"a": ' * (MAX_NESTING - 1) + "1" + "}" * (MAX_NESTING - 1)
    assert load_settings({"model_params": within}, cwd=tmp_path).model_params["a"]


HOSTILE_NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["1e10", "1e999", "-1e999", "nan", "inf", "9" * 5000, "0x10", "1_000", "", " ", "1e-400"]),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
)


@hypothesis_settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(NUMBER_SETTINGS), value=HOSTILE_NUMBERS)
def test_any_number_word_is_a_usable_value_or_one_line(tmp_path: Path, name: str, value: str) -> None:
    coercer = DECLARED[name].coerce
    assert isinstance(coercer, NumberCoercer)
    try:
        settings = load_settings({name: value, "scratch_limit_mb": "1"}, cwd=tmp_path)
    except ConfigError as error:
        assert "\n" not in str(error) and str(error).startswith("invalid ")
        return
    number = getattr(settings, name)
    assert coercer.minimum <= number <= coercer.maximum and number == number
    json.dumps(settings.redacted(), allow_nan=False)  # what config.json and the fingerprints write


PLAIN_PIECES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3),
    max_leaves=20,
)


@hypothesis_settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=PLAIN_PIECES, text_setting=st.sampled_from(TEXT_SETTINGS))
def test_any_json_block_or_text_is_written_and_fingerprinted_or_one_line(
    tmp_path: Path, value: object, text_setting: str
) -> None:
    try:
        block = json.dumps({"temperature": value})
    except ValueError:
        return
    for words in ({"model_params": block}, {text_setting: value if isinstance(value, str) else "x"}):
        try:
            settings = load_settings(words, cwd=tmp_path)
        except ConfigError as error:
            assert "\n" not in str(error)
            str(error).encode("utf-8")
            continue
        json.dumps(settings.redacted(), allow_nan=False).encode("utf-8")
        settings.fingerprint("generate")


def test_a_long_category_list_names_its_files_by_count_and_digest(tmp_path: Path) -> None:
    names = ",".join(f"Subfield number {n}" for n in range(400))
    tag = load_settings({"category": names}, cwd=tmp_path).summary_tag
    assert tag.startswith("cat-400-") and len(tag) < 40
    assert load_settings({"category": "Mathematics,Optics"}, cwd=tmp_path).summary_tag == "cat-Mathematics_Optics"
