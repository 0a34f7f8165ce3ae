"""The test process: runs one step's code and test cells, and sends back the values the tests compare.

Untrusted by design: this program shares its interpreter with model-written code, so nothing it does
is taken on trust. It decides nothing. It runs, in one namespace like the official script,
`required_dependencies`, the carried code of earlier steps, the step's code and each test cell's
`prefetch` part (`checker/rewrite.py`), which calls `__scicode_capture(name, value)` for every value a checked
statement uses. Each captured value is encoded at once as plain data (`shared/wire.py`) and, when the cell has
run to its end, sent to the engine, which hands it to the trusted checker (`checker/checker.py`). The checker
holds the targets and evaluates every assertion; targets never enter this process.

It runs confined (`stages/confinement/confine.py`): PID 1 of new PID/network/IPC/mount namespaces, its scratch
folder a size-limited tmpfs, Landlock (reads: the interpreter, its libraries and the folders of the programs that
run under `python_binary`; writes: the scratch folder; no TCP; scoped signals), no capabilities, the seccomp
filter, a memory limit. Started as a fork of the warm zygote (`shared/zygote.py`) or fresh (`python runner.py
--channel-fd N --memory-mb M --scratch-limit-mb S [--seccomp-binding PATH]`, cwd = the scratch folder).

Messages to the engine (frames, `child_runtime.write_frame`):
* `V` + 4-byte header length + JSON `{"test": i, "temps": [[name, size], ...]}` + the encoded values;
* `J` + JSON `{"type": "deps_error" | "code_error" | "test_error" | "runner_error" | "done", "test", "reason"}`.
  The engine takes any record but "done" as a failed test with its reason: the kind named here is for the
  reader of a trace only (model code could send any of them).
"""

from __future__ import annotations

import argparse
import builtins
import json
import os
import sys
import traceback
import types
from typing import Any, TypedDict

_SHARED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "shared")
if _SHARED not in sys.path:
    sys.path.insert(0, _SHARED)  # run by path: the shared modules (framing, wire format) sit beside this folder

import child_runtime  # noqa: E402 - found through the lines above when run by path
from child_runtime import read_frame, short_exception, write_frame  # noqa: E402

PROTOCOL_VERSION = 2
CAPTURE_FUNCTION = "__scicode_capture"
CODE_FILENAME_PREFIX = "<scicode-"
REASON_LIMIT = 2000


class StepFailed(Exception):
    def __init__(self, kind: str, reason: str, test: int | None = None) -> None:
        super().__init__(reason)
        self.kind, self.reason, self.test = kind, reason, test


class Channel:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def report(self, kind: str, reason: str = "", test: int | None = None) -> None:
        record = {"type": kind, "test": test, "reason": reason[:REASON_LIMIT]}
        write_frame(self.fd, b"J" + json.dumps(record).encode("utf-8"))

    def values(self, test: int, captured: list[tuple[str, bytes]]) -> None:
        header = json.dumps({"test": test, "temps": [[name, len(blob)] for name, blob in captured]}).encode("utf-8")
        write_frame(self.fd, b"V" + len(header).to_bytes(4, "big") + header + b"".join(blob for _, blob in captured))


def _compile(source: str, label: str) -> types.CodeType:
    return compile(source, f"{CODE_FILENAME_PREFIX}{label}>", "exec", dont_inherit=True)


def _write_traceback(error: BaseException) -> None:
    try:
        sys.stderr.write("".join(traceback.format_exception(type(error), error, error.__traceback__)))
        sys.stderr.flush()
    except Exception:  # noqa: BLE001
        pass


def _run(code: types.CodeType, namespace: dict[str, object], label: str, kind: str, test: int | None) -> None:
    try:
        exec(code, namespace)
    except BaseException as error:  # noqa: BLE001 - every way code under test can end is reported
        _write_traceback(error)
        if isinstance(error, SystemExit):
            raise StepFailed(
                kind,
                f"code under test raised {short_exception(error)} during {label} (exiting early is not a pass)",
                test,
            ) from None
        raise StepFailed(kind, f"{label} raised {short_exception(error)}", test) from None


class Section(TypedDict):
    label: str
    code: str


class PrefetchSpec(TypedDict):
    index: int
    prefetch: str  # the test's cell with its compared values captured instead of checked


class StepSpec(TypedDict):
    """What the engine sends (`StepJob.test_spec`, JSON): the code to run and each test's model side."""

    protocol: int
    step_id: str
    deps: str
    sections: list[Section]
    tests: list[PrefetchSpec]
    modules: list[str]  # imported before the step's code


def run_step(channel: Channel, spec: StepSpec) -> None:
    import wire

    child_runtime.preload(tuple(spec.get("modules", ())))
    module = types.ModuleType("__main__")
    namespace = module.__dict__
    namespace["__builtins__"] = builtins
    sys.modules["__main__"] = module
    sys.argv = [f"{spec['step_id']}.py"]
    try:
        exec(_compile(spec["deps"], "dependencies"), namespace)
    except BaseException as error:  # noqa: BLE001
        raise StepFailed("deps_error", f"required dependencies failed: {short_exception(error)}") from None
    sections = []
    for section in spec["sections"]:
        try:
            sections.append((section["label"], _compile(section["code"], section["label"])))
        except SyntaxError as error:
            raise StepFailed(
                "code_error", f"syntax error in {section['label']}: {error.msg} (line {error.lineno})"
            ) from None
    tests = []
    for test in spec["tests"]:
        try:
            tests.append((test["index"], _compile(test["prefetch"], f"test {test['index'] + 1}")))
        except SyntaxError as error:
            raise StepFailed("runner_error", f"test {test['index'] + 1} does not compile: {error.msg}") from None
    for label, code in sections:
        _run(code, namespace, label, "code_error", None)
    for index, code in tests:
        captured: list[tuple[str, bytes]] = []

        def capture(name: str, value: Any, captured: list[tuple[str, bytes]] = captured) -> None:
            captured.append((name, wire.encode(value)))

        namespace[CAPTURE_FUNCTION] = capture
        _run(code, namespace, f"test {index + 1}", "test_error", index)
        channel.values(index, captured)


def serve(channel_fd: int) -> int:
    channel = Channel(channel_fd)
    try:
        spec = json.loads(read_frame(channel_fd).decode("utf-8"))
    except Exception as error:  # noqa: BLE001
        sys.stderr.write(f"[test process] no job received: {error}\n")
        return 2
    if spec.get("protocol") != PROTOCOL_VERSION:
        sys.stderr.write("[test process] protocol mismatch\n")
        return 2
    code = 0
    try:
        run_step(channel, spec)
        channel.report("done")
    except StepFailed as failure:
        channel.report(failure.kind, failure.reason, failure.test)
        code = 1
    except Exception as error:  # noqa: BLE001 - a defect of this program is an evaluation error
        _write_traceback(error)
        channel.report("runner_error", f"test process error: {short_exception(error)}")
        code = 3
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    return code


def serve_confined(
    channel_fd: int, memory_mb: int | None, read_paths: list[str], scratch: str, scratch_limit_mb: int | None = None
) -> int:
    """In the confined process (B): enter the sandbox, then run the step; never returns into a caller's loop."""
    import tempfile

    tempfile.tempdir = None  # the zygote may have cached another temp folder
    child_runtime.confine_module().enter_sandbox(
        read_paths, [scratch], memory_mb, scratch=scratch, scratch_limit_mb=scratch_limit_mb
    )
    return serve(channel_fd)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="SciCode test process (run by the scoring engine)")
    parser.add_argument("--channel-fd", type=int, required=True)
    parser.add_argument("--memory-mb", type=int, default=0)
    parser.add_argument("--scratch-limit-mb", type=int, default=0)
    parser.add_argument("--seccomp-binding", default=None)
    options = parser.parse_args(argv)
    child_runtime.preload()
    confine = child_runtime.confine_module()
    confine.prepare_seccomp(options.seccomp_binding)
    read_paths = child_runtime.sandbox_read_paths()
    scratch = os.getcwd()
    memory_mb, scratch_limit_mb = options.memory_mb or None, options.scratch_limit_mb or None
    confine.exit_like(
        confine.supervise(lambda: serve_confined(options.channel_fd, memory_mb, read_paths, scratch, scratch_limit_mb))
    )


if __name__ == "__main__":
    main()
