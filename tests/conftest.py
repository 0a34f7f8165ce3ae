"""Shared fixtures: the read-only official data beside the project, and staged copies of it."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from stages.generate.server import ModelRequest, ModelServer, Reply

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
SHARED_SCICODE = PROJECT_ROOT.parent / "shared" / "scicode"
SHARED_SANDBOXFUSION = PROJECT_ROOT.parent / "shared" / "sandboxfusion"
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
    """`../shared/scicode` (official files, read-only); skips when absent."""
    if not (SHARED_SCICODE / "problems_dev.jsonl").is_file():
        pytest.skip(f"official SciCode data not found at {SHARED_SCICODE} (see README: Tests)")
    return SHARED_SCICODE


@pytest.fixture
def staged_data_dir(tmp_path: Path, shared_scicode: Path) -> Path:
    """A data_dir whose scicode/ folder holds copies of the official problem files (no targets)."""
    data_dir = tmp_path / "data"
    (data_dir / "scicode").mkdir(parents=True)
    for name in STAGED_FILES:
        shutil.copyfile(shared_scicode / name, data_dir / "scicode" / name)
    return data_dir


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


# Fixtures of the pipeline tests (tests/pipeline_support.py holds their helpers).


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
