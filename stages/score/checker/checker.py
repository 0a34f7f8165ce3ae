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
`{"type": "ready"}` once started, then `{"test", "passed", "reason"}` per values frame (with `compared` when a statement failed: `compared_values`); or
`{"type": "checker_error", "reason"}` when it cannot start.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import json
import os
import pickle
import resource
import sys
import traceback
from collections.abc import Callable, Mapping
from typing import Any, TypedDict

_SHARED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "shared")
if _SHARED not in sys.path:
    sys.path.insert(0, _SHARED)  # run by path: the shared modules (framing, wire format) sit beside this folder

import child_runtime  # noqa: E402 - found through the lines above when run by path
import value_description  # noqa: E402
from child_runtime import read_frame, short_exception, write_frame  # noqa: E402

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
TEMP_PREFIX = "__scicode_t"  # the names of captured values (rewrite.TEMP_PREFIX)
TARGET_NAME = "target"
DESCRIBED_VALUES = 4  # captured values described per failed statement, at most
TARGET_PATH_DEPTH = 4  # `target[0][1]...`: constant subscripts followed, at most
STATEMENT_CHARS = 500
REPLY_BYTES = 48 * 1024  # a reply's bound (the engine reads up to 64 KiB): a larger description is dropped


class CheckSpec(TypedDict):
    index: int
    check: str | None  # None: the test checks nothing
    temps: list[str]  # the names of the values the test process sends, in order


class CheckerSpec(TypedDict):
    """What the engine sends first (`StepJob.checker_spec`, JSON; the targets follow)."""

    protocol: int
    step_id: str
    deps: str  # what the checker runs of the step's dependencies
    tests: list[CheckSpec]


class ComparedValue(TypedDict):
    name: str
    description: Mapping[str, object]  # `value_description.describe`
    target: list[int | str] | None  # the target part it was compared with: the subscripts ([]: the whole target)


class Compared(TypedDict):
    """What the failed statement of a test compared (see `compared_values`)."""

    test: int
    statement: str
    uses_target: bool
    values: list[ComparedValue]


class _Judged(TypedDict):
    test: int | None
    passed: bool
    reason: str


class Reply(_Judged, total=False):
    """The checker's reply to one values frame (JSON)."""

    compared: Compared


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


# ---------------------------------------------------------------------------
# What a failed statement compared
# ---------------------------------------------------------------------------


def failing_line(error: BaseException, filename: str) -> int | None:
    """The line of the check program's top-level statement that raised `error`."""
    frame = error.__traceback__
    while frame is not None:
        if frame.tb_frame.f_code.co_filename == filename:
            return frame.tb_lineno
        frame = frame.tb_next
    return None


def _target_path(node: ast.AST) -> list[int | str] | None:
    """`target` or `target[k]...` with constant int or str subscripts: the subscripts; None for anything else."""
    path: list[int | str] = []
    while isinstance(node, ast.Subscript) and len(path) < TARGET_PATH_DEPTH:
        key = node.slice
        if not isinstance(key, ast.Constant) or not isinstance(key.value, (int, str)) or isinstance(key.value, bool):
            return None
        path.insert(0, key.value)
        node = node.value
    return path if isinstance(node, ast.Name) and node.id == TARGET_NAME else None


def _operands(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.Call):
        return [*node.args, *(keyword.value for keyword in node.keywords)]
    if isinstance(node, ast.Compare):
        return [node.left, *node.comparators]
    return []


def _target_refs(statement: ast.stmt) -> list[list[int | str]]:
    found: list[list[int | str]] = []

    def visit(node: ast.AST) -> None:
        path = _target_path(node)
        if path is not None:
            if path not in found:
                found.append(path)
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(statement)
    return found


def _temps(statement: ast.stmt) -> list[str]:
    names = sorted(
        (node.lineno, node.col_offset, node.id)
        for node in ast.walk(statement)
        if isinstance(node, ast.Name) and node.id.startswith(TEMP_PREFIX)
    )
    unique: list[str] = []
    for _, _, name in names:
        if name not in unique:
            unique.append(name)
    return unique


def _paired_targets(statement: ast.stmt, temps: list[str], refs: list[list[int | str]]) -> dict[str, list[int | str]]:
    """Each captured value's counterpart: the target (part) passed beside it to one comparison (a call's
    arguments, a comparison's sides); with one value and one target reference in the statement, that one."""
    pairs: dict[str, list[int | str]] = {}
    for node in ast.walk(statement):
        operands = _operands(node)
        names = [operand.id for operand in operands if isinstance(operand, ast.Name) and operand.id in temps]
        paths = [path for operand in operands if (path := _target_path(operand)) is not None]
        for name in names:
            if paths and name not in pairs:
                pairs[name] = paths[0]
    if not pairs and len(temps) == 1 and len(refs) == 1:
        pairs[temps[0]] = refs[0]
    return pairs


def compared_values(
    source: str, filename: str, error: BaseException, namespace: dict[str, object], index: int
) -> Compared | None:
    """What the failed statement of test `index` compared: its captured values, each described (model-side
    values only: the target is never described here) with the target part it was compared with (`target`:
    the subscripts, [] for the whole target; null when the statement pairs it with none). None when the
    statement cannot be found."""
    line = failing_line(error, filename)
    if line is None:
        return None
    tree = ast.parse(source, filename)
    statement = next((node for node in tree.body if node.lineno <= line <= (node.end_lineno or node.lineno)), None)
    if statement is None:
        return None
    temps = _temps(statement)
    refs = _target_refs(statement)
    pairs = _paired_targets(statement, temps, refs)
    text = ast.unparse(statement)
    return {
        "test": index,
        "statement": text if len(text) <= STATEMENT_CHARS else text[: STATEMENT_CHARS - 3] + "...",
        "uses_target": bool(refs),
        "values": [
            {"name": name, "description": value_description.describe(namespace.get(name)), "target": pairs.get(name)}
            for name in temps[:DESCRIBED_VALUES]
        ],
    }


def check_filename(index: int) -> str:
    return f"<scicode-check test {index + 1}>"


class Checker:
    def __init__(self, fd: int, spec: CheckerSpec, targets: list[bytes]) -> None:
        self.fd = fd
        self.compared: Compared | None = None
        self.tests = {int(test["index"]): test for test in spec["tests"]}
        self.codes = {
            index: compile(check, check_filename(index), "exec")
            for index, test in self.tests.items()
            if (check := test.get("check"))
        }
        self.targets = targets
        self.base: dict[str, object] = {"__builtins__": builtins}
        exec(compile(spec["deps"], "<scicode-check dependencies>", "exec"), self.base)

    def reply(self, test: int | None, passed: bool, reason: str, compared: Compared | None = None) -> None:
        record: Reply = {"test": test, "passed": passed, "reason": reason[:REASON_LIMIT]}
        if compared is not None:
            record["compared"] = compared
        try:
            data = json.dumps(record, allow_nan=False).encode("utf-8")
        except (TypeError, ValueError, RecursionError):
            data = b""
        if not data or len(data) > REPLY_BYTES:
            record.pop("compared", None)
            data = json.dumps(record).encode("utf-8")
        write_frame(self.fd, b"J" + data)

    def judge(self, frame: bytes) -> None:
        """Judge one values frame: exactly one reply, whatever the frame holds (never raises)."""
        self.compared = None
        try:
            test, passed, reason = self._verdict(frame)
        except BaseException as error:  # noqa: BLE001 - whatever the values made the checker do, a fail
            test, passed, reason = None, False, f"the checker failed on the values sent: {short_exception(error)}"
        self.reply(test, passed, reason, self.compared)

    def _describe_failure(self, index: int, error: BaseException, namespace: dict[str, object]) -> None:
        try:
            source = self.tests[index]["check"] or ""
            self.compared = compared_values(source, check_filename(index), error, namespace, index)
        except BaseException:  # noqa: BLE001 - no description, the verdict stands
            self.compared = None

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
            self._describe_failure(index, error, namespace)
            return index, False, f"{label} failed: {short_exception(error)}"
        except BaseException as error:  # noqa: BLE001 - library code raising on the compared values
            self._describe_failure(index, error, namespace)
            return index, False, f"{label} raised while comparing: {short_exception(error)}"
        finally:
            namespace.clear()
        return index, True, f"{label} passed"

    def _values(self, frame: bytes, wire: Any) -> tuple[int, dict[str, object]]:
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
        values: dict[str, object] = {}
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


def serve_confined(fd: int, memory_mb: int | None, read_paths: list[str], cpu_seconds: int | None = None) -> int:
    """Confine this process (memory, Landlock, ids, seccomp) and limit its CPU time to `cpu_seconds` (SIGXCPU, then
    SIGKILL a second later), so that a comparison that cannot finish ends even should the engine be gone; then
    judge the step."""
    child_runtime.confine_module().enter_sandbox(read_paths, [], memory_mb)
    if cpu_seconds:
        resource.setrlimit(resource.RLIMIT_CPU, (int(cpu_seconds), int(cpu_seconds) + 1))
    return serve(fd)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="SciCode checker (run by the scoring engine)")
    parser.add_argument("--channel-fd", type=int, required=True)
    parser.add_argument("--memory-mb", type=int, default=0)
    parser.add_argument("--cpu-seconds", type=int, default=0)
    parser.add_argument("--seccomp-binding", default=None)
    options = parser.parse_args(argv)
    child_runtime.preload()
    child_runtime.confine_module().prepare_seccomp(options.seccomp_binding)
    read_paths = child_runtime.sandbox_read_paths()
    code = serve_confined(options.channel_fd, options.memory_mb or None, read_paths, options.cpu_seconds or None)
    sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
