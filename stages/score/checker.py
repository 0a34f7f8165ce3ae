"""The checker: decides every assertion of a step's tests, in a process that never runs model code.

Trusted. It receives from the engine what it runs of the step's `required_dependencies` (their imports
and the statements it evaluates itself: `rewrite.checker_scope`), each test's `check` program
(`rewrite.py`: the cell's imports, the statements of the cell it evaluates itself, the functions the
comparisons call, and the checked statements over captured values) and the step's targets; then, one
frame per test, the values the test process captured, exactly as that process sent them. Values are
rebuilt by `wire.decode`, which builds plain data only (no pickle, no code from the untrusted side).
Each test's check runs in a fresh namespace holding the dependencies' names, the captured values and
`target`; an `AssertionError` fails the test, any other exception fails it as "raised while comparing".

Whatever a values frame holds (malformed, deep, huge, values whose decoding or comparison raises
anything), the checker answers it with one verdict, never an exception: a failed test with the reason.
Only a start that fails (the dependencies do not import here either, unreadable targets) is a
`checker_error`, which the engine turns into an `eval_error`.

Shape honesty: the numpy comparisons (`allclose`, `isclose`, `array_equal`, `array_equiv` and the
`numpy.testing` asserts) refuse to compare an empty value with a non-empty one (an empty array of
shape (0, 1, 1) broadcasts against anything, so `np.allclose` would say True).

It runs confined like the test process (Landlock: reads of the interpreter only, no writes, no TCP; no
capabilities; the seccomp filter), with the step's memory limit. Frames (`child_runtime.write_frame`): in,
a JSON spec, a pickle of the per-test target pickles (made by the engine), then `V` frames; out, `J` + JSON
`{"type": "ready"}` once started, then `{"test", "passed", "reason"}` per values frame; or
`{"type": "checker_error", "reason"}` when it cannot start.
"""

from __future__ import annotations

import argparse
import builtins
import json
import os
import pickle
import sys
import traceback
from collections.abc import Callable
from typing import Any

import child_runtime
from child_runtime import read_frame, short_exception, write_frame

PROTOCOL_VERSION = 2
COMPARISONS = ("allclose", "isclose", "array_equal", "array_equiv")
TESTING_COMPARISONS = (
    "assert_allclose",
    "assert_array_equal",
    "assert_array_almost_equal",
    "assert_almost_equal",
    "assert_equal",
)
REASON_LIMIT = 2000
MAX_HEADER_BYTES = 1 << 20


class EmptyComparison(AssertionError):
    """An empty value compared with a non-empty one."""


def _size(value: Any) -> int | None:
    import numpy

    try:
        return int(numpy.size(value))
    except Exception:  # noqa: BLE001 - ragged or exotic values: no shape to judge
        return None


def _shape(value: Any) -> str:
    import numpy

    try:
        return str(numpy.shape(value))
    except Exception:  # noqa: BLE001
        return "?"


def _shape_honest(compare: Callable[..., Any]) -> Callable[..., Any]:
    def honest(first: Any, second: Any, *args: Any, **kwargs: Any) -> Any:
        sizes = (_size(first), _size(second))
        if None not in sizes and (sizes[0] == 0) != (sizes[1] == 0):
            raise EmptyComparison(
                f"an empty value (shape {_shape(first if sizes[0] == 0 else second)}) was compared "
                f"with a non-empty one (shape {_shape(second if sizes[0] == 0 else first)})"
            )
        return compare(first, second, *args, **kwargs)

    honest.__name__ = getattr(compare, "__name__", "compare")
    honest.__doc__ = getattr(compare, "__doc__", None)
    return honest


def install_shape_honesty() -> None:
    import numpy
    import numpy.testing

    for module, names in ((numpy, COMPARISONS), (numpy.testing, TESTING_COMPARISONS)):
        for name in names:
            setattr(module, name, _shape_honest(getattr(module, name)))


class Checker:
    def __init__(self, fd: int, spec: dict[str, Any], targets: list[bytes]) -> None:
        self.fd = fd
        self.tests = {int(test["index"]): test for test in spec["tests"]}
        self.codes = {
            index: compile(test["check"], f"<scicode-check test {index + 1}>", "exec")
            for index, test in self.tests.items()
            if test.get("check")
        }
        self.targets = targets
        self.base: dict[str, Any] = {"__builtins__": builtins}
        exec(compile(spec["deps"], "<scicode-check dependencies>", "exec"), self.base)

    def reply(self, test: int | None, passed: bool, reason: str) -> None:
        record = {"test": test, "passed": passed, "reason": reason[:REASON_LIMIT]}
        write_frame(self.fd, b"J" + json.dumps(record).encode("utf-8"))

    def judge(self, frame: bytes) -> None:
        """Judge one values frame: exactly one reply, whatever the frame holds (never raises)."""
        try:
            test, passed, reason = self._verdict(frame)
        except BaseException as error:  # noqa: BLE001 - whatever the values made the checker do, a fail
            test, passed, reason = None, False, f"the checker failed on the values sent: {short_exception(error)}"
        self.reply(test, passed, reason)

    def _verdict(self, frame: bytes) -> tuple[int | None, bool, str]:
        import wire

        try:
            index, values = self._values(frame, wire)
        except BaseException as error:  # noqa: BLE001 - malformed, over budget, or exhausting the checker
            return None, False, f"the test process sent malformed values: {short_exception(error)}"
        label = f"test {index + 1}"
        code = self.codes.get(index)
        if code is None:
            return index, True, f"{label} ran to its end (it checks nothing)"
        namespace = dict(self.base)
        namespace.update(values)
        try:
            if index < len(self.targets):
                namespace["target"] = pickle.loads(self.targets[index])
            exec(code, namespace)
        except AssertionError as error:
            return index, False, f"{label} failed: {short_exception(error)}"
        except BaseException as error:  # noqa: BLE001 - library code raising on the compared values
            return index, False, f"{label} raised while comparing: {short_exception(error)}"
        finally:
            namespace.clear()
        return index, True, f"{label} passed"

    def _values(self, frame: bytes, wire: Any) -> tuple[int, dict[str, Any]]:
        if frame[:1] != b"V" or len(frame) < 5:
            raise ValueError("a frame that is not a values frame")
        size = int.from_bytes(frame[1:5], "big")
        if size > MAX_HEADER_BYTES or 5 + size > len(frame):
            raise ValueError(f"a values header of {size} bytes (the limit is {MAX_HEADER_BYTES})")
        header = json.loads(frame[5 : 5 + size].decode("utf-8"))
        index = header.get("test") if isinstance(header, dict) else None
        if type(index) is not int or index not in self.tests:
            raise ValueError("values for an unknown test")
        expected = list(self.tests[index]["temps"])
        entries = header.get("temps")
        if not isinstance(entries, list):
            raise ValueError(f"test {index + 1}: a values header without its list of values")
        names = [entry[0] for entry in entries if isinstance(entry, list) and len(entry) == 2]
        if names != expected:
            missing = [name for name in expected if name not in names]
            raise ValueError(
                f"test {index + 1}: {len(missing)} of the {len(expected)} values the test compares never arrived"
                if missing
                else f"test {index + 1}: unexpected or repeated values"
            )
        values: dict[str, Any] = {}
        offset = 5 + size
        for name, length in entries:
            if type(length) is not int or length < 0 or offset + length > len(frame):
                raise ValueError(f"test {index + 1}: a value past the end of the frame")
            values[name] = wire.decode(frame[offset : offset + length])
            offset += length
        return index, values


def serve(fd: int) -> int:
    try:
        spec = json.loads(read_frame(fd).decode("utf-8"))
        targets = pickle.loads(read_frame(fd))
        if spec.get("protocol") != PROTOCOL_VERSION:
            raise ValueError("protocol mismatch")
        install_shape_honesty()
        checker = Checker(fd, spec, list(targets))
        write_frame(fd, b"J" + json.dumps({"type": "ready"}).encode("utf-8"))
    except Exception as error:  # noqa: BLE001 - no verdict can be given: an evaluation error
        sys.stderr.write("".join(traceback.format_exception(type(error), error, error.__traceback__)))
        write_frame(
            fd,
            b"J"
            + json.dumps(
                {"type": "checker_error", "reason": f"checker could not start: {short_exception(error)}"}
            ).encode("utf-8"),
        )
        return 3
    while True:
        try:
            frame = read_frame(fd)
        except EOFError:
            return 0
        except BaseException as error:  # noqa: BLE001 - the engine bounds frames; should it not, say so and stop
            sys.stderr.write(f"[checker] unreadable frame: {short_exception(error)}\n")
            return 3
        checker.judge(frame)


def serve_confined(fd: int, memory_mb: int | None, read_paths: list[str]) -> int:
    child_runtime.confine_module().enter_sandbox(read_paths, [], memory_mb)
    return serve(fd)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="SciCode checker (run by the scoring engine)")
    parser.add_argument("--channel-fd", type=int, required=True)
    parser.add_argument("--memory-mb", type=int, default=0)
    parser.add_argument("--seccomp-binding", default=None)
    options = parser.parse_args(argv)
    child_runtime.preload()
    child_runtime.confine_module().prepare_seccomp(options.seccomp_binding)
    code = serve_confined(options.channel_fd, options.memory_mb or None, child_runtime.sandbox_read_paths())
    sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
