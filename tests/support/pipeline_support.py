"""Running the real pipeline in tests: doit subprocesses, scripted model servers, answers and run files."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import threading
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from stages.benchmark.problems import Step, load_problems
from stages.config.settings import Settings
from stages.generate.server import ErrorReply, ModelReply, ModelRequest, ModelServer, Reply, StallReply
from stages.score.parent.stage import ScoreSummary
from stages.storage.artifacts import validate
from stages.storage.paths import DataPaths

PROJECT_ROOT = Path(__file__).resolve().parents[2]


DODO = PROJECT_ROOT / "dodo.py"


DEAD_URL = "http://127.0.0.1:9/scicode.zip"  # nothing listens on the discard port: download uses staged files


TEST_API_KEY = "sk-pipeline-test-6f1c0d9e2b"  # must reach the server and never land in a file


NEXT_STEP_MARKER = "NEXT STEP - PROBLEM STEP AND FUNCTION HEADER:"  # the template with background
# The next-step line of each official template (without background, it names a problem description)
NEXT_STEP_MARKERS = (NEXT_STEP_MARKER, "NEXT STEP - PROBLEM DESCRIPTION AND FUNCTION HEADER:")


DEPENDENCIES_MARKER = "\nDEPENDENCIES:"


NOTHING_TO_DO = "nothing to do: everything up to date"


# What a no-op rerun must never import: the model client and the scoring engine (its parent side, the
# executors and the test-process runtime). Importing any of them is what made a no-op rerun take seconds.
NOOP_RERUN_FORBIDDEN_MODULES = (
    "openai",
    "stages.generate.client",
    "stages.generate.loops",
    "stages.score.parent.engine",
    "stages.score.parent.executor",
    "stages.score.parent.dask_executor",
    "stages.score.parent.launcher",
    "stages.score.checker.verdict_rules",
    "stages.score.shared.zygote",
    "stages.score.test_process.runner",
    "stages.score.shared.child_runtime",
    "stages.score.checker.checker",
    "dask",
    "distributed",
)

# Runs doit's command line in this interpreter and, at exit, writes the names of every imported module
# (one a line) to the file named by its first argument.
_IMPORTS_PROBE = (
    "import atexit, runpy, sys\n"
    "target = sys.argv.pop(1)\n"
    "def write_modules():\n"
    "    with open(target, 'w', encoding='utf-8') as handle:\n"
    "        handle.write('\\n'.join(sorted(sys.modules)))\n"
    "atexit.register(write_modules)\n"
    "sys.argv = ['doit', *sys.argv[1:]]\n"
    "runpy.run_module('doit', run_name='__main__')\n"
)


def run_doit_listing_imports(
    workdir: Path, *args: str, api_key: str | None = None, timeout: float = 400
) -> tuple[subprocess.CompletedProcess[str], frozenset[str]]:
    """Run doit in a fresh interpreter in `workdir`; its result and every module it had imported at exit."""
    listing = workdir / "imported_modules.txt"
    listing.unlink(missing_ok=True)
    command = [sys.executable, "-c", _IMPORTS_PROBE, str(listing), *doit_command(workdir, *args)[3:]]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, cwd=workdir, env=doit_environment(api_key)
    )
    assert listing.is_file(), f"the probe wrote no module list\n{result.stderr}"
    modules = frozenset(listing.read_text(encoding="utf-8").split())
    listing.unlink()
    return result, modules


# Runs doit's command line in this interpreter and, at exit, writes how often it parsed each artifact file
# (`stages.storage.store.parse_counts`) as JSON lines [kind, path, count] to the file named by its first argument.
_PARSES_PROBE = (
    "import atexit, json, runpy, sys\n"
    "target = sys.argv.pop(1)\n"
    "def write_counts():\n"
    "    from stages.storage.store import parse_counts\n"
    "    with open(target, 'w', encoding='utf-8') as handle:\n"
    "        for (kind, path), count in sorted(parse_counts().items()):\n"
    "            handle.write(json.dumps([kind, path, count]) + '\\n')\n"
    "atexit.register(write_counts)\n"
    "sys.argv = ['doit', *sys.argv[1:]]\n"
    "runpy.run_module('doit', run_name='__main__')\n"
)


def run_doit_counting_parses(
    workdir: Path, *args: str, timeout: float = 400
) -> tuple[subprocess.CompletedProcess[str], dict[tuple[str, str], int]]:
    """Run doit in a fresh interpreter in `workdir`; its result and how often it parsed each artifact file, by
    (kind, path)."""
    listing = workdir / "parse_counts.jsonl"
    listing.unlink(missing_ok=True)
    command = [sys.executable, "-c", _PARSES_PROBE, str(listing), *doit_command(workdir, *args)[3:]]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, cwd=workdir, env=doit_environment()
    )
    assert listing.is_file(), f"the probe wrote no parse counts\n{result.stderr}"
    counts = {
        (kind, path): count
        for kind, path, count in map(json.loads, listing.read_text(encoding="utf-8").split("\n")[:-1])
    }
    listing.unlink()
    return result, counts


def results_snapshot(workdir: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under `workdir`/results: its modification time (ns) and its bytes, by relative path."""
    root = workdir / "results"
    return {
        str(path.relative_to(root)): (path.stat().st_mtime_ns, path.read_bytes())
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def forbidden_imports(modules: Iterable[str], forbidden: Iterable[str] = NOOP_RERUN_FORBIDDEN_MODULES) -> list[str]:
    """The modules of `modules` that are, or sit inside, one of `forbidden`."""
    roots = tuple(forbidden)
    return sorted(name for name in modules if any(name == root or name.startswith(root + ".") for root in roots))


def doit_command(workdir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "doit", "-f", str(DODO), "-d", str(workdir), *args]


def doit_environment(api_key: str | None = None) -> dict[str, str]:
    """The caller's environment without any real key; `api_key` as OPENAI_API_KEY when given."""
    env = {name: value for name, value in os.environ.items() if name != "OPENAI_API_KEY"}
    if api_key is not None:
        env["OPENAI_API_KEY"] = api_key
    return env


def start_doit(workdir: Path, *args: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
    """`doit` started in a session of its own (a test may signal its whole group), its output piped; `env`: the
    test key's environment unless given."""
    return subprocess.Popen(
        doit_command(workdir, *args),
        cwd=workdir,
        env=dict(env) if env is not None else doit_environment(TEST_API_KEY),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def run_doit(
    workdir: Path, *args: str, api_key: str | None = None, timeout: float = 400
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        doit_command(workdir, *args),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=workdir,
        env=doit_environment(api_key),
    )


def output_of(result: subprocess.CompletedProcess[str]) -> str:
    return result.stdout + result.stderr


def assert_ok(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, output_of(result)


def steps_of(data_dir: Path, problem_ids: Iterable[str], split: str = "all") -> dict[str, Step]:
    wanted = set(problem_ids)
    return {
        step.step_id: step
        for problem in load_problems(DataPaths(data_dir), split)
        if problem.problem_id in wanted
        for step in problem.steps
    }


class Conversation(Protocol):
    """What the helpers below read of a request: its messages (a `ModelRequest`'s, or those of a raw request)."""

    @property
    def messages(self) -> Sequence[Mapping[str, Any]]: ...


def is_preflight_probe(request: Conversation) -> bool:
    """A request of the endpoint preflight (stages.preflight.endpoint): one short user message, no step prompt."""
    return not any(
        marker in (message.get("content") or "") for message in request.messages for marker in NEXT_STEP_MARKERS
    )


PROBE_REPLY = ModelReply(text="ok", prompt_tokens=8, completion_tokens=1)


def next_step_block(request: Conversation) -> str:
    """The next-step part of the step prompt (the last user message holding it)."""
    for message in reversed(request.messages):
        content = message.get("content") or ""
        for marker in NEXT_STEP_MARKERS:
            if message.get("role") == "user" and marker in content:
                return content.split(marker, 1)[1].split(DEPENDENCIES_MARKER, 1)[0]
    raise AssertionError("no step prompt in the request")


def step_asked(request: Conversation, steps: Mapping[str, Step]) -> str:
    """The id of the step whose header and return line end the prompt's next-step block (exactly one)."""
    block = next_step_block(request).rstrip()
    matches = [
        step_id
        for step_id, step in steps.items()
        if block.endswith((step.function_header + "\n\n" + step.return_line).rstrip())
    ]
    assert len(matches) == 1, f"prompt matches steps {matches}"
    return matches[0]


def fenced(code: str) -> str:
    return f"Here is the implementation.\n\n```python\n{code.rstrip()}\n```\n"


def body_indent(header: str) -> str:
    """The indentation of the header's last line (its docstring's end): where the body goes."""
    last = [line for line in header.rstrip().splitlines() if line.strip()][-1]
    return last[: len(last) - len(last.lstrip())] or "    "


def reference_answer(step: Step) -> str:
    assert step.ground_truth_code, f"step {step.step_id} has no reference code"
    return fenced(step.ground_truth_code)


def checked_fence(code: str) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # official docstrings hold invalid escapes such as "\\p"
        ast.parse(code)
    return fenced(code)


def wrong_answer(step: Step) -> str:
    """The step's header with a body returning None: valid code, wrong answer, fast to test."""
    return checked_fence(f"{step.function_header.rstrip()}\n{body_indent(step.function_header)}return None\n")


def looping_answer(step: Step) -> str:
    indent = body_indent(step.function_header)
    return checked_fence(f"{step.function_header.rstrip()}\n{indent}while True:\n{indent}    pass\n")


PROSE_ANSWER = "I would solve this with a few numpy calls, iterating until the residual is small."


def text_reply(text: str) -> ModelReply:
    return ModelReply(text=text, prompt_tokens=100, completion_tokens=len(text) // 4)


GATE_SECONDS = 120.0


class ScriptedModel:
    """A responder that answers each step from a table of step id -> reply (default: the reference code).

    Records the step id of every request in `asked` (the preflight's probes in `probes`); rejects requests without
    the expected bearer key.
    """

    def __init__(
        self,
        steps: Mapping[str, Step],
        replies: Mapping[str, Reply | str] | None = None,
        *,
        default: Callable[[Step], Reply | str] = reference_answer,
        api_key: str | None = TEST_API_KEY,
        stall_seconds: float = 0.0,
        gate: threading.Event | None = None,
    ) -> None:
        self.steps = dict(steps)
        self.gate = gate  # when given, every step's answer waits until the test sets it (at most GATE_SECONDS)
        self.replies = dict(replies or {})
        self.default = default
        self.api_key = api_key
        self.stall_seconds = stall_seconds
        self.asked: list[str] = []
        self.unauthorized = 0
        self.probes = 0
        self._lock = threading.Lock()

    def __call__(self, request: ModelRequest) -> Reply:
        if self.api_key is not None and request.headers.get("authorization") != f"Bearer {self.api_key}":
            with self._lock:
                self.unauthorized += 1
            return ErrorReply(401, "invalid api key", code="invalid_api_key")
        if is_preflight_probe(request):
            with self._lock:
                self.probes += 1
            return PROBE_REPLY
        step_id = step_asked(request, self.steps)
        with self._lock:
            self.asked.append(step_id)
        if self.gate is not None:
            self.gate.wait(GATE_SECONDS)
        reply = self.replies.get(step_id) or self.default(self.steps[step_id])
        if isinstance(reply, str):
            reply = text_reply(reply)
        if not self.stall_seconds:
            return reply
        if isinstance(reply, StallReply):  # a scripted stall comes on top of the model's own
            return StallReply(self.stall_seconds + reply.seconds, reply.then)
        return StallReply(self.stall_seconds, reply)

    def counts(self) -> Counter[str]:
        with self._lock:
            return Counter(self.asked)

    def total(self) -> int:
        with self._lock:
            return len(self.asked)


def data_args(data_dir: Path, targets: Path | None) -> tuple[str, ...]:
    args = (f"data_dir={data_dir}", f"dataset_zip_url={DEAD_URL}")
    return args + ((f"h5py_file={targets}",) if targets is not None else ())


def model_args(server: ModelServer, name: str = "acme-coder-1", **extra: str) -> tuple[str, ...]:
    return (f"model={name}", f"base_url={server.base_url}", *(f"{key}={value}" for key, value in extra.items()))


def run_dir(workdir: Path, model: str, run: str) -> Path:
    return workdir / "results" / "scicode" / model / run


def load_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def step_statuses(details_dir: Path) -> dict[str, str]:
    statuses: dict[str, str] = {}
    for path in sorted(path for path in details_dir.glob("*.json") if path.is_file()):
        for step in load_json(path)["attempts"][0]["meta"]["evaluation"]["steps"]:
            statuses[step["step_id"]] = step["status"]
    return statuses


def mtimes(paths: Iterable[Path]) -> dict[str, int]:
    return {path.name: path.stat().st_mtime_ns for path in paths}


def files_containing(root: Path, needle: str) -> list[Path]:
    data = needle.encode()
    return [path for path in root.rglob("*") if path.is_file() and data in path.read_bytes()]


ARTIFACT_KINDS = {"config": "config", "selection": "selection", "summary": "summary", "identity": "identity"}


def artifact_kind(run: Path, path: Path) -> str:
    relative = path.relative_to(run)
    if relative.parts[0] == "generations":
        return "generation"
    if relative.parts[0] == "details":
        return "details"
    if relative.parts[0] in ("not_scored", "not_generated"):
        return relative.parts[0]
    return ARTIFACT_KINDS[relative.name.split("-", 1)[0].removesuffix(".json")]


def assert_every_artifact_validates(run: Path) -> None:
    paths = sorted(run.rglob("*.json"))
    assert paths
    for path in paths:
        validate(artifact_kind(run, path), load_json(path))  # raises on any invalid or half-written file


def process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, state letter) of every process, from /proc."""
    table: dict[int, tuple[int, str]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        table[int(stat.parent.name)] = (int(fields[1]), fields[0])
    return table


def descendants(pid: int) -> set[int]:
    table = process_table()
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, (parent, _) in table.items() if parent in frontier} - found
        found |= frontier
    return found


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "(gone)"


def running(pids: Iterable[int]) -> set[int]:
    """The processes of `pids` still running code: not zombies, and not in the middle of exiting (the kernel
    empties a process's command line when it releases its memory, before the process becomes a zombie)."""
    table = process_table()
    return {pid for pid in pids if pid in table and table[pid][1] != "Z" and _has_command_line(pid)}


def _has_command_line(pid: int) -> bool:
    try:
        return bool(Path(f"/proc/{pid}/cmdline").read_bytes())
    except OSError:
        return False


@dataclass(frozen=True)
class EmbeddedDefaultRun:
    """`doit run` with nothing set but the data (gold, validation, tool_use; targets derived from reference code)."""

    workdir: Path
    data_dir: Path
    result: subprocess.CompletedProcess[str]


@dataclass(frozen=True)
class ReferenceScoring:
    """Every validation problem, answered with its reference code, scored through `run_score` in one carry mode."""

    settings: Settings
    summaries: tuple[ScoreSummary, ...]
    executions: int  # test processes the scoring started (verdicts not served from the cache)
