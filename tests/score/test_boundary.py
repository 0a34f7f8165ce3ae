"""The verdict boundary is total: whatever the test process sends (or makes the checker decode and compare),
the engine and the checker turn it into a verdict for that step, never an exception, and the untrusted side
never chooses the kind of outcome.

Entry points driven with generated hostile input (hypothesis, the suite's derandomized profile):

* `engine._Peer.receive`: any byte stream on the channel;
* `verdict_rules.on_test_frame` / `verdict_rules.on_checker_frame`, then `verdict_rules.decide`: any frame,
  well-formed or not;
* `verdict_rules.decide`: any session log (texts with lone surrogates, any failure the test process reported);
* `checker.Checker.judge`: any values frame, and well-formed frames of hostile values with the comparisons
  official cells use;
* `wire.decode`: any bytes, and valid frames with bytes changed;
* `engine.execute_step`: real test processes writing hostile frames on their channel.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stages.benchmark.problems import load_split
from stages.records.verdict import StepVerdict
from stages.score.checker.verdict_rules import SessionLog, decide, on_checker_frame, on_test_frame
from stages.score.parent.cache import VerdictCache
from stages.score.parent.engine import _Peer, execute_step
from stages.score.shared.child_runtime import CHILD_FOLDERS
from stages.statuses import STEP_STATUSES
from stages.storage.paths import DataPaths
from tests.score.score_helpers import make_job, problem
from tests.support.pipeline_support import data_args, load_json, output_of, run_doit, step_statuses

sys.path[:0] = [folder for folder in CHILD_FOLDERS if folder not in sys.path]
import checker as checker_module  # noqa: E402 - the checker runs as a top-level module
import child_runtime  # noqa: E402
import wire  # noqa: E402

DEEP = 200_000
SURROGATES = "\ud800\udfff\udc80"


def utf8(text: str) -> bytes:
    return text.encode("utf-8")


def assert_valid_text(text: str) -> None:
    text.encode("utf-8")  # raises on a lone surrogate


def values_frame(test: object, temps: object, blobs: bytes = b"") -> bytes:
    header = json.dumps({"test": test, "temps": temps}).encode()
    return b"V" + len(header).to_bytes(4, "big") + header + blobs


def record(value: object) -> bytes:
    return b"J" + json.dumps(value).encode()


# -- generated frames ---------------------------------------------------------------------------------


def hostile_text(max_size: int) -> st.SearchStrategy[str]:
    """Text with lone surrogates, NUL and escape sequences among any characters."""
    pieces = st.one_of(st.characters(categories=["Cs", "L", "N", "P", "S", "Z", "Cc"]), st.sampled_from(SPECIAL))
    return st.lists(pieces, max_size=max_size).map("".join)


SPECIAL = ["\ud800", "\udfff", "\x00", "\x1b[2J", "\u202e"]
json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=False),
    hostile_text(40),
)
json_values = st.recursive(
    json_leaves,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20,
)
record_fields = st.fixed_dictionaries(
    {},
    optional={
        "type": st.one_of(
            st.sampled_from(["done", "deps_error", "runner_error", "test_error", "code_error", "checker_error"]),
            json_values,
        ),
        "test": st.one_of(st.integers(min_value=-3, max_value=5), json_values),
        "reason": st.one_of(hostile_text(200), json_values),
        "passed": st.one_of(st.booleans(), json_values),
    },
)


def _deep_json(opening: bytes) -> bytes:
    return opening * DEEP


hostile_payloads = st.one_of(
    st.binary(max_size=300),
    st.builds(lambda fields: record(fields), record_fields),
    st.builds(lambda value: record(value), json_values),
    st.builds(lambda test, temps: values_frame(test, temps), json_values, json_values),
    st.sampled_from(
        [
            b"J" + _deep_json(b"["),
            b"J" + b'{"a":' * DEEP,
            b"J" + b"\xff\xfe\x00garbage",
            b'J{"type": "test_error", "test": 0, "reason": "\\ud800 lone"}',
            b"V" + (DEEP * 2).to_bytes(4, "big") + b'{"test": [' * DEEP,
            b"V" + (2**32 - 1).to_bytes(4, "big") + b"{}",
            b"V\x00\x00",
            b"V" + (10).to_bytes(4, "big") + b"\xff" * 10,
            b"",
        ]
    ),
)


def _peer() -> tuple[_Peer, socket.socket]:
    engine_end, other_end = socket.socketpair()
    return _Peer(engine_end, 1 << 20), other_end


# -- the engine ----------------------------------------------------------------------------------------


@given(st.lists(hostile_payloads, max_size=6), st.integers(min_value=1, max_value=4))
def test_the_engine_turns_any_test_frames_into_a_verdict(frames: list[bytes], total: int) -> None:
    checker, other = _peer()
    try:
        log = SessionLog(total=total)
        for frame in frames:
            on_test_frame(log, frame, checker)
        for returncode in (None, -9, 0, 1):
            status, reason = decide(log, returncode, 10.0)
            assert status in ("fail", "pass", "eval_error")
            assert status != "eval_error" or returncode is None  # never chosen by the test process
            assert_valid_text(reason)
    finally:
        checker.sock.close()
        other.close()


@given(st.lists(hostile_payloads, max_size=6), st.booleans())
def test_the_engine_turns_any_checker_frames_into_a_verdict(frames: list[bytes], sent_a_value: bool) -> None:
    log = SessionLog(total=2, forwarded=[0] if sent_a_value else [], checker_ready=sent_a_value)
    for frame in frames:
        on_checker_frame(log, frame)
    status, reason = decide(log, 0, 10.0)
    assert status in STEP_STATUSES
    assert_valid_text(reason)


@given(st.binary(max_size=2000), st.integers(min_value=1, max_value=64))
def test_the_engine_reads_any_byte_stream_as_frames_or_refuses_it(stream: bytes, chunk: int) -> None:
    peer, other = _peer()
    try:
        peer.limit = 200
        for start in range(0, len(stream), chunk):
            other.sendall(stream[start : start + chunk])
            try:
                frames = peer.receive()
            except ValueError as error:  # an oversized frame: the session is over (tampering)
                assert "limit" in str(error)
                return
            assert frames is not None and all(len(frame) <= 200 for frame in frames)
    finally:
        peer.sock.close()
        other.close()


texts = hostile_text(100)


@given(
    st.integers(min_value=1, max_value=4),
    st.dictionaries(st.integers(min_value=0, max_value=3), st.tuples(st.booleans(), texts), max_size=4),
    st.one_of(st.none(), st.tuples(st.one_of(st.none(), st.integers(min_value=0, max_value=3)), texts)),
    st.one_of(st.none(), texts),
    st.one_of(st.none(), texts),
    st.one_of(st.none(), st.integers(min_value=-64, max_value=255)),
    st.booleans(),
    st.booleans(),
)
def test_decide_is_total_and_only_the_trusted_side_makes_an_evaluation_error(
    total, results, failure, tamper, checker_error, returncode, complete, timed_out
) -> None:
    log = SessionLog(
        total=total,
        forwarded=sorted(results),
        results=results,
        failure=failure,
        tamper=tamper,
        checker_error=checker_error,
        complete=complete,
        timed_out=timed_out,
    )
    status, reason = decide(log, returncode, 5.0)
    assert status in STEP_STATUSES
    if status == "eval_error":
        assert checker_error or returncode is None
    assert isinstance(reason, str)


# -- the checker ---------------------------------------------------------------------------------------

CHECKS = [
    "assert np.allclose(__scicode_t0, target)",
    "assert __scicode_t0 == target",
    "assert cmp_tuple_or_list(__scicode_t0, target)",
    "assert np.isclose(np.sum(__scicode_t0), 1) and sorted(__scicode_t0)",
    "assert np.array_equal(np.asarray(__scicode_t0), target) or __scicode_t0[0] in target",
]
TARGETS = [np.arange(3.0), 2.5, (1, "a"), [np.zeros((0, 2)), {"k": 1.0}]]


def checker_for(check: str) -> tuple[checker_module.Checker, int, int]:
    read, write = os.pipe()
    spec = {
        "deps": "import numpy as np\nfrom scicode.compare.cmp import cmp_tuple_or_list",
        "tests": [{"index": 0, "check": check, "temps": ["__scicode_t0"]}, {"index": 1, "check": None, "temps": []}],
    }
    import pickle

    return checker_module.Checker(write, spec, [pickle.dumps(target) for target in TARGETS[:1]]), read, write


def one_reply(read: int) -> dict:
    os.set_blocking(read, False)
    reply = child_runtime.read_frame(read)
    with pytest.raises(BlockingIOError):
        os.read(read, 1)  # exactly one reply
    assert reply[:1] == b"J"
    parsed = json.loads(reply[1:])
    assert set(parsed) - {"compared"} == {"test", "passed", "reason"} and isinstance(parsed["passed"], bool)
    if "compared" in parsed:  # a failed statement: the model-side values it compared, described
        compared = parsed["compared"]
        assert parsed["passed"] is False and set(compared) == {"test", "statement", "uses_target", "values"}
        assert all(set(value) == {"name", "description", "target"} for value in compared["values"])
        assert len(reply) <= checker_module.REPLY_BYTES + 4096
    return parsed


@pytest.fixture(scope="module", autouse=True)
def checker_runtime():
    child_runtime.preload(("scicode.compare.cmp",))


@given(hostile_payloads)
def test_the_checker_answers_any_frame_with_one_verdict(frame: bytes) -> None:
    checker, read, write = checker_for(CHECKS[0])
    try:
        checker.judge(frame)
        reply = one_reply(read)
        assert not reply["passed"] or reply["test"] == 1
    finally:
        os.close(read)
        os.close(write)


hostile_values = st.recursive(
    st.one_of(
        json_leaves,
        st.binary(max_size=20),
        st.complex_numbers(allow_nan=True, allow_infinity=True),
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(min_value=-(10**200), max_value=10**200),
        st.sampled_from(
            [
                np.zeros((0, 1, 1)),
                np.array(["a", SURROGATES]),
                np.full((2, 2), np.nan),
                np.array([1 + 2j]),
                np.int8(-1),
                np.bool_(True),
                SURROGATES,
            ]
        ),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.one_of(st.text(max_size=4), st.integers()), inner, max_size=3),
        st.frozensets(st.integers(), max_size=3),
    ),
    max_leaves=12,
)


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(hostile_values, st.sampled_from(CHECKS), st.integers(min_value=0, max_value=3))
def test_the_checker_judges_any_value_it_can_decode_without_raising(value, check: str, cut: int) -> None:
    blob = wire.encode(value)
    blob = blob[: len(blob) - cut] if cut else blob  # and values cut short
    checker, read, write = checker_for(check)
    try:
        checker.judge(values_frame(0, [["__scicode_t0", len(blob)]], blob))
        reply = one_reply(read)
        assert reply["test"] in (0, None)
    finally:
        os.close(read)
        os.close(write)


@given(st.binary(max_size=400))
def test_wire_decodes_any_bytes_or_refuses_them(data: bytes) -> None:
    try:
        wire.decode(data)
    except wire.BadFrame:
        pass


@given(hostile_values, st.integers(min_value=0, max_value=10_000), st.binary(min_size=1, max_size=3))
def test_wire_decodes_changed_frames_or_refuses_them(value, where: int, replacement: bytes) -> None:
    blob = bytearray(wire.encode(value))
    where %= len(blob)
    blob[where : where + len(replacement)] = replacement
    try:
        wire.decode(bytes(blob))
    except wire.BadFrame:
        pass


def test_wire_refuses_a_skeleton_nested_200000_levels_deep() -> None:
    skeleton = b'["l",[' * DEEP
    with pytest.raises(wire.BadFrame):
        wire.decode(len(skeleton).to_bytes(8, "big") + skeleton)


# -- real test processes: hostile frames on the channel, forged failure kinds ---------------------------

FRAME_WRITER = """
import os

def _send(payload):
    os.write(3, len(payload).to_bytes(8, "big") + payload)

def tensor(*args):
    _send({payload!r})
    os._exit({exit_code})
"""


def verdict_with_frame(shared_scicode: Path, payload: bytes, exit_code: int = 1):
    code = FRAME_WRITER.format(payload=payload, exit_code=exit_code)
    return execute_step(make_job(shared_scicode, problem(shared_scicode, "19"), "19.1", {"19.1": code}))


def assert_written(verdict: StepVerdict, tmp_path: Path) -> None:
    """The verdict is writable where the pipeline writes it: details files and the verdict cache."""
    json.dumps(verdict.as_record(), ensure_ascii=False).encode("utf-8")
    VerdictCache(tmp_path / "cache").put("ab" + "0" * 62, verdict)
    for text in (verdict.reason, verdict.stdout, verdict.stderr):
        assert_valid_text(text)


@pytest.mark.parametrize(
    "payload",
    [
        b"V" + (DEEP * 2).to_bytes(4, "big") + b'{"test": ' + b"[" * DEEP,  # the JSON header 200,000 levels deep
        b"J" + b"[" * DEEP,
        b'J{"type": "test_error", "test": 0, "reason": "\\ud800 \\udfff lone surrogates"}',
        b"J\xff\xfe invalid UTF-8",
        b"V" + (2**32 - 1).to_bytes(4, "big") + b"{}",
        values_frame(0, [["__scicode_t0", 10**12]], b"\x00" * 16),  # a value past the end
        values_frame(0, [["__scicode_t0", 40]], (32).to_bytes(8, "big") + b'["l",[' * 4 + b"x" * 8),
    ],
    ids=["deep-header", "deep-record", "surrogates", "bad-utf8", "huge-header", "past-end", "bad-value"],
)
def test_hostile_frames_on_the_channel_fail_the_step(shared_scicode: Path, tmp_path: Path, payload: bytes) -> None:
    verdict = verdict_with_frame(shared_scicode, payload)
    assert verdict.status == "fail", (verdict.reason, verdict.stderr[-1500:])
    assert verdict.tests_passed == 0
    assert_written(verdict, tmp_path)


@settings(max_examples=8)
@given(hostile_payloads)
def test_any_frame_a_test_process_writes_ends_as_a_fail(shared_scicode: Path, payload: bytes) -> None:
    verdict = verdict_with_frame(shared_scicode, payload)
    assert verdict.status == "fail", (verdict.reason, verdict.stderr[-1500:])
    verdict.reason.encode("utf-8")


@pytest.mark.parametrize("kind", ["deps_error", "runner_error", "checker_error"])
def test_a_failure_of_a_kind_the_test_process_names_is_a_failed_test(shared_scicode: Path, kind: str) -> None:
    payload = record({"type": kind, "test": None, "reason": "targets missing: no targets file"})
    verdict = verdict_with_frame(shared_scicode, payload)
    assert (verdict.status, verdict.reason) == ("fail", "targets missing: no targets file")


def test_a_test_process_whose_json_encoder_breaks_fails(shared_scicode: Path) -> None:
    code = (
        "import json\n_dumps = json.dumps\n_calls = []\n"
        "def _broken(value, *a, **k):\n    _calls.append(1)\n    if len(_calls) == 1:\n        raise TypeError('no')\n"
        "    return _dumps(value, *a, **k)\n"
        "def tensor(*args):\n    json.dumps = _broken\n    return 0\n"
    )
    verdict = execute_step(make_job(shared_scicode, problem(shared_scicode, "19"), "19.1", {"19.1": code}))
    assert verdict.status == "fail", verdict.reason


def test_lone_surrogates_in_exceptions_and_output_reach_the_verdict_as_valid_text(
    shared_scicode: Path, tmp_path: Path
) -> None:
    code = (
        "import sys\ndef tensor(*args):\n    sys.stdout.buffer.write(b'\\xed\\xa0\\x80 out\\n')\n"
        "    sys.stdout.flush()\n    raise ValueError('\\ud800 boom \\udfff')\n"
    )
    verdict = execute_step(make_job(shared_scicode, problem(shared_scicode, "19"), "19.1", {"19.1": code}))
    assert verdict.status == "fail" and "boom" in verdict.reason, verdict.reason
    assert_written(verdict, tmp_path)


def test_a_dependency_the_checker_cannot_import_either_is_an_evaluation_error(shared_scicode: Path) -> None:
    prob = problem(shared_scicode, "19")
    job = make_job(shared_scicode, prob, "19.1", deps="import numpy as np\nimport no_such_module_here")
    verdict = execute_step(job)
    assert verdict.status == "eval_error", verdict.reason
    assert "No module named 'no_such_module_here'" in verdict.reason and verdict.reason.startswith("the checker")


FORGED_KIND = """```python
def tensor(*args):
    import json, os  # (top-level imports are removed from answers)
    record = {"type": "runner_error", "test": None, "reason": "targets missing: no targets file"}
    payload = b"J" + json.dumps(record).encode()
    os.write(3, len(payload).to_bytes(8, "big") + payload)
    os._exit(3)
```"""


@pytest.mark.slow
def test_a_run_never_blames_the_targets_for_what_a_test_process_said(
    workdir: Path, staged_data_dir: Path, dev_targets: Path
) -> None:
    prob = next(p for p in load_split(DataPaths(staged_data_dir), "validation") if p.problem_id == "19")
    reference = {step.step_id: f"```python\n{step.ground_truth_code}\n```" for step in prob.steps}
    replay = workdir / "answers.json"
    replay.write_text(json.dumps({**reference, "19.1": FORGED_KIND}), encoding="utf-8")
    result = run_doit(
        workdir,
        *data_args(staged_data_dir, dev_targets),
        f"model=replay:{replay}",
        "mode=naive",
        "split=validation",
        "sample_ids=19",
    )
    assert result.returncode == 0, output_of(result)
    assert "test_data.h5" not in result.stderr + result.stdout  # the targets are fine: nobody is told to restage
    (run,) = (workdir / "results" / "scicode").glob("*/validation-naive-bg")
    statuses = step_statuses(run / "details")
    assert statuses == {"19.1": "fail", "19.2": "fail"}  # 19.2 runs the carried 19.1 code too
    (summary_path,) = run.glob("summary*.json")
    summary = load_json(summary_path)
    assert summary["steps_without_targets"] == [] and summary["status_counts"]["eval_error"] == 0


@pytest.mark.parametrize("error", [MemoryError(), RecursionError("deep"), SystemExit(0), KeyboardInterrupt()])
def test_whatever_decoding_a_value_raises_the_checker_answers_with_a_failed_test(
    monkeypatch: pytest.MonkeyPatch, error: BaseException
) -> None:
    def exhausted(frame: bytes) -> object:
        raise error

    monkeypatch.setattr(wire, "decode", exhausted)
    checker, read, write = checker_for(CHECKS[0])
    try:
        checker.judge(values_frame(0, [["__scicode_t0", 2]], b"xx"))
        reply = one_reply(read)
        assert reply["passed"] is False and type(error).__name__ in reply["reason"]
    finally:
        os.close(read)
        os.close(write)
