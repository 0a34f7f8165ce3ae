"""Run configuration: built-in defaults < TOML file < JSON parameter blocks < `name=value` words.

`load_settings()` is the only entry point. It returns a frozen, typed `Settings`, or raises
`ConfigError` with one line naming the variable, the bad value and what is allowed (the coercers of raw values
are `stages.config.values`). Each setting is declared once, as a field of `Settings` with its `Declared` record
(`stages.config.declaration`); the coercers, each stage's fingerprinted settings and summary.md's recorded list
are derived from those records. Each stage's `fingerprint` covers exactly the settings that change that stage's
output.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from stages.benchmark.datasets import DEFAULT_DATASET, dataset_named, dataset_names
from stages.benchmark.problems import Benchmark
from stages.benchmark.protocol import CARRY_MODES, DEFAULT_CARRY, Carry
from stages.benchmark.published import REQUEST_PARAMS_SETTING, protocol_named, protocol_names
from stages.config.declaration import (
    Declared,
    Secrecy,
    choice,
    declared_of,
    optional_stage_inputs_of,
    setting,
    setting_from,
    stage_inputs_of,
)
from stages.config.declaration import Stage as Stage  # the stages whose fingerprints cover settings
from stages.config.environments import Environment, parse_environments, to_environments
from stages.config.values import ConfigError as ConfigError  # the error of every configuration problem
from stages.config.values import (
    check_plain,
    did_you_mean,
    fail,
    number,
    shown_path,
    shown_value,
    to_bool,
    to_dict,
    to_number,
    to_str_list,
    to_text,
)
from stages.config.view import View
from stages.execution.confinement import DEFAULT_SCRATCH_LIMIT_MB
from stages.execution.redaction import redact_mapping
from stages.storage.artifacts import fingerprint
from stages.storage.json_values import JSONObject, JSONValue
from stages.storage.paths import STATE_DIR_NAME, DataPaths, RunPaths, StatePaths

Split = Literal["validation", "test", "all"]
Mode = Literal["naive", "tool_use"]
ApiProtocol = Literal["openai-chat", "openai-responses"]
Executor = Literal["local", "dask"]
AttemptStrategy = Literal["avg", "pass"]
ConfinementPolicy = Literal["auto", "required"]
Rescore = Literal["", "true", "timeouts"]
EndpointChange = Literal["refuse", "resume"]

SPLITS: tuple[str, ...] = ("validation", "test", "all")
MODES: tuple[str, ...] = ("naive", "tool_use")
API_PROTOCOLS: tuple[str, ...] = ("openai-chat", "openai-responses")
EXECUTORS: tuple[str, ...] = ("local", "dask")
ATTEMPT_STRATEGIES: tuple[str, ...] = ("avg", "pass")
CONFINEMENT_POLICIES: tuple[str, ...] = ("auto", "required")
RESCORE_CHOICES: tuple[str, ...] = ("false", "true", "timeouts")
ENDPOINT_CHANGES: tuple[str, ...] = ("refuse", "resume")
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
# Common request parameters, each with an example value: on the command line they are an unknown variable whose error
# shows the model_params form (the output cap has its own setting, max_tokens=).
REQUEST_PARAM_EXAMPLES: dict[str, JSONValue] = {
    "temperature": 0,
    "top_p": 1,
    "top_k": 40,
    "min_p": 0.05,
    "seed": 1234,
    "presence_penalty": 0,
    "frequency_penalty": 0,
    "repetition_penalty": 1.1,
    "reasoning_effort": "high",
}


# The upper bounds of number settings: every deadline one a socket, a poll and a process timer accept (one day), and
# counts a run can hold (threads, processes, retries, memory) without failing on its own size.
MAX_SECONDS = 86_400.0
MAX_RETRIES = 100
MAX_PARALLEL = 4096  # model calls in flight, test scripts at once
MAX_LOOPS = 1000  # model calls per tool_use step
MAX_ATTEMPTS = 1000
MAX_MEMORY_MB = 1_048_576  # 1 TiB
MAX_TOKENS_CAP = 10_000_000  # the largest token count a reply's usage is believed to hold
MAX_PRICE = 1_000_000.0  # US dollars per million tokens

# The sections of the configuration page, in order (each setting names its own).
PROTOCOL = "A published protocol"
ENDPOINT = "The model and its endpoint"
SELECTION = "Which problems"
GENERATION = "How answers are generated"
SNIPPETS = "Tool snippets and the sandbox"
SCORING = "Scoring"
FOLDERS = "Folders and data"
COMPARISON = "Comparison and export"
PRICES = "Prices (cost figures only; no generation or scoring fingerprint covers them)"
GROUPS: tuple[str, ...] = (PROTOCOL, ENDPOINT, SELECTION, GENERATION, SNIPPETS, SCORING, FOLDERS, COMPARISON, PRICES)

# ---------------------------------------------------------------------------
# The coercer of each setting that needs its own (the generic ones are stages.config.values)
# ---------------------------------------------------------------------------


def _model_name(name: str, value: Any) -> str:
    text = to_text(name, value).strip()
    if not text:
        raise fail(name, value, "a model id, or one of " + ", ".join(BUILTIN_MODELS))
    if text.startswith("replay:") and not text[len("replay:") :].strip():
        raise fail(name, value, "replay:<file.json> naming a JSON file")
    return text


def _protocol(name: str, value: Any) -> str:
    """Empty (no protocol) or the name of a published protocol (`stages/benchmark/protocols.json`)."""
    text = to_text(name, value).strip()
    if text and protocol_named(text) is None:
        raise fail(name, value, "empty, or one of " + ", ".join(protocol_names()), protocol_names())
    return text


def _tool_list(name: str, value: Any) -> tuple[str, ...]:
    tools = to_str_list(name, value)
    unknown = [tool for tool in tools if tool not in TOOLS]
    if unknown or not tools:
        allowed = "a non-empty list of: " + ", ".join(TOOLS)
        raise fail(name, value, allowed, TOOLS, word=unknown[0] if unknown else None)
    return tools


def _model_params(name: str, value: Any) -> JSONObject:
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
        return int(to_number(name, value, int, 1, False, MAX_TOKENS_CAP))
    except ConfigError:
        raise fail(name, value, f"a whole number of tokens >= 1 and <= {MAX_TOKENS_CAP}, or empty (no cap)") from None


def _tool_choice(name: str, value: Any) -> str:
    """Unset (""), auto, none, required, or the name of a tool (sent in the named-function form)."""
    text = to_text(name, value).strip()
    if text and text not in TOOL_CHOICE_MODES and text not in TOOLS:
        raise fail(
            name,
            value,
            "empty (not sent), " + ", ".join(TOOL_CHOICE_MODES) + ", or a tool: " + ", ".join(TOOLS),
            TOOL_CHOICE_MODES + TOOLS,
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
    raise fail(name, value, "one of " + ", ".join(RESCORE_CHOICES), RESCORE_CHOICES)


def _memory_limit(name: str, value: Any) -> int:
    """0 (no limit: none is sent to the sandbox nor set locally) or a whole number of megabytes >= 16."""
    if isinstance(value, (int, str)) and not isinstance(value, bool) and str(value).strip() == "0":
        return 0
    try:
        return int(to_number(name, value, int, 16, False, MAX_MEMORY_MB))
    except ConfigError:
        raise fail(name, value, f"0 (no limit) or a whole number >= 16 and <= {MAX_MEMORY_MB}") from None


def _price(name: str, value: Any) -> float | None:
    """Unset (empty) or a number >= 0 of US dollars per million tokens."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return float(to_number(name, value, float, 0, False, MAX_PRICE))


def _url(name: str, value: Any) -> str:
    text = to_text(name, value).strip()
    if text and not text.startswith(("http://", "https://", "file://")):
        raise fail(name, value, "an http://, https:// or file:// URL, or empty")
    return text


# The conditions under which a setting enters a stage's fingerprint (`Declared.stages_when`): a setting added later
# enters only when set, so artifacts written before it existed stay current.


def _not_original(settings: Settings) -> bool:
    """The dataset enters the fingerprints only when it is not the original (earlier runs stay current)."""
    return settings.dataset != DEFAULT_DATASET


def _output_capped(settings: Settings) -> bool:
    return settings.max_tokens is not None


def _tool_forced(settings: Settings) -> bool:
    return bool(settings.tool_choice) and settings.mode == "tool_use"


def _grades_in_environments(settings: Settings) -> bool:
    return bool(settings.environments)


def _grades_in_every_environment(settings: Settings) -> bool:
    return bool(settings.environments) and settings.all_environments


def _snippets_scratch_changed(settings: Settings) -> bool:
    """The snippets' scratch limit shapes what a model sees from its tool calls (only local snippets have it)."""
    return (
        settings.mode == "tool_use"
        and not settings.sandbox_url
        and settings.scratch_limit_mb != DEFAULT_SCRATCH_LIMIT_MB
    )


@dataclass(frozen=True)
class Settings:
    """Every setting, each declared once: its name, type and default here, the rest in its `Declared` record."""

    # ---- a published protocol ----
    protocol: str = setting(
        "",
        Declared(
            _protocol,
            "a published protocol whose settings the run takes (split, mode, background, carry, attempts, request "
            "parameters, tools and their limits; see [Reproducing published numbers](reproducing-published-numbers.md)); "
            "a setting given beside it wins, and the run is then not that published setting; adds `-<protocol>` to "
            "the run name",
            allowed=protocol_names(),
            recorded=True,
            shown_default='""',
            group=PROTOCOL,
        ),
    )
    # ---- the model and its endpoint ----
    model: str = setting(
        "gold",
        Declared(
            _model_name,
            "model id; built-ins: `gold` (the reference solutions, validation only), `replay:<file.json>` "
            "(step id -> response text)",
            stages=("generate",),
            group=ENDPOINT,
        ),
    )
    base_url: str = setting(
        "",
        Declared(
            _url,
            "the OpenAI-compatible endpoint (empty: OpenAI's default); where the model lives, not what it is, so "
            "moving endpoints resumes and never re-bills",
            secrecy="url credentials",
            shown_default="OpenAI default",
            group=ENDPOINT,
        ),
    )
    api_protocol: ApiProtocol = setting(
        "openai-chat",
        choice(
            API_PROTOCOLS,
            "the API the endpoint is asked through",
            stages=("generate",),
            recorded=True,
            group=ENDPOINT,
        ),
    )
    api_key_env: str = setting(
        "OPENAI_API_KEY",
        Declared(
            to_text,
            "environment variable holding the key (the key is never written anywhere)",
            group=ENDPOINT,
        ),
    )
    model_params: Mapping[str, JSONValue] = setting_from(
        dict,
        Declared(
            _model_params,
            "request parameters passed through (temperature, top_p, seed, reasoning_effort, ...), but those the "
            "harness owns: `model`, `messages`, `input`, `instructions`, `previous_response_id`, `tools`, "
            "`tool_choice` (its own setting), `n` (one answer per call), `stream`; an output cap here conflicts "
            "with `max_tokens=`",
            stages=("generate",),
            recorded=True,
            secrecy="secret-named keys",
            shown_default="{}",
            group=ENDPOINT,
        ),
    )
    max_tokens: int | None = setting(
        None,
        Declared(
            _optional_cap,
            "output cap of each answer, sent as `max_output_tokens` (responses), `max_completion_tokens` (chat, "
            "OpenAI's endpoint) or `max_tokens` (chat, elsewhere); recommended for local servers "
            "(see [Local servers](local-servers-sandboxfusion-dask.md#local-servers))",
            stages_when={"generate": _output_capped},
            shown_default="(unset)",
            group=ENDPOINT,
        ),
    )
    tool_choice: str = setting(
        "",
        Declared(
            _tool_choice,
            "tool_use: `auto`, `none`, `required`, or a tool's name (sent in the named-function form); a forcing "
            "one (`required`, a name) goes with the first call of each step only, later calls send none (the "
            "API's default with tools: `auto`); the final answer after the loop cap is asked without tools",
            allowed=TOOL_CHOICE_MODES + TOOLS,
            stages_when={"generate": _tool_forced},
            shown_default="(unset)",
            group=ENDPOINT,
        ),
    )
    request_timeout_seconds: float = setting(
        600.0,
        Declared(
            number(float, 0, MAX_SECONDS, exclusive=True),
            "the deadline of one API call, connecting and the whole reply included (a reply trickled past it is "
            "a timeout)",
            group=ENDPOINT,
        ),
    )
    max_retries: int = setting(
        6,
        Declared(
            number(int, 0, MAX_RETRIES),
            "retries of transient errors (timeouts, connection resets, 408, 409, 429, 5xx)",
            group=ENDPOINT,
        ),
    )
    server_wait_seconds: float = setting(
        300.0,
        Declared(
            number(float, 0, MAX_SECONDS),
            "how long a server that refuses connections or answers 503 is waited for (a restart, a model loading) "
            "before its calls fail",
            group=ENDPOINT,
        ),
    )
    check_model: bool = setting(
        True,
        Declared(to_bool, "the endpoint preflight checks `model=` against `GET /models`", group=ENDPOINT),
    )
    endpoint_change: EndpointChange = setting(
        "refuse",
        choice(
            ENDPOINT_CHANGES,
            "a run folder whose answers came from another endpoint (base_url): `refuse` the command, or `resume` "
            "the run against this one on purpose (summary and report then name every endpoint that answered)",
            group=ENDPOINT,
        ),
    )
    # ---- which problems ----
    dataset: str = setting(
        DEFAULT_DATASET,
        choice(
            dataset_names(),
            "which data: `original` (the official SciCode files) or `verified` (SciCode-Verified: 64 test problems, "
            "manifest-bound; see [Datasets](stages-and-artifacts.md#datasets)); a dataset other than `original` "
            "prefixes the run name",
            stages_when={stage: _not_original for stage in ("select", "generate", "score")},
            recorded=True,
            group=SELECTION,
        ),
    )
    split: Split = setting(
        "all",
        choice(
            SPLITS,
            "which SciCode problems",
            stages=("select",),
            shown_default="all (validation with model=gold)",
            group=SELECTION,
        ),
    )
    category: tuple[str, ...] = setting(
        ("all",),
        Declared(
            to_str_list,
            "all, or SciCode fields and/or subfields (any case; a comma or JSON list mixes both), e.g. "
            '`Mathematics` or `"Numerical Linear Algebra,Optics"` (see [Categories](results-and-statistics.md#categories))',
            stages=("select",),
            shown_default="all",
            group=SELECTION,
        ),
    )
    sample_ids: tuple[str, ...] = setting(
        (),
        Declared(
            to_str_list, "comma or JSON list of problem ids", stages=("select",), shown_default="(all)", group=SELECTION
        ),
    )
    # ---- how answers are generated ----
    mode: Mode = setting(
        "tool_use",
        choice(
            MODES,
            "`naive` (one answer per step) or `tool_use` (the model may run code first)",
            stages=("generate",),
            group=GENERATION,
        ),
    )
    tool_names: tuple[str, ...] = setting(
        ("code_interpreter",),
        Declared(
            _tool_list,
            "enabled tools",
            allowed=TOOLS,
            stages=("generate",),
            shown_default="code_interpreter",
            group=GENERATION,
        ),
    )
    tool_use_max_loops: int = setting(
        15,
        Declared(
            number(int, 1, MAX_LOOPS),
            "model calls allowed per step in tool_use",
            stages=("generate",),
            group=GENERATION,
        ),
    )
    with_background: bool = setting(
        True,
        Declared(
            to_bool,
            "step prompts carry step background (picks the official template)",
            stages=("generate",),
            group=GENERATION,
        ),
    )
    carry: Carry = setting(
        DEFAULT_CARRY,
        choice(
            CARRY_MODES,
            "code of earlier steps carried into later prompts and test scripts: `full` (each step's whole code, as "
            "an uninterrupted official run) or `definition` (only the definition its header names, as a resumed "
            "official run); `definition` adds `-carrydef` to the run name",
            stages=("generate", "score"),
            group=GENERATION,
        ),
    )
    # ---- tool snippets ----
    code_timeout_seconds: float = setting(
        180.0,
        Declared(
            number(float, 0, MAX_SECONDS, exclusive=True),
            "one code_interpreter execution",
            stages=("generate",),
            recorded=True,
            group=SNIPPETS,
        ),
    )
    code_workdir: str = setting(
        f"{STATE_DIR_NAME}/interpreter",
        Declared(to_text, "where tool snippets run (each in its own temp dir, removed after)", group=SNIPPETS),
    )
    execution_preamble: str = setting(
        "",
        Declared(
            to_text, "code run before each tool snippet", stages=("generate",), shown_default='""', group=SNIPPETS
        ),
    )
    python_binary: str = setting(
        sys.executable,
        Declared(
            to_text,
            "interpreter for tool snippets and test scripts: a venv's `bin/python` runs them with that venv's "
            "packages (see [A virtual environment](running-safely.md#a-virtual-environment))",
            stages=("score",),
            shown_default="(the running interpreter, as invoked)",
            group=SNIPPETS,
        ),
    )
    environments: str = setting(
        "",
        Declared(
            to_environments,
            "`NAME:PYTHON,...`: score every step in each of these interpreters, in this order, each under the full "
            "confinement; a step passes when any environment passes it (see [Grading environments]"
            "(running-safely.md#grading-environments); `doit environments` builds the SciCode-Verified ones)",
            stages_when={"score": _grades_in_environments},
            shown_default='"" (python_binary only)',
            group=SCORING,
        ),
    )
    all_environments: bool = setting(
        False,
        Declared(
            to_bool,
            "under `environments=`, run every environment even after one passed and record every verdict (by "
            "default the first pass ends a step)",
            stages_when={"score": _grades_in_every_environment},
            group=SCORING,
        ),
    )
    sandbox_url: str = setting(
        "",
        Declared(
            _url,
            "SandboxFusion-compatible `/run_code` service for tool snippets (see [SandboxFusion](local-servers-sandboxfusion-dask.md#sandboxfusion))",
            stages=("generate",),
            secrecy="url credentials",
            shown_default='""',
            group=SNIPPETS,
        ),
    )
    sandbox_memory_limit_mb: int = setting(
        1024,
        Declared(
            _memory_limit,
            "sandbox memory limit, also the local snippet limit (`0`: no limit, none is sent)",
            stages=("generate",),
            group=SNIPPETS,
        ),
    )
    sandbox_max_retries: int = setting(
        3, Declared(number(int, 0, MAX_RETRIES), "retries of a failed `/run_code` call", group=SNIPPETS)
    )
    sandbox_retry_delay_seconds: float = setting(
        2.0, Declared(number(float, 0, MAX_SECONDS), "delay between those retries", group=SNIPPETS)
    )
    sandbox_api_timeout_seconds: float = setting(
        30.0,
        Declared(
            number(float, 0, MAX_SECONDS, exclusive=True),
            "API allowance: one `/run_code` call must end within `code_timeout_seconds` plus it, connecting and "
            "the whole reply included",
            group=SNIPPETS,
        ),
    )
    sandbox_no_proxy: bool = setting(True, Declared(to_bool, "bypass proxies to reach the sandbox", group=SNIPPETS))
    # ---- scoring ----
    step_timeout_seconds: float = setting(
        1800.0,
        Declared(
            number(float, 0, MAX_SECONDS, exclusive=True),
            "one step's test script when scoring",
            stages=("score",),
            recorded=True,
            group=SCORING,
        ),
    )
    step_memory_mb: int = setting(
        8192,
        Declared(
            number(int, 64, MAX_MEMORY_MB),
            "memory limit of one test script: each of its processes' address space, and where a memory cgroup is "
            "in force (the confinement line says) all its processes and its scratch together at most this plus "
            "`scratch_limit_mb`; also the largest values frame the engine accepts from it (at most 1 GiB)",
            stages=("score",),
            recorded=True,
            group=SCORING,
        ),
    )
    scratch_limit_mb: int = setting(
        DEFAULT_SCRATCH_LIMIT_MB,
        Declared(
            number(int, 1, MAX_MEMORY_MB),
            "size of the scratch folder of one test script or tool snippet (a tmpfs, so memory: at most "
            "`step_memory_mb`, and for snippets at most `sandbox_memory_limit_mb`); writing more fails inside "
            "that step only. Part of the score settings and the verdict-cache key; of the generation settings in "
            f"tool_use with local snippets when not {DEFAULT_SCRATCH_LIMIT_MB}",
            stages=("score",),
            stages_when={"generate": _snippets_scratch_changed},
            group=SCORING,
        ),
    )
    score_workers: int = setting(
        os.cpu_count() or 1,
        Declared(
            number(int, 1, MAX_PARALLEL), "test scripts run at once", shown_default="number of CPUs", group=SCORING
        ),
    )
    concurrency: int = setting(
        16,
        Declared(
            number(int, 1, MAX_PARALLEL),
            "model calls in flight (problems generated at once); match a local server's parallel slots",
            group=GENERATION,
        ),
    )
    executor: Executor = setting(
        "local",
        choice(
            EXECUTORS,
            "`dask` scores on a Dask cluster (`scheduler=tcp://host:8786`, or a LocalCluster)",
            recorded=True,
            group=SCORING,
        ),
    )
    scheduler: str = setting(
        "",
        Declared(to_text, "the Dask scheduler's address under `executor=dask`", shown_default='""', group=SCORING),
    )
    confinement: ConfinementPolicy = setting(
        "auto",
        choice(
            CONFINEMENT_POLICIES,
            "`auto`: confine model code with what the kernel gives and say what that was; `required`: refuse to "
            "start without full confinement (see [the trust model](protocol-and-trust-model.md#trust-model))",
            group=SCORING,
        ),
    )
    # Re-execute cached verdicts: "true" every selected step, "timeouts" the steps whose verdict is a timeout.
    rescore: Rescore = setting(
        "",
        Declared(
            _rescore,
            "`timeouts`: execute the cached timeout verdicts of the selection again; `true`: every selected step "
            "(see [The verdict cache](stages-and-artifacts.md#the-verdict-cache))",
            allowed=RESCORE_CHOICES,
            shown_default="false",
            group=SCORING,
        ),
    )
    reask_unhandled_replies: bool = setting(
        False,
        Declared(
            to_bool,
            "ask the endpoint again (a paid call) for a step whose journaled replies the pipeline failed to handle; "
            "without it such a step stays an error naming its reply journal, never read back into the same failure",
            group=GENERATION,
        ),
    )
    attempts: int = setting(
        1, Declared(number(int, 1, MAX_ATTEMPTS), "independent generations per problem", group=GENERATION)
    )
    attempt_strategy: AttemptStrategy = setting(
        "avg",
        choice(
            ATTEMPT_STRATEGIES,
            "over attempts: averaging or pass@k",
            group=GENERATION,
        ),
    )
    # ---- folders and data ----
    data_dir: str = setting("data", Declared(to_text, "where data lives", group=FOLDERS))
    results_dir: str = setting("results", Declared(to_text, "where runs go", group=FOLDERS))
    run: str = setting(
        "",
        Declared(
            to_text,
            "run name",
            shown_default="`[<dataset>-]<split>-<mode>-<bg or nobg>[-carrydef][-<protocol>]`",
            group=FOLDERS,
        ),
    )
    h5py_file: str = setting(
        "",
        Declared(
            to_text,
            "an explicit targets file (relative paths resolve under data_dir)",
            stages=("download",),
            shown_default="auto",
            group=FOLDERS,
        ),
    )
    allow_missing_targets: bool = setting(
        False,
        Declared(
            to_bool,
            "run even when some selected scored steps have no targets (they count as unresolved and are listed)",
            group=FOLDERS,
        ),
    )
    dataset_zip_url: str = setting(
        dataset_named(DEFAULT_DATASET).file_pins().table["default_dataset_zip_url"],
        Declared(
            _url,
            "archive to fetch when files are absent",
            stages=("download",),
            shown_default="AgentCompass's SciCode zip",
            group=FOLDERS,
        ),
    )
    dataset_base_url: str = setting(
        "",
        Declared(
            _url,
            "where a manifest-bound dataset's published files are fetched from when not staged (the pinned "
            "revision's path is appended)",
            shown_default="its published location",
            group=FOLDERS,
        ),
    )
    verify_checksums: bool = setting(
        True,
        Declared(to_bool, "refuse files whose sha256 differs from the pins", stages=("download",), group=FOLDERS),
    )
    # ---- comparison and export ----
    runs: tuple[str, ...] = setting(
        (),
        Declared(
            to_str_list,
            "for `doit compare`: two run directories (or `<model>/<run>`); for `doit export`: the runs to export "
            "(default: the run of the settings)",
            shown_default='""',
            group=COMPARISON,
        ),
    )
    allow_split_mismatch: bool = setting(
        False, Declared(to_bool, "`doit compare` accepts runs of different splits", group=COMPARISON)
    )
    config: str = setting(
        "",
        Declared(
            to_text, "a TOML file of settings (default: `scicode.toml` when present)", shown_default='""', group=FOLDERS
        ),
    )
    confirm: bool = setting(
        False,
        Declared(
            to_bool,
            "`doit clean generate`: remove the generations (paid model answers) of the run the command names with "
            "`model=` / `run=`; without it nothing is removed and the folder and its answer count are said",
            group=FOLDERS,
        ),
    )
    # ---- prices, US dollars per million tokens (cost figures only; no generation or scoring input) ----
    price_input_per_mtok: float | None = setting(
        None,
        Declared(
            _price,
            "US dollars per million input tokens; set with the output price (a cost per run, problem and attempt "
            "in the summary, report and index; unset, reports show tokens only)",
            shown_default="(unset)",
            group=PRICES,
        ),
    )
    price_output_per_mtok: float | None = setting(
        None,
        Declared(
            _price,
            "US dollars per million output tokens; set with the input price",
            shown_default="(unset)",
            group=PRICES,
        ),
    )
    price_cached_input_per_mtok: float | None = setting(
        None,
        Declared(
            _price,
            "US dollars per million cached input tokens, only with the other two; applied only when the API's usage "
            "states cached tokens, else they are priced as input",
            shown_default="(unset)",
            group=PRICES,
        ),
    )

    # ---- derived values -------------------------------------------------
    @property
    def run_name(self) -> str:
        """`run=`, else `[<dataset>-]<split>-<mode>-<bg|nobg>`, plus `-carrydef` under `carry=definition` and
        `-<protocol>` under `protocol=` (runs of another dataset, that carry code differently, or of a protocol's
        request parameters never share a folder)."""
        if self.run:
            return self.run
        name = f"{self.split}-{self.mode}-{'bg' if self.with_background else 'nobg'}"
        if self.dataset != DEFAULT_DATASET:
            name = f"{self.dataset}-{name}"
        if self.carry != DEFAULT_CARRY:
            name = f"{name}-{CARRY_RUN_SUFFIX[self.carry]}"
        return f"{name}-{self.protocol}" if self.protocol else name

    @property
    def view(self) -> View:
        """The problems and attempts this command line looks at (`stages.config.view.View`)."""
        return View(tuple(self.sample_ids), self.categories, self.attempts)

    @property
    def summary_tag(self) -> str:
        """The tag of this command line's view of the run (`stages.config.view.View.tag`)."""
        return self.view.tag

    @property
    def data_paths(self) -> DataPaths:
        return DataPaths(Path(self.data_dir))

    @property
    def benchmark(self) -> Benchmark:
        """The run's dataset bound to `data_dir`: what every stage asks for problems, counts and special cases."""
        return Benchmark(dataset_named(self.dataset), Path(self.data_dir))

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
    def grading_environments(self) -> tuple[Environment, ...]:
        """The named grading environments of `environments=` (none when unset: steps run in `python_binary`)."""
        return parse_environments(self.environments)

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

    def redacted(self) -> JSONObject:
        """Every setting as JSON, for `config.json`; no secret value is ever present."""
        record = {name: _shown(DECLARED[name].secrecy, _jsonable(getattr(self, name))) for name in VARIABLES}
        record["api_key_present"] = bool(self.api_key)
        return record


# ---------------------------------------------------------------------------
# Derived from the declarations
# ---------------------------------------------------------------------------

DECLARED: dict[str, Declared] = declared_of(fields(Settings))
VARIABLES: tuple[str, ...] = tuple(DECLARED)
ACCEPTED_NAMES: tuple[str, ...] = VARIABLES + PARAM_BLOCKS
COERCERS: dict[str, Callable[[str, Any], Any]] = {name: record.coerce for name, record in DECLARED.items()}
# The settings that change each stage's output. base_url is where the model lives, not what it is: moving endpoints
# resumes, never re-bills.
STAGE_INPUTS: dict[Stage, tuple[str, ...]] = stage_inputs_of(DECLARED)
# Settings that enter a stage's fingerprint only where they apply and differ from their default, so that artifacts
# written before the setting existed stay current (a generation is never re-billed for it).
OPTIONAL_STAGE_INPUTS: dict[Stage, dict[str, Callable[[Settings], bool]]] = optional_stage_inputs_of(DECLARED)
# The settings summary.md records among those that shape the scores.
RECORDED_SETTINGS: tuple[str, ...] = tuple(name for name, record in DECLARED.items() if record.recorded)


# ---------------------------------------------------------------------------
# The settings as JSON (fingerprints, the run's recorded configuration)
# ---------------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return {key: _jsonable(item) for key, item in value.items()}
    return value


def _shown(secrecy: Secrecy, value: Any) -> Any:
    """`value` as config.json shows it: without what may be a secret."""
    if secrecy == "url credentials":
        return _strip_url_credentials(value)
    if secrecy == "secret-named keys":
        return redact_mapping(value)
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
# Layering
# ---------------------------------------------------------------------------


def deep_merge(base: Mapping[str, object], override: Mapping[str, object]) -> dict[str, object]:
    """`override` over `base`; tables in both are merged the same way. The values are as given (each setting's
    coercer checks its own)."""
    merged = dict(base)
    for key, value in override.items():
        current = merged.get(key)
        if isinstance(value, Mapping) and isinstance(current, Mapping):
            merged[key] = deep_merge(current, value)
        else:
            merged[key] = value
    return merged


def _check_names(names: Iterable[object], origin: str) -> None:
    for name in names:
        if isinstance(name, str) and name in REQUEST_PARAM_EXAMPLES:
            example = json.dumps({name: REQUEST_PARAM_EXAMPLES[name]}, separators=(",", ":"))
            raise ConfigError(
                f"unknown variable {name!r} ({origin}): request parameters go in model_params, e.g. "
                f"model_params='{example}' (a protocol= fixes the published ones: {', '.join(protocol_names())})"
            )
        if name not in ACCEPTED_NAMES:
            raise ConfigError(
                f"unknown variable {name!r} ({origin}); {did_you_mean(str(name), ACCEPTED_NAMES)}"
                f"known variables: {', '.join(sorted(ACCEPTED_NAMES))}"
            )


def _read_toml(path: Path) -> dict[str, object]:
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"invalid config={shown_path(str(path))}: no such file") from None
    except (OSError, ValueError, RecursionError) as error:  # TOMLDecodeError, bytes that are not UTF-8, nesting
        detail = shown_value(str(error) or type(error).__name__)
        raise ConfigError(f"invalid config={shown_path(str(path))}: not readable TOML ({detail})") from None
    _check_names(data, f"in {path}")
    _check_plain_layer(data)
    return data


def _check_plain_layer(layer: Mapping[str, object]) -> None:
    """ConfigError for the first value of `layer` that no run could write or send (`stages.config.values.check_plain`:
    text that is not valid UTF-8, a number that is not finite, a TOML date, nesting beyond MAX_NESTING)."""
    for name, value in layer.items():
        check_plain(name, value)


def _expand_blocks(layer: Mapping[str, object], origin: str) -> dict[str, object]:
    """Lift the keys of benchmark_params/harness_params into the layer; model_params stays a dict."""
    flat: dict[str, object] = {}
    for block in PARAM_BLOCKS:
        if block in layer:
            content = to_dict(block, layer[block])
            _check_names(content, f"in {block} {origin}")
            _check_plain_layer(content)
            nested_blocks = [name for name in content if name in PARAM_BLOCKS]
            if nested_blocks:
                raise ConfigError(f"invalid {block}: {nested_blocks[0]} cannot be nested inside it")
            flat = deep_merge(flat, content)
    for name, value in layer.items():
        if name not in PARAM_BLOCKS:
            flat = deep_merge(flat, {name: value})
    if "model_params" in flat and isinstance(flat["model_params"], str):
        flat["model_params"] = to_dict("model_params", flat["model_params"])
        check_plain("model_params", flat["model_params"])
    return flat


def with_protocol(name: str, given: Mapping[str, object]) -> dict[str, object]:
    """The given values over the settings protocol `name` fixes (given values win; model_params is merged, the
    given request parameters over the protocol's). No protocol (""): the given values as they are."""
    found = protocol_named(name)
    if found is None:
        return dict(given)
    unknown = sorted(set(found.settings) - set(VARIABLES))
    if unknown:
        raise ConfigError(f"invalid protocol={name}: it fixes {unknown[0]}, which is not a setting")
    layered: dict[str, object] = dict(given)
    for setting_name, value in found.settings.items():
        if setting_name == REQUEST_PARAMS_SETTING:
            layered[setting_name] = deep_merge(
                to_dict(setting_name, value), to_dict(setting_name, given.get(setting_name, {}))
            )
        elif setting_name not in given:
            layered[setting_name] = value
    return layered


def load_settings(
    cli_vars: Mapping[str, str] | None = None,
    *,
    cwd: Path | None = None,
) -> Settings:
    """Resolve settings from defaults, the TOML file, JSON blocks and `name=value` words."""
    cli_vars = dict(cli_vars or {})
    cwd = Path(cwd or Path.cwd())
    _check_names(cli_vars, "on the command line")
    _check_plain_layer(cli_vars)

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
    cli_words: dict[str, object] = {k: v for k, v in cli_vars.items() if k not in PARAM_BLOCKS}
    if "model_params" in cli_words:
        cli_words["model_params"] = to_dict("model_params", cli_words["model_params"])
        check_plain("model_params", cli_words["model_params"])
    raw = deep_merge(deep_merge(toml_values, cli_blocks), cli_words)
    if "protocol" in raw:
        raw = with_protocol(COERCERS["protocol"]("protocol", raw["protocol"]), raw)

    values = {name: COERCERS[name](name, value) for name, value in raw.items()}
    if "split" not in values:
        values["split"] = "validation" if values.get("model", Settings.model) == "gold" else "all"
    settings = Settings(**values)
    _check_consistency(settings)
    return settings


def _check_consistency(settings: Settings) -> None:
    if settings.model == "gold" and settings.dataset != DEFAULT_DATASET:
        raise ConfigError(
            f"invalid dataset={settings.dataset} with model=gold: the gold model has reference code for "
            f"dataset={DEFAULT_DATASET} split=validation only"
        )
    described = dataset_named(settings.dataset)
    if not described.has_split(settings.split):
        raise ConfigError(
            f"invalid split={settings.split} with dataset={settings.dataset}: expected all or "
            f"{', '.join(described.splits)} (the {settings.dataset} data holds no other split)"
        )
    if settings.model == "gold" and settings.split != "validation":
        origin = f" (set by protocol={settings.protocol})" if settings.protocol else ""
        raise ConfigError(
            f"invalid split={settings.split}{origin} with model=gold: the gold model has reference code for "
            "split=validation only"
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
