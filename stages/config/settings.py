"""Run configuration: built-in defaults < TOML file < JSON parameter blocks < `name=value` words.

`load_settings()` is the only entry point. It returns a frozen, typed `Settings`, or raises
`ConfigError` with one line naming the variable, the bad value and what is allowed (the coercers of raw values
are `stages.config.values`). Each stage's
`fingerprint` covers exactly the settings that change that stage's output.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from stages.benchmark.pins import pins
from stages.benchmark.protocol import CARRY_MODES, DEFAULT_CARRY, Carry
from stages.config.values import ConfigError as ConfigError  # the error of every configuration problem
from stages.config.values import fail, number, to_bool, to_choice, to_dict, to_number, to_str_list, to_text
from stages.execution.confinement import DEFAULT_SCRATCH_LIMIT_MB
from stages.execution.redaction import redact_mapping
from stages.storage.artifacts import fingerprint
from stages.storage.paths import STATE_DIR_NAME, DataPaths, RunPaths, StatePaths, safe_name

Split = Literal["validation", "test", "all"]
Mode = Literal["naive", "tool_use"]
ApiProtocol = Literal["openai-chat", "openai-responses"]
Executor = Literal["local", "dask"]
AttemptStrategy = Literal["avg", "pass"]
ConfinementPolicy = Literal["auto", "required"]
Rescore = Literal["", "true", "timeouts"]
Stage = Literal["download", "select", "generate", "score"]

SPLITS: tuple[str, ...] = ("validation", "test", "all")
MODES: tuple[str, ...] = ("naive", "tool_use")
API_PROTOCOLS: tuple[str, ...] = ("openai-chat", "openai-responses")
EXECUTORS: tuple[str, ...] = ("local", "dask")
ATTEMPT_STRATEGIES: tuple[str, ...] = ("avg", "pass")
CONFINEMENT_POLICIES: tuple[str, ...] = ("auto", "required")
RESCORE_CHOICES: tuple[str, ...] = ("false", "true", "timeouts")
TOOLS: tuple[str, ...] = ("code_interpreter",)
BUILTIN_MODELS: tuple[str, ...] = ("gold", "replay:<file.json>")
PARAM_BLOCKS: tuple[str, ...] = ("benchmark_params", "harness_params")
# Request fields the harness owns: the prompt and conversation, the tools and how they are chosen (the tool_choice
# setting), one answer per call, no streaming. Everything else in model_params is passed through as given.
RESERVED_MODEL_PARAMS: frozenset[str] = frozenset(
    {"model", "messages", "input", "instructions", "previous_response_id", "tools", "tool_choice", "n", "stream"}
)
# The output cap under each protocol's names: passed through from model_params unless `max_tokens=` is set.
OUTPUT_CAP_PARAMS: tuple[str, ...] = ("max_tokens", "max_completion_tokens", "max_output_tokens")
TOOL_CHOICE_MODES: tuple[str, ...] = ("auto", "none", "required")
CARRY_RUN_SUFFIX: dict[str, str] = {"definition": "carrydef"}  # run-name suffix of each non-default carry


@dataclass(frozen=True)
class Settings:
    model: str = "gold"
    base_url: str = ""
    api_protocol: ApiProtocol = "openai-chat"
    api_key_env: str = "OPENAI_API_KEY"
    model_params: Mapping[str, Any] = field(default_factory=dict)
    max_tokens: int | None = None
    tool_choice: str = ""
    request_timeout_seconds: float = 600.0
    max_retries: int = 6
    server_wait_seconds: float = 300.0
    check_model: bool = True
    split: Split = "all"
    category: tuple[str, ...] = ("all",)
    sample_ids: tuple[str, ...] = ()
    mode: Mode = "tool_use"
    tool_names: tuple[str, ...] = ("code_interpreter",)
    tool_use_max_loops: int = 15
    with_background: bool = True
    carry: Carry = DEFAULT_CARRY
    code_timeout_seconds: float = 180.0
    code_workdir: str = f"{STATE_DIR_NAME}/interpreter"
    execution_preamble: str = ""
    python_binary: str = sys.executable
    sandbox_url: str = ""
    sandbox_memory_limit_mb: int = 1024
    sandbox_max_retries: int = 3
    sandbox_retry_delay_seconds: float = 2.0
    sandbox_api_timeout_seconds: float = 30.0
    sandbox_no_proxy: bool = True
    step_timeout_seconds: float = 1800.0
    step_memory_mb: int = 8192
    scratch_limit_mb: int = DEFAULT_SCRATCH_LIMIT_MB
    score_workers: int = os.cpu_count() or 1
    concurrency: int = 16
    executor: Executor = "local"
    scheduler: str = ""
    confinement: ConfinementPolicy = "auto"
    # Re-execute cached verdicts: "true" every selected step, "timeouts" the steps whose verdict is a timeout.
    rescore: Rescore = ""
    attempts: int = 1
    attempt_strategy: AttemptStrategy = "avg"
    data_dir: str = "data"
    results_dir: str = "results"
    run: str = ""
    h5py_file: str = ""
    allow_missing_targets: bool = False
    dataset_zip_url: str = pins()["default_dataset_zip_url"]
    verify_checksums: bool = True
    runs: tuple[str, ...] = ()
    allow_split_mismatch: bool = False
    config: str = ""
    # ---- prices, US dollars per million tokens (cost figures only; no generation or scoring input) ----
    price_input_per_mtok: float | None = None
    price_output_per_mtok: float | None = None
    price_cached_input_per_mtok: float | None = None

    # ---- derived values -------------------------------------------------
    @property
    def run_name(self) -> str:
        """`run=`, else `<split>-<mode>-<bg|nobg>`, plus `-carrydef` under `carry=definition` (runs that
        carry code differently never share a folder)."""
        if self.run:
            return self.run
        name = f"{self.split}-{self.mode}-{'bg' if self.with_background else 'nobg'}"
        return name if self.carry == DEFAULT_CARRY else f"{name}-{CARRY_RUN_SUFFIX[self.carry]}"

    @property
    def summary_tag(self) -> str:
        """ "" for the whole split with one attempt; else a tag naming the selection (`ids-1_3`, `cat-x`, `k3`), so a
        subset or an attempts change gets its own summary beside the full run's instead of replacing it."""
        parts = []
        if self.sample_ids:
            ids = "_".join(self.sample_ids)
            parts.append(
                f"ids-{ids}"
                if len(ids) <= 40
                else f"ids-{len(self.sample_ids)}-{fingerprint(list(self.sample_ids))[:8]}"
            )
        if self.categories is not None:
            parts.append("cat-" + "_".join(self.categories))
        if self.attempts != 1:
            parts.append(f"k{self.attempts}")
        return safe_name("-".join(parts)) if parts else ""

    @property
    def data_paths(self) -> DataPaths:
        return DataPaths(Path(self.data_dir))

    @property
    def run_paths(self) -> RunPaths:
        return RunPaths.of(Path(self.results_dir), self.model, self.run_name, self.summary_tag)

    @property
    def state_paths(self) -> StatePaths:
        return StatePaths(Path(STATE_DIR_NAME))

    @property
    def categories(self) -> tuple[str, ...] | None:
        """The selected categories, or None for all."""
        return None if any(name.strip().lower() == "all" for name in self.category) else self.category

    @property
    def api_key(self) -> str | None:
        """The API key, read from the environment only; never stored."""
        return os.environ.get(self.api_key_env) or None

    def explicit_targets_file(self) -> Path | None:
        """`h5py_file=` resolved under `data_dir` when relative; None when automatic."""
        if not self.h5py_file or self.h5py_file == "auto":
            return None
        path = Path(self.h5py_file)
        return path if path.is_absolute() else Path(self.data_dir) / path

    def stage_inputs(self, stage: Stage) -> tuple[str, ...]:
        """The settings that change `stage`'s output: STAGE_INPUTS, and the OPTIONAL_STAGE_INPUTS in effect (a
        setting added later enters only when set, so artifacts written before it existed stay current)."""
        optional = OPTIONAL_STAGE_INPUTS.get(stage, {})
        return STAGE_INPUTS[stage] + tuple(name for name, in_effect in optional.items() if in_effect(self))

    def fingerprint(self, stage: Stage) -> str:
        """sha256 over exactly the settings that change `stage`'s output."""
        return fingerprint(
            {"stage": stage, **{name: _jsonable(getattr(self, name)) for name in self.stage_inputs(stage)}}
        )

    def redacted(self) -> dict[str, Any]:
        """Every setting as JSON, for `config.json`; no secret value is ever present."""
        record = {f.name: _jsonable(getattr(self, f.name)) for f in fields(self)}
        record["model_params"] = redact_mapping(record["model_params"])
        record["base_url"] = _strip_url_credentials(self.base_url)
        record["sandbox_url"] = _strip_url_credentials(self.sandbox_url)
        record["api_key_present"] = bool(self.api_key)
        return record


STAGE_INPUTS: dict[str, tuple[str, ...]] = {
    "download": ("h5py_file", "dataset_zip_url", "verify_checksums"),
    "select": ("split", "category", "sample_ids"),
    # base_url is where the model lives, not what it is: moving endpoints resumes, never re-bills.
    "generate": (
        "model",
        "api_protocol",
        "model_params",
        "mode",
        "tool_names",
        "tool_use_max_loops",
        "with_background",
        "carry",
        "code_timeout_seconds",
        "execution_preamble",
        "sandbox_url",
        "sandbox_memory_limit_mb",
    ),
    "score": ("step_timeout_seconds", "step_memory_mb", "scratch_limit_mb", "python_binary", "carry"),
}
# Settings that enter a stage's fingerprint only where they apply and differ from their default, so that artifacts
# written before the setting existed stay current (a generation is never re-billed for it).
OPTIONAL_STAGE_INPUTS: dict[str, dict[str, Callable[[Settings], bool]]] = {
    "generate": {
        "max_tokens": lambda settings: settings.max_tokens is not None,
        "tool_choice": lambda settings: bool(settings.tool_choice) and settings.mode == "tool_use",
        # The snippets' scratch limit shapes what a model sees from its tool calls (only local snippets have it).
        "scratch_limit_mb": lambda settings: (
            settings.mode == "tool_use"
            and not settings.sandbox_url
            and settings.scratch_limit_mb != DEFAULT_SCRATCH_LIMIT_MB
        ),
    },
}


# ---------------------------------------------------------------------------
# The settings as JSON (fingerprints, the run's recorded configuration)
# ---------------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return {key: _jsonable(item) for key, item in value.items()}
    return value


def _strip_url_credentials(url: str) -> str:
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    host_part, sep, tail = rest.partition("/")
    if "@" in host_part:
        host_part = "<redacted>@" + host_part.rsplit("@", 1)[1]
    return f"{scheme}://{host_part}{sep}{tail}"


# ---------------------------------------------------------------------------
# The coercer of each setting (the generic ones are stages.config.values)
# ---------------------------------------------------------------------------


def _model_name(name: str, value: Any) -> str:
    text = to_text(name, value).strip()
    if not text:
        raise fail(name, value, "a model id, or one of " + ", ".join(BUILTIN_MODELS))
    if text.startswith("replay:") and not text[len("replay:") :].strip():
        raise fail(name, value, "replay:<file.json> naming a JSON file")
    return text


def _tool_list(name: str, value: Any) -> tuple[str, ...]:
    tools = to_str_list(name, value)
    unknown = [tool for tool in tools if tool not in TOOLS]
    if unknown or not tools:
        raise fail(name, value, "a non-empty list of: " + ", ".join(TOOLS))
    return tools


def _model_params(name: str, value: Any) -> dict[str, Any]:
    params = to_dict(name, value)
    reserved = sorted(RESERVED_MODEL_PARAMS.intersection(params))
    if reserved:
        raise fail(name, value, "request parameters other than " + ", ".join(sorted(RESERVED_MODEL_PARAMS)))
    return params


def _optional_cap(name: str, value: Any) -> int | None:
    """Unset (None, or an empty string on the command line) or a whole number of tokens >= 1."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        return int(to_number(name, value, int, 1, False))
    except ConfigError:
        raise fail(name, value, "a whole number of tokens >= 1, or empty (no cap)") from None


def _tool_choice(name: str, value: Any) -> str:
    """Unset (""), auto, none, required, or the name of a tool (sent in the named-function form)."""
    text = to_text(name, value).strip()
    if text and text not in TOOL_CHOICE_MODES and text not in TOOLS:
        raise fail(
            name, value, "empty (not sent), " + ", ".join(TOOL_CHOICE_MODES) + ", or a tool: " + ", ".join(TOOLS)
        )
    return text


def _rescore(name: str, value: Any) -> str:
    """false/empty (serve cached verdicts), true (re-execute every selected step), timeouts (only timeouts)."""
    text = (
        value.strip().lower()
        if isinstance(value, str)
        else ("true" if value is True else "false" if value is False else value)
    )
    if text in ("", "false"):
        return ""
    if text in RESCORE_CHOICES:
        return str(text)
    raise fail(name, value, "one of " + ", ".join(RESCORE_CHOICES))


def _memory_limit(name: str, value: Any) -> int:
    """0 (no limit: none is sent to the sandbox nor set locally) or a whole number of megabytes >= 16."""
    if isinstance(value, (int, str)) and not isinstance(value, bool) and str(value).strip() == "0":
        return 0
    try:
        return int(to_number(name, value, int, 16, False))
    except ConfigError:
        raise fail(name, value, "0 (no limit) or a whole number >= 16") from None


def _price(name: str, value: Any) -> float | None:
    """Unset (empty) or a number >= 0 of US dollars per million tokens."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return float(to_number(name, value, float, 0, False))


def _url(name: str, value: Any) -> str:
    text = to_text(name, value).strip()
    if text and not text.startswith(("http://", "https://", "file://")):
        raise fail(name, value, "an http://, https:// or file:// URL, or empty")
    return text


COERCERS: dict[str, Callable[[str, Any], Any]] = {
    "model": _model_name,
    "base_url": _url,
    "api_protocol": to_choice(API_PROTOCOLS),
    "api_key_env": to_text,
    "model_params": _model_params,
    "max_tokens": _optional_cap,
    "tool_choice": _tool_choice,
    "request_timeout_seconds": number(float, 0, exclusive=True),
    "max_retries": number(int, 0),
    "server_wait_seconds": number(float, 0),
    "check_model": to_bool,
    "split": to_choice(SPLITS),
    "category": to_str_list,
    "sample_ids": to_str_list,
    "mode": to_choice(MODES),
    "tool_names": _tool_list,
    "tool_use_max_loops": number(int, 1),
    "with_background": to_bool,
    "carry": to_choice(CARRY_MODES),
    "code_timeout_seconds": number(float, 0, exclusive=True),
    "code_workdir": to_text,
    "execution_preamble": to_text,
    "python_binary": to_text,
    "sandbox_url": _url,
    "sandbox_memory_limit_mb": _memory_limit,
    "allow_missing_targets": to_bool,
    "sandbox_max_retries": number(int, 0),
    "sandbox_retry_delay_seconds": number(float, 0),
    "sandbox_api_timeout_seconds": number(float, 0, exclusive=True),
    "sandbox_no_proxy": to_bool,
    "step_timeout_seconds": number(float, 0, exclusive=True),
    "step_memory_mb": number(int, 64),
    "scratch_limit_mb": number(int, 1),
    "score_workers": number(int, 1),
    "concurrency": number(int, 1),
    "executor": to_choice(EXECUTORS),
    "confinement": to_choice(CONFINEMENT_POLICIES),
    "rescore": _rescore,
    "scheduler": to_text,
    "attempts": number(int, 1),
    "attempt_strategy": to_choice(ATTEMPT_STRATEGIES),
    "data_dir": to_text,
    "results_dir": to_text,
    "run": to_text,
    "h5py_file": to_text,
    "dataset_zip_url": _url,
    "verify_checksums": to_bool,
    "runs": to_str_list,
    "allow_split_mismatch": to_bool,
    "config": to_text,
    "price_input_per_mtok": _price,
    "price_output_per_mtok": _price,
    "price_cached_input_per_mtok": _price,
}
VARIABLES: tuple[str, ...] = tuple(f.name for f in fields(Settings))
assert set(COERCERS) == set(VARIABLES), "every setting needs a coercer"
ACCEPTED_NAMES: tuple[str, ...] = VARIABLES + PARAM_BLOCKS


# ---------------------------------------------------------------------------
# Layering
# ---------------------------------------------------------------------------


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _check_names(names: Any, origin: str) -> None:
    for name in names:
        if name not in ACCEPTED_NAMES:
            raise ConfigError(
                f"unknown variable {name!r} ({origin}); known variables: {', '.join(sorted(ACCEPTED_NAMES))}"
            )


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"invalid config={path}: no such file") from None
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"invalid config={path}: not readable TOML ({error})") from None
    _check_names(data, f"in {path}")
    return data


def _expand_blocks(layer: Mapping[str, Any], origin: str) -> dict[str, Any]:
    """Lift the keys of benchmark_params/harness_params into the layer; model_params stays a dict."""
    flat: dict[str, Any] = {}
    for block in PARAM_BLOCKS:
        if block in layer:
            content = to_dict(block, layer[block])
            _check_names(content, f"in {block} {origin}")
            nested_blocks = [name for name in content if name in PARAM_BLOCKS]
            if nested_blocks:
                raise ConfigError(f"invalid {block}: {nested_blocks[0]} cannot be nested inside it")
            flat = deep_merge(flat, content)
    for name, value in layer.items():
        if name not in PARAM_BLOCKS:
            flat = deep_merge(flat, {name: value})
    if "model_params" in flat and isinstance(flat["model_params"], str):
        flat["model_params"] = to_dict("model_params", flat["model_params"])
    return flat


def load_settings(
    cli_vars: Mapping[str, str] | None = None,
    *,
    cwd: Path | None = None,
) -> Settings:
    """Resolve settings from defaults, the TOML file, JSON blocks and `name=value` words."""
    cli_vars = dict(cli_vars or {})
    cwd = Path(cwd or Path.cwd())
    _check_names(cli_vars, "on the command line")

    config_path = cli_vars.get("config")
    if config_path:
        toml_layer = _read_toml(cwd / config_path if not Path(config_path).is_absolute() else Path(config_path))
    elif (cwd / "scicode.toml").is_file():
        toml_layer = _read_toml(cwd / "scicode.toml")
    else:
        toml_layer = {}

    # Order: TOML (with its own blocks) < command-line JSON blocks < command-line name=value.
    toml_values = _expand_blocks(toml_layer, "in the config file")
    cli_blocks = _expand_blocks({k: v for k, v in cli_vars.items() if k in PARAM_BLOCKS}, "on the command line")
    cli_words: dict[str, Any] = {k: v for k, v in cli_vars.items() if k not in PARAM_BLOCKS}
    if "model_params" in cli_words:
        cli_words["model_params"] = to_dict("model_params", cli_words["model_params"])
    raw = deep_merge(deep_merge(toml_values, cli_blocks), cli_words)

    values = {name: COERCERS[name](name, value) for name, value in raw.items()}
    if "split" not in values:
        values["split"] = "validation" if values.get("model", Settings.model) == "gold" else "all"
    settings = Settings(**values)
    _check_consistency(settings)
    return settings


def _check_consistency(settings: Settings) -> None:
    if settings.model == "gold" and settings.split != "validation":
        raise ConfigError(
            f"invalid split={settings.split} with model=gold: the gold model has reference code for split=validation only"
        )
    if settings.executor == "local" and settings.scheduler:
        raise ConfigError(f"invalid scheduler={settings.scheduler}: a scheduler needs executor=dask")
    if settings.scheduler and not settings.scheduler.startswith(("tcp://", "tls://", "inproc://", "ws://", "wss://")):
        raise ConfigError(f"invalid scheduler={settings.scheduler}: expected an address like tcp://host:8786")
    if len(set(settings.sample_ids)) != len(settings.sample_ids):
        duplicate = next(i for i in settings.sample_ids if settings.sample_ids.count(i) > 1)
        raise ConfigError(f"invalid sample_ids: problem id {duplicate} is listed twice")
    if settings.scratch_limit_mb > settings.step_memory_mb:
        raise ConfigError(
            f"invalid scratch_limit_mb={settings.scratch_limit_mb}: the scratch folder is memory (a tmpfs) and must "
            f"fit in step_memory_mb={settings.step_memory_mb}"
        )
    if settings.tool_choice in TOOLS and settings.tool_choice not in settings.tool_names:
        raise ConfigError(
            f"invalid tool_choice={settings.tool_choice}: that tool is not enabled (tool_names="
            f"{','.join(settings.tool_names)})"
        )
    caps = [name for name in OUTPUT_CAP_PARAMS if name in settings.model_params]
    if settings.max_tokens is not None and caps:
        raise ConfigError(
            f"invalid model_params: {caps[0]} is set there and by max_tokens={settings.max_tokens}; set the output "
            "cap in one place (max_tokens= is sent under the name the protocol wants)"
        )
    if settings.run and settings.run != settings.run.strip():
        raise ConfigError(f"invalid run={settings.run!r}: no leading or trailing spaces")
    _check_prices(settings)


def _check_prices(settings: Settings) -> None:
    """Input and output prices come together (a cost needs both); a cached-input price needs them."""
    given = {
        name: getattr(settings, name)
        for name in ("price_input_per_mtok", "price_output_per_mtok", "price_cached_input_per_mtok")
    }
    if (given["price_input_per_mtok"] is None) != (given["price_output_per_mtok"] is None) or (
        given["price_cached_input_per_mtok"] is not None and given["price_input_per_mtok"] is None
    ):
        shown = ", ".join(f"{name}={'unset' if value is None else value}" for name, value in given.items())
        raise ConfigError(
            f"invalid prices ({shown}): expected price_input_per_mtok and price_output_per_mtok set together "
            "(price_cached_input_per_mtok only with them), or no price at all"
        )
