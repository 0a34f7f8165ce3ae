"""Built-in models served through the local OpenAI-compatible endpoint.

- `gold` answers each step with its reference code (`ground_truth_code`) in a ```python fence. In
  tool_use mode (the request offers `code_interpreter` and no tool result follows the step's prompt
  yet) it first runs that code once through the tool, then submits it: the whole tool loop is
  exercised with real answers.
- `replay:<file.json>` answers from a JSON object mapping step ids ("10.3") to full response texts;
  a step without an entry gets a short prose answer with no code (scored as a parse error).

The pipeline names the step with the `X-SciCode-Step` header, sent only to built-in models. Both
models go through the same HTTP client as real ones, so `doit run` without variables is a true
end-to-end self-test.

`SCICODE_BUILTIN_LATENCY_SECONDS` (environment, default 0) makes the built-in endpoint wait that many
seconds before every answer, like a slow real model: the pipeline benchmark and the streaming tests use
it. It is not a setting of the run (it changes no artifact and no fingerprint).
"""

from __future__ import annotations

import atexit
import json
import math
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from stages.benchmark.problems import Benchmark, Problem, ProblemDataError, Step, prefilled_code
from stages.config.settings import ConfigError, Settings
from stages.generate.server import ErrorReply, ModelReply, ModelRequest, ModelServer, Responder, ToolCallSpec
from stages.storage.paths import DataPaths

STEP_HEADER = "X-SciCode-Step"
LATENCY_VARIABLE = "SCICODE_BUILTIN_LATENCY_SECONDS"
MAX_LATENCY_SECONDS = 600.0
GOLD_MODEL = "gold"
REPLAY_PREFIX = "replay:"
CODE_INTERPRETER = "code_interpreter"  # same name as stages.generate.tools.CODE_INTERPRETER
CHARS_PER_TOKEN = 4  # built-in models report approximate token usage so summaries have numbers


class BuiltinModelError(ConfigError):
    """A built-in model cannot serve this configuration (stated in one line)."""


def is_builtin_model(model: str) -> bool:
    return model == GOLD_MODEL or (model.startswith(REPLAY_PREFIX) and bool(model[len(REPLAY_PREFIX) :].strip()))


def replay_file(model: str, cwd: Path | None = None) -> Path:
    """The replay file named by `replay:<file.json>`, resolved against `cwd` (default: the working dir)."""
    path = Path(model[len(REPLAY_PREFIX) :].strip()).expanduser()
    return path if path.is_absolute() else Path(cwd or Path.cwd()) / path


# ---------------------------------------------------------------------------
# Shared helpers
# ---------------------------------------------------------------------------


def approximate_tokens(text: str | None) -> int:
    return math.ceil(len(text or "") / CHARS_PER_TOKEN)


def prompt_tokens(request: ModelRequest) -> int:
    return sum(approximate_tokens(message.get("content")) for message in request.messages)


def fenced(code: str) -> str:
    return f"```python\n{code.rstrip()}\n```"


def step_of(request: ModelRequest) -> str | None:
    value = request.headers.get(STEP_HEADER.lower(), "").strip()
    return value or None


def has_tool_result_for_current_step(request: ModelRequest) -> bool:
    """True when a tool result follows the last user message (the step's prompt)."""
    for message in reversed(request.messages):
        if message.get("role") == "tool":
            return True
        if message.get("role") == "user":
            return False
    return False


def _missing_header_error(model: str) -> ErrorReply:
    return ErrorReply(
        400,
        f"built-in model {model} needs the {STEP_HEADER} header naming the step (e.g. 10.3)",
        code="missing_step_header",
    )


def _wrong_model_error(asked: str, served: str) -> ErrorReply:
    return ErrorReply(
        404, f"model {asked!r} is not served here (this endpoint serves {served!r})", code="model_not_found"
    )


def _requested_step(request: ModelRequest, served: str) -> str | ErrorReply:
    """The step a request to built-in model `served` names, or the error reply when it asks another model
    or lacks the step header."""
    if request.model != served:
        return _wrong_model_error(request.model, served)
    step_id = step_of(request)
    return _missing_header_error(served) if step_id is None else step_id


# ---------------------------------------------------------------------------
# gold
# ---------------------------------------------------------------------------


def _steps_by_id(problems: tuple[Problem, ...]) -> dict[str, tuple[Problem, Step]]:
    return {step.step_id: (problem, step) for problem in problems for step in problem.steps}


def reference_code(data_paths: DataPaths, problem: Problem, step: Step) -> str | None:
    if step.ground_truth_code:
        return step.ground_truth_code
    return prefilled_code(data_paths, step)


def no_reference_message(problem: Problem) -> str:
    return (
        f"model=gold has no reference code for problem {problem.problem_id} (split {problem.split}); "
        "gold answers the validation split only"
    )


@dataclass(frozen=True)
class GoldResponder:
    model: str
    data_paths: DataPaths
    steps: Mapping[str, tuple[Problem, Step]]

    def __call__(self, request: ModelRequest) -> ModelReply | ErrorReply:
        step_id = _requested_step(request, self.model)
        if isinstance(step_id, ErrorReply):
            return step_id
        if step_id not in self.steps:
            return ErrorReply(400, f"model=gold: unknown step {step_id}", code="unknown_step")
        problem, step = self.steps[step_id]
        code = reference_code(self.data_paths, problem, step)
        if code is None:
            return ErrorReply(400, no_reference_message(problem), code="no_reference_code")
        if CODE_INTERPRETER in request.tools and not has_tool_result_for_current_step(request):
            return self._run_code_first(request, step_id, code)
        answer = fenced(code)
        return ModelReply(
            text=answer, prompt_tokens=prompt_tokens(request), completion_tokens=approximate_tokens(answer)
        )

    def _run_code_first(self, request: ModelRequest, step_id: str, code: str) -> ModelReply:
        arguments = json.dumps({"code": code})
        call = ToolCallSpec(
            id=f"call_gold_{step_id.replace('.', '_')}_{request.index}", name=CODE_INTERPRETER, arguments=arguments
        )
        return ModelReply(
            text=None,
            tool_calls=(call,),
            finish_reason="tool_calls",
            prompt_tokens=prompt_tokens(request),
            completion_tokens=approximate_tokens(arguments),
        )


def check_gold_selection(settings: Settings) -> None:
    """Refuse gold when the selected problems (sample_ids, else the split) lack reference code."""
    problems = _load_for_gold(settings.benchmark, settings.split)
    wanted = set(settings.sample_ids)
    for problem in problems:
        if (not wanted or problem.problem_id in wanted) and not problem.has_reference_code:
            raise BuiltinModelError(no_reference_message(problem))


def _load_for_gold(benchmark: Benchmark, split: str) -> tuple[Problem, ...]:
    try:
        return benchmark.problems(split)
    except ProblemDataError as error:
        raise BuiltinModelError(f"model=gold cannot load the problems: {error}") from None


def gold_responder(settings: Settings) -> GoldResponder:
    check_gold_selection(settings)
    problems = _load_for_gold(settings.benchmark, "all")
    return GoldResponder(model=settings.model, data_paths=settings.data_paths, steps=_steps_by_id(problems))


# ---------------------------------------------------------------------------
# replay
# ---------------------------------------------------------------------------


def no_recorded_answer(step_id: str) -> str:
    return f"No answer was recorded for step {step_id}."


def load_replay(path: Path) -> dict[str, str]:
    """The step id -> response text mapping of a replay file; one-line errors naming the file. Read once per
    version of the file (the preflight's check and the endpoint share it)."""
    try:
        stat = path.stat()
    except OSError:
        stat = None
    version = (stat.st_size, stat.st_mtime_ns) if stat else None
    return dict(_parsed_replay(str(path), version))


@lru_cache(maxsize=8)
def _parsed_replay(path_text: str, version: tuple[int, int] | None) -> dict[str, str]:
    path = Path(path_text)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BuiltinModelError(f"invalid model=replay:{path}: no such file") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:  # RecursionError: nested too deep
        raise BuiltinModelError(f"invalid model=replay:{path}: not readable JSON ({type(error).__name__})") from None
    if not isinstance(data, dict):
        raise BuiltinModelError(
            f"invalid model=replay:{path}: expected a JSON object mapping step ids to response texts"
        )
    bad = next((key for key, value in data.items() if not isinstance(value, str)), None)
    if bad is not None:
        raise BuiltinModelError(f"invalid model=replay:{path}: the answer of step {bad!r} is not a string")
    return dict(data)


@dataclass(frozen=True)
class ReplayResponder:
    model: str
    answers: Mapping[str, str]

    def __call__(self, request: ModelRequest) -> ModelReply | ErrorReply:
        step_id = _requested_step(request, self.model)
        if isinstance(step_id, ErrorReply):
            return step_id
        answer = self.answers.get(step_id, no_recorded_answer(step_id))
        return ModelReply(
            text=answer, prompt_tokens=prompt_tokens(request), completion_tokens=approximate_tokens(answer)
        )


# ---------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------


def builtin_responder(settings: Settings) -> Responder:
    """The responder of the built-in model named by `settings.model`; BuiltinModelError if unusable."""
    if settings.model == GOLD_MODEL:
        return gold_responder(settings)
    if is_builtin_model(settings.model):
        return ReplayResponder(model=settings.model, answers=load_replay(replay_file(settings.model)))
    raise BuiltinModelError(f"invalid model={settings.model}: not a built-in model (gold or replay:<file.json>)")


def replay_version(model: str) -> str:
    """The resolved replay file and its size and mtime: an edited file gets a fresh responder."""
    if not model.startswith(REPLAY_PREFIX):
        return ""
    path = replay_file(model).resolve()
    try:
        stat = path.stat()
    except OSError:
        return str(path)  # missing: builtin_responder reports it
    return f"{path}:{stat.st_size}:{stat.st_mtime_ns}"


def builtin_latency_seconds(environ: Mapping[str, str] = os.environ) -> float:
    """The per-answer latency of the built-in endpoint (LATENCY_VARIABLE); BuiltinModelError when invalid."""
    text = environ.get(LATENCY_VARIABLE, "").strip()
    if not text:
        return 0.0
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not (0 <= seconds <= MAX_LATENCY_SECONDS):
        raise BuiltinModelError(
            f"invalid {LATENCY_VARIABLE}={text}: expected seconds between 0 and {MAX_LATENCY_SECONDS:g}"
        )
    return seconds


def responder_identity(settings: Settings) -> tuple[str, str, str]:
    """What determines a built-in responder: the model, its replay file version, and the data folder."""
    return settings.model, replay_version(settings.model), str(Path(settings.data_dir).resolve())


class BuiltinModelService:
    """The process-wide endpoints of built-in models: started lazily once per responder, stopped at exit."""

    _lock = threading.Lock()
    _servers: dict[tuple[str, str, str], ModelServer] = {}
    _stop_registered = False

    @classmethod
    def base_url_for(cls, settings: Settings) -> str:
        if settings.model == GOLD_MODEL:
            check_gold_selection(settings)  # every caller's selection, not only the first one's
        key = responder_identity(settings)
        with cls._lock:
            server = cls._servers.get(key)
            if server is None:
                server = ModelServer(
                    builtin_responder(settings), models=(settings.model,), latency_seconds=builtin_latency_seconds()
                ).start()
                cls._servers[key] = server
                if not cls._stop_registered:
                    atexit.register(cls.stop_all)
                    cls._stop_registered = True
            return server.base_url

    @classmethod
    def stop_all(cls) -> None:
        with cls._lock:
            servers, cls._servers = list(cls._servers.values()), {}
        for server in servers:
            server.stop()
