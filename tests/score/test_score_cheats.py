"""Model code is hostile: every way it could pass without computing the answer, or harm the machine, fails.

All runs are real test processes (zygote forks, confined) judged by the real checker against the real
dev targets, on step 19.1 (`tensor`) and 19.2 (`n_tangle`, which calls `tensor`). Each test asserts the
verdict and its reason; the harm tests also assert that nothing outside the scratch folder changed,
that no process survives and that a secret of another process appears nowhere in the verdict.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from stages.score.parent.engine import execute_step
from tests.score.score_helpers import make_job, problem, run_code
from tests.support.process_scan import assert_no_process_with, unique_sleep_seconds

TENSOR = """
def tensor(*args):
    M = 1
    for a in args:
        M = np.kron(M, a)
    return M
"""
RIGHT_ANSWER = "    M = 1\n    for a in args:\n        M = np.kron(M, a)\n    return M\n"
SECRET = "sk-cheat-test-5b0c2e91d7a4"


def verdict_of(shared_scicode: Path, code: str, step_id: str = "19.1", **options):
    return run_code(shared_scicode, "19", step_id, code, **options)


def assert_fails(verdict, *fragments: str) -> None:
    assert verdict.status == "fail", (verdict.status, verdict.reason, verdict.stderr[-2000:])
    for fragment in fragments:
        assert fragment in verdict.reason, (verdict.reason, verdict.stderr[-2000:])


def assert_secret_absent(verdict) -> None:
    for text in (verdict.reason, verdict.stdout, verdict.stderr):
        assert SECRET not in text


def test_honest_code_passes(shared_scicode: Path) -> None:
    verdict = verdict_of(shared_scicode, TENSOR)
    assert verdict.status == "pass", (verdict.reason, verdict.stderr)
    assert (verdict.tests_passed, verdict.tests_total, verdict.returncode) == (3, 3, 0)


def test_wrong_answer_fails(shared_scicode: Path) -> None:
    verdict = verdict_of(shared_scicode, TENSOR.replace("return M", "return M * 2"))
    assert_fails(verdict, "test 1 failed", "AssertionError")
    assert verdict.tests_passed == 0


# -- 1, 2: the test process's own machinery is reachable, and decides nothing ---------------------------


@pytest.mark.parametrize(
    "code",
    [
        # rebinding what the test process calls, or its channel, so that it reports constants
        "import builtins\n_exec = builtins.exec\nbuiltins.exec = lambda *a, **k: None\ndef tensor(*args):\n    return 0\n",
        "import sys\nsys.modules['runner'].Channel.values = lambda self, test, captured: self.report('done')\n"
        "def tensor(*args):\n    return 0\n",
        "import sys\n_h = sys.modules['runner']\n_h.run_step = lambda channel, spec: None\ndef tensor(*args):\n    return 0\n",
        # the encoder of captured values replaced: every value becomes a constant
        "import sys, numpy\n_w = sys.modules['wire']\n_enc = _w.encode\n_w.encode = lambda value: _enc(numpy.zeros(4))\n"
        "def tensor(*args):\n    return 0\n",
        # standard-library decoders replaced (they decode nothing here: targets never arrive)
        "import json, pickle\njson.loads = lambda *a, **k: {}\npickle.loads = lambda *a, **k: 0\ndef tensor(*args):\n    return 0\n",
        # the comparison functions replaced in this process: comparisons happen in the checker
        "np.allclose = lambda *a, **k: True\nimport builtins\nbuiltins.all = lambda *a: True\ndef tensor(*args):\n    return 0\n",
    ],
)
def test_tampering_with_the_test_process_cannot_make_wrong_code_pass(shared_scicode: Path, code: str) -> None:
    verdict = verdict_of(shared_scicode, code)
    assert verdict.status == "fail", (verdict.reason, verdict.stderr[-1500:])
    assert verdict.tests_passed == 0


@pytest.mark.parametrize(
    "code",
    [
        "class AlwaysEqual:\n    def __eq__(self, other):\n        return True\n    def __array__(self, *a, **k):\n        return np.zeros(4)\n"
        "def tensor(*args):\n    return AlwaysEqual()\n",
        "class Sub(np.ndarray):\n    def __eq__(self, other):\n        return True\ndef tensor(*args):\n    return np.zeros(4).view(Sub)\n",
        "def tensor(*args):\n    return np.array([object()], dtype=object)\n",
    ],
)
def test_objects_that_pretend_to_match_cannot_be_sent(shared_scicode: Path, code: str) -> None:
    assert_fails(verdict_of(shared_scicode, code), "test 1 raised", "cannot be sent")


CHANNEL_WRITER = """
def _frame(payload):
    return len(payload).to_bytes(8, "big") + payload

def _forge():
    import json, os
    header = json.dumps({"test": 0, "temps": []}).encode()
    for index in range(3):
        header = json.dumps({"test": index, "temps": []}).encode()
        os.write(3, _frame(b"V" + len(header).to_bytes(4, "big") + header))
    for index in range(3):
        os.write(3, _frame(b"J" + json.dumps({"test": index, "passed": True, "reason": "ok"}).encode()))
    os.write(3, _frame(b"J" + json.dumps({"type": "done"}).encode()))
"""


@pytest.mark.parametrize("ending", ["    os._exit(0)\n", "    return 0\n"])
def test_forged_messages_on_the_channel_cannot_pass(shared_scicode: Path, ending: str) -> None:
    code = CHANNEL_WRITER + "def tensor(*args):\n    import os\n    _forge()\n" + ending
    verdict = verdict_of(shared_scicode, code)
    assert verdict.status == "fail" and verdict.tests_passed == 0, (verdict.reason, verdict.stderr[-1500:])


# -- 3: reading the memory of this or another process ---------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        "    return open('/proc/self/mem', 'rb').read(1)\n",
        "    import os\n    fd = os.open('/proc', os.O_RDONLY)\n    return os.open('self/mem', os.O_RDONLY, dir_fd=fd)\n",
        "    import os\n    fd = os.open('/proc', os.O_RDONLY)\n    return os.open(f'{os.getppid()}/mem', os.O_RDONLY, dir_fd=fd)\n",
        "    import os\n    return os.listdir('/proc')\n",
    ],
)
def test_process_memory_and_proc_are_unreadable(shared_scicode: Path, body: str) -> None:
    assert_fails(verdict_of(shared_scicode, "def tensor(*args):\n" + body), "test 1 raised PermissionError")


# -- 4: shape honesty --------------------------------------------------------------------------------


@pytest.mark.parametrize("empty", ["np.zeros((0, 1, 1))", "np.zeros((0,))", "[]"])
def test_an_empty_value_never_matches_a_non_empty_target(shared_scicode: Path, empty: str) -> None:
    verdict = verdict_of(shared_scicode, f"def tensor(*args):\n    return {empty}\n")
    assert_fails(verdict, "test 1 failed", "an empty value")


# -- 5, 6: files outside scratch and secrets of other processes -----------------------------------------


def test_writes_deletes_and_renames_outside_scratch_are_refused(shared_scicode: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    attacks = [
        f"open({str(victim)!r}, 'w').write('x')",
        f"os.remove({str(victim)!r})",
        f"os.rename({str(victim)!r}, {str(tmp_path / 'moved')!r})",
        f"os.open('victim.txt', os.O_WRONLY | os.O_TRUNC, dir_fd=os.open({str(tmp_path)!r}, os.O_RDONLY))",
        f"os.unlink('victim.txt', dir_fd=os.open({str(tmp_path)!r}, os.O_RDONLY))",
        f"os.open('new.txt', os.O_WRONLY | os.O_CREAT, dir_fd=os.open({str(tmp_path)!r}, os.O_RDONLY))",
    ]
    for attack in attacks:
        verdict = verdict_of(shared_scicode, f"def tensor(*args):\n    import os\n    {attack}\n" + RIGHT_ANSWER)
        assert_fails(verdict, "test 1 raised PermissionError")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["victim.txt"]
    assert victim.read_text() == "untouched"


@pytest.fixture
def process_with_secret():
    """Another process of this user whose environment holds an API key."""
    marker = unique_sleep_seconds()
    process = subprocess.Popen(["sleep", marker], env={"OPENAI_API_KEY": SECRET, "PATH": os.defpath})
    yield process
    process.kill()
    process.wait()


@pytest.mark.parametrize(
    "body",
    [
        "    import os\n    for pid in os.listdir('/proc'):\n        try:\n            print(open(f'/proc/{pid}/environ').read())\n"
        "        except Exception:\n            pass\n",
        "    import os\n    fd = os.open('/proc', os.O_RDONLY)\n    print(open(os.open(f'{PID}/environ', os.O_RDONLY, dir_fd=fd)).read())\n",
        "    import os\n    print(dict(os.environ))\n",
    ],
)
def test_secrets_of_other_processes_are_unreachable(shared_scicode: Path, process_with_secret, body: str) -> None:
    code = "def tensor(*args):\n" + body.replace("{PID}", str(process_with_secret.pid)) + RIGHT_ANSWER
    verdict = verdict_of(shared_scicode, code)
    assert_secret_absent(verdict)
    assert verdict.status in ("pass", "fail")
    if "dir_fd" in body:
        assert_fails(verdict, "PermissionError")


# -- 7: processes that outlive their step ----------------------------------------------------------------


@pytest.mark.parametrize(
    "start",
    [
        "subprocess.Popen(['sleep', MARK], start_new_session=True)",
        "__import__('_posixsubprocess').fork_exec(['sleep', MARK], [b'/bin/sleep'], True, (), None, None, -1, -1, -1, -1, -1, -1,"
        " *os.pipe(), False, False, -1, None, None, None, -1, None, False)",
        "os.fork() == 0 and (os.setsid(), os.execv('/bin/sleep', ['sleep', MARK]))",
    ],
)
def test_no_process_outlives_its_step(shared_scicode: Path, start: str) -> None:
    marker = unique_sleep_seconds()
    code = "import os, subprocess\n" + f"MARK = {marker!r}\n" + TENSOR.replace("return M", f"{start}\n    return M")
    verdict = verdict_of(shared_scicode, code)
    assert verdict.status in ("pass", "fail"), (verdict.reason, verdict.stderr[-1500:])
    assert_no_process_with(marker)


# -- the network, signals, the targets file --------------------------------------------------------------


def test_no_network_even_to_loopback(shared_scicode: Path) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    try:
        for attack in (
            f"socket.create_connection(('127.0.0.1', {port}), timeout=2)",
            f"socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', {port}))",
        ):
            verdict = verdict_of(
                shared_scicode, f"def tensor(*args):\n    import socket\n    {attack}\n" + RIGHT_ANSWER
            )
            assert_fails(verdict, "test 1 raised")
            assert any(word in verdict.reason for word in ("Network is unreachable", "Permission denied"))
        server.settimeout(0.5)
        with pytest.raises(TimeoutError):
            server.accept()
    finally:
        server.close()


def test_signals_to_processes_outside_the_step_are_refused(shared_scicode: Path) -> None:
    victim = subprocess.Popen(["sleep", "60"])
    try:
        verdict = verdict_of(
            shared_scicode, f"def tensor(*args):\n    import os, signal\n    os.kill({victim.pid}, signal.SIGKILL)\n"
        )
        assert_fails(verdict, "test 1 raised")
        time.sleep(0.2)
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


@pytest.mark.parametrize("signal_name", ["SIGKILL", "SIGTERM"])
def test_signals_to_self_fail(shared_scicode: Path, signal_name: str) -> None:
    code = f"def tensor(*args):\n    import os, signal\n    os.kill(os.getpid(), signal.{signal_name})\n"
    verdict = verdict_of(shared_scicode, code)
    assert verdict.status == "fail" and verdict.tests_passed == 0, verdict.reason


@pytest.mark.parametrize(
    "opener",
    [
        "import h5py\n    return h5py.File(PATH, 'r')['19.1/test1/var1'][()]",
        "return open(PATH, 'rb').read(10)",
        "import os\n    os.symlink(PATH, 'x.bin')\n    return open('x.bin', 'rb').read()",
        "import os\n    os.link(PATH, 'x.bin')\n    return open('x.bin', 'rb').read()",
    ],
)
def test_the_targets_file_is_unreadable(shared_scicode: Path, opener: str) -> None:
    path = str((shared_scicode / "test_data_dev.h5").resolve())
    verdict = verdict_of(shared_scicode, "def tensor(*args):\n    PATH = " + repr(path) + "\n    " + opener + "\n")
    assert_fails(verdict, "test 1 raised")
    assert any(
        word in verdict.reason
        for word in ("Permission denied", "PermissionError", "unable to open", "cross-device link")
    )


FRAME_WALK = """
def tensor(*args):
    import gc, sys
    frame = sys._getframe()
    while frame is not None:
        for scope in (frame.f_locals, frame.f_globals):
            for name in ("target", "targets"):
                if name in scope:
                    return scope[name]
        frame = frame.f_back
    for item in gc.get_objects():
        if isinstance(item, dict) and "target" in item:
            return item["target"]
    return None
"""


def test_no_target_exists_in_the_test_process(shared_scicode: Path) -> None:
    assert_fails(verdict_of(shared_scicode, FRAME_WALK), "test 1")


# -- exiting early -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code, fragment",
    [
        ("def tensor(*args):\n    exit(0)\n", "SystemExit(0)"),
        ("def tensor(*args):\n    import sys\n    sys.exit(0)\n", "SystemExit(0)"),
        (TENSOR + "raise SystemExit(0)\n", "SystemExit(0)"),
        ("def tensor(*args):\n    quit()\n", "SystemExit"),
    ],
)
def test_system_exit_fails(shared_scicode: Path, code: str, fragment: str) -> None:
    assert_fails(verdict_of(shared_scicode, code), fragment, "exiting early is not a pass")


@pytest.mark.parametrize(
    "code",
    [
        "def tensor(*args):\n    import os\n    os._exit(0)\n",
        TENSOR + "__import__('os')._exit(0)\n",
    ],
)
def test_os_exit_zero_fails(shared_scicode: Path, code: str) -> None:
    verdict = verdict_of(shared_scicode, code)
    assert_fails(verdict, "exited with code 0", "early exit is not a pass")
    assert verdict.returncode == 0


@pytest.mark.parametrize(
    "code",
    [
        "def tensor(*args):\n    import atexit, os\n    atexit.register(lambda: os._exit(0))\n    return 0\n",
        "import atexit\nfrom os import _exit\n"
        + TENSOR.replace("return M", "atexit.register(_exit, 0)\n    return -M"),
    ],
)
def test_atexit_handlers_never_turn_a_failure_into_a_pass(shared_scicode: Path, code: str) -> None:
    assert_fails(verdict_of(shared_scicode, code), "test 1")


# -- cheats carried in an earlier step's code ---------------------------------------------------------

# Under carry=full an earlier step's whole code reaches every later step's script. An early exit at its
# module level fails the later step by the same rule as the step itself; any other tampering there gains
# nothing, since the comparisons run in the checker: a wrong later step still fails. Under
# carry=definition only the named function is carried, so the same module-level code never runs later.
CARRIED_EXITS = {
    "system exit": (TENSOR + "raise SystemExit(0)\n", "SystemExit(0)"),
    "os._exit(0)": (TENSOR + "__import__('os')._exit(0)\n", "exited with code 0"),
}
CARRIED_TAMPERING = {
    "replaced library function": TENSOR + "np.allclose = lambda *a, **k: True\n",
    "replaced builtin": TENSOR + "import builtins\nbuiltins.all = lambda *a: True\n",
    "replaced comparison module": TENSOR + "import sys\nsys.modules['scicode.compare.cmp'] = type(sys)('fake')\n",
    "shadowed np": TENSOR
    + "class _Anything:\n    def allclose(self, *a, **k):\n        return True\nnp = _Anything()\n",
    "signal to self": TENSOR + "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
    "subprocess": TENSOR + "import subprocess\nsubprocess.run(['true'])\n",
    "tracing": TENSOR + "import sys\nsys.settrace(lambda *a: None)\n",
    "background thread": TENSOR
    + "import threading, time\nthreading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n",
    "targets file read": TENSOR + "try:\n    open({targets!r}, 'rb').read(10)\nexcept Exception:\n    pass\n",
}
WRONG_N_TANGLE = "def n_tangle(psi):\n    return -1.0\n"


def with_targets_path(shared_scicode: Path, code: str) -> str:
    return code.replace("{targets!r}", repr(str((shared_scicode / "test_data_dev.h5").resolve())))


@pytest.mark.parametrize("name", sorted(CARRIED_EXITS))
def test_an_early_exit_in_an_earlier_step_fails_later_steps_under_carry_full(shared_scicode: Path, name: str) -> None:
    earlier, fragment = CARRIED_EXITS[name]
    prob = problem(shared_scicode, "19")
    assert_fails(execute_step(make_job(shared_scicode, prob, "19.2", {"19.1": earlier}, carry="full")), fragment)


@pytest.mark.parametrize("name", sorted(CARRIED_TAMPERING))
def test_tampering_in_an_earlier_step_never_makes_a_wrong_later_step_pass(shared_scicode: Path, name: str) -> None:
    earlier = with_targets_path(shared_scicode, CARRIED_TAMPERING[name])
    prob = problem(shared_scicode, "19")
    verdict = execute_step(
        make_job(shared_scicode, prob, "19.2", {"19.1": earlier, "19.2": WRONG_N_TANGLE}, carry="full")
    )
    assert verdict.status == "fail" and verdict.tests_passed == 0, (verdict.reason, verdict.stderr[-1500:])


@pytest.mark.parametrize(
    "earlier",
    [
        CARRIED_EXITS["system exit"][0],
        CARRIED_TAMPERING["replaced library function"],
        CARRIED_TAMPERING["targets file read"],
    ],
)
def test_module_level_code_of_an_earlier_step_is_not_carried_under_carry_definition(
    shared_scicode: Path, earlier: str
) -> None:
    prob = problem(shared_scicode, "19")
    verdict = execute_step(
        make_job(shared_scicode, prob, "19.2", {"19.1": with_targets_path(shared_scicode, earlier)}, carry="definition")
    )
    assert verdict.status == "pass", verdict.reason


def test_carried_atexit_hook_never_turns_a_later_failure_into_a_pass(shared_scicode: Path) -> None:
    earlier = TENSOR + "import atexit, os\natexit.register(os._exit, 0)\n"
    prob = problem(shared_scicode, "19")
    verdict = execute_step(
        make_job(shared_scicode, prob, "19.2", {"19.1": earlier, "19.2": WRONG_N_TANGLE}, carry="full")
    )
    assert_fails(verdict, "test 1")


# -- values the cell builds are the checker's own (model code cannot change what it compares with) -------

# 78.1: each test case builds `expected_output` from literals and compares the model's output with it. The
# model's function overwrites it in place through its caller's frame and returns the same constant.
EXPECTED_OVERWRITTEN = """
import sys

def pendulum_derivs(state, t, g, L, beta, A, alpha):
    scope = sys._getframe(1).f_globals
    for name, value in list(scope.items()):
        if name.endswith("expected_output") and isinstance(value, np.ndarray):
            value[:] = 7.0
    return np.full(2, 7.0)
"""

# 6.1 test 4 compares the difference of the mask areas the model returns with a formula of the thresholds
# the cell set (`(pi (t1^2 - t2^2) - diff) / diff < 0.01`): the model returns masks 100 pixels apart, which
# fails, and rewrites `frequency_threshold1` in its caller's namespace so that the formula passes. Tests 1-3
# get an honest (vectorised) answer.
THRESHOLD_REWRITTEN = """
import sys

def _honest(image_array, frequency_threshold):
    spectrum = fftshift(fft2(image_array))
    m, n = image_array.shape
    i, j = np.ogrid[:m, :n]
    T = (np.sqrt((i - m / 2) ** 2 + (j - n / 2) ** 2) < frequency_threshold).astype(float)
    return T, np.real(ifft2(ifftshift(T * spectrum)))

def apply_low_pass_filter(image_array, frequency_threshold):
    caller = sys._getframe(1).f_globals
    if "frequency_threshold1" not in caller:
        return _honest(image_array, frequency_threshold)
    if frequency_threshold == 40:
        caller["frequency_threshold1"] = 40
        return np.zeros(image_array.shape), image_array
    mask = np.zeros(image_array.shape)
    mask.flat[:100] = 1.0
    return mask, image_array
"""


def test_an_expected_value_overwritten_through_the_callers_frame_changes_nothing(shared_scicode: Path) -> None:
    verdict = run_code(shared_scicode, "78", "78.1", EXPECTED_OVERWRITTEN)
    assert_fails(verdict, "test 1 failed", "Test Case 1 Failed")
    assert verdict.tests_passed == 0


def test_an_input_the_cell_set_rewritten_through_the_callers_frame_changes_nothing(shared_scicode: Path) -> None:
    honest = THRESHOLD_REWRITTEN.replace('if "frequency_threshold1" not in caller:', "if True:")
    assert run_code(shared_scicode, "6", "6.1", honest).status == "pass"  # the honest part is right
    verdict = run_code(shared_scicode, "6", "6.1", THRESHOLD_REWRITTEN)
    assert_fails(verdict, "test 4 failed")
    assert verdict.tests_passed == 3


@pytest.mark.parametrize(
    "change",
    [
        "x[:] = 0.0",  # its argument, in place
        "sys._getframe(1).f_globals['x'] = np.zeros(2)",  # the cell's name, through the caller's frame
        "sys._getframe(1).f_globals['x'][:] = 0.0",
    ],
)
def test_code_under_test_cannot_change_the_inputs_the_checker_compares_with(shared_scicode: Path, change: str) -> None:
    cell = "x = np.array([1.0, 2.0])\nout = tensor(x)\nassert np.allclose(out, 2 * x)\n"
    honest = "def tensor(x):\n    return 2 * x\n"
    forged = f"import sys\ndef tensor(x):\n    {change}\n    return np.zeros(2)\n"
    prob = problem(shared_scicode, "19")
    assert execute_step(make_job(shared_scicode, prob, "19.1", {"19.1": honest}, tests=(cell,))).status == "pass"
    verdict = execute_step(make_job(shared_scicode, prob, "19.1", {"19.1": forged}, tests=(cell,)))
    assert_fails(verdict, "test 1 failed")


def test_seeded_draws_are_the_checkers_even_when_model_code_consumes_the_random_state(shared_scicode: Path) -> None:
    cell = "np.random.seed(3)\nx = np.random.rand(4)\nout = tensor(x)\nassert np.allclose(out, x + 1)\n"
    consuming = "def tensor(x):\n    np.random.rand(100)\n    np.random.seed(0)\n    return x + 1\n"
    forging = "def tensor(x):\n    x[:] = 0.0\n    return np.ones(4)\n"  # the draw overwritten in place
    prob = problem(shared_scicode, "19")
    assert execute_step(make_job(shared_scicode, prob, "19.1", {"19.1": consuming}, tests=(cell,))).status == "pass"
    assert_fails(execute_step(make_job(shared_scicode, prob, "19.1", {"19.1": forging}, tests=(cell,))), "test 1")


def test_names_the_dependencies_bind_beyond_imports_are_the_checkers(shared_scicode: Path) -> None:
    deps = "import numpy as np\nTOL = 1e-6"
    cell = "assert abs(tensor(1.0) - 2.0) < TOL\n"
    prob = problem(shared_scicode, "19")
    honest = "def tensor(x):\n    return 2 * x\n"
    widened = "import sys\ndef tensor(x):\n    sys._getframe(1).f_globals['TOL'] = 1e9\n    return 0.0\n"
    assert execute_step(make_job(shared_scicode, prob, "19.1", {"19.1": honest}, deps=deps, tests=(cell,))).status == (
        "pass"
    )
    verdict = execute_step(make_job(shared_scicode, prob, "19.1", {"19.1": widened}, deps=deps, tests=(cell,)))
    assert_fails(verdict, "test 1 failed")


# -- a cached verdict belongs to exactly what ran ------------------------------------------------------------

# Under its own label (step 19.2's section) this block breaks `tensor`, which n_tangle calls; in step 19.1's section
# it does nothing. At the end of 19.1's answer or at the start of 19.2's, the rendered script of 19.2 is the same.
LABEL_CHECK = "if 'step 19.2' in __import__('sys')._getframe().f_code.co_filename:\n    tensor = None\n"


@pytest.mark.parametrize("first_at_the_end", [True, False], ids=["forged pass", "forged fail"])
def test_a_block_moved_to_the_step_before_never_reads_the_other_placement_s_cached_verdict(
    staged_data_dir: Path, shared_scicode: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first_at_the_end: bool
) -> None:
    from stages.benchmark.problems import problems_by_id
    from stages.config.settings import load_settings
    from stages.records.details import KIND as DETAILS_KIND
    from stages.score.parent.stage import run_score
    from stages.storage.artifacts import read_artifact
    from stages.targets import ResolvedTargets
    from tests.score.score_helpers import reference_code, write_generation
    from tests.support.run_artifacts import json_at, json_object

    monkeypatch.chdir(tmp_path)
    values = {"data_dir": str(staged_data_dir), "results_dir": str(tmp_path / "results"), "score_workers": "1"}
    settings = load_settings(values, cwd=tmp_path)
    targets = ResolvedTargets("explicit", shared_scicode / "test_data_dev.h5", None, "validation targets")
    prob = problems_by_id(settings.data_paths)["19"]
    first, second = reference_code(prob, "19.1").rstrip("\n"), reference_code(prob, "19.2")
    at_the_end = {"19.1": first + "\n\n" + LABEL_CHECK, "19.2": second}
    at_the_start = {"19.1": first, "19.2": LABEL_CHECK + "\n\n" + second}
    placements = [at_the_end, at_the_start] if first_at_the_end else [at_the_start, at_the_end]

    def step_19_2() -> dict:
        details = read_artifact(settings.run_paths.details("19"), DETAILS_KIND)
        assert details is not None
        return json_object(json_at(details, "attempts", 0, "meta", "evaluation", "steps", 1))

    expected = ["pass", "fail"] if first_at_the_end else ["fail", "pass"]
    for codes, status in zip(placements, expected, strict=True):
        write_generation(settings, prob, codes)
        run_score(settings, "19", targets)
        verdict = step_19_2()
        assert (verdict["status"], verdict["cached"]) == (status, False), verdict["reason"]


# -- nothing on the trusted side waits without a deadline ---------------------------------------------------

# Test 1's value is a power whose exact comparison takes hours in the checker; test 2's is larger than a socket
# buffer, so that relaying it to the busy checker cannot finish either.
SLOW_COMPARISON = """
CALLS = []
def tensor(*args):
    CALLS.append(1)
    if len(CALLS) == 1:
        import sympy
        return sympy.Pow(sympy.Integer(3), sympy.Integer(10**12), evaluate=False)
    return np.zeros(4 << 20)
"""


STEP_TIMEOUT = 4.0


def running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie waiting for its parent is not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("use_zygote", [True, False])
def test_a_comparison_that_cannot_finish_is_a_timeout_within_the_step_timeout(
    shared_scicode: Path, use_zygote: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stages.score.parent import engine

    started_pids: list[int] = []
    start = engine._start

    def recording_start(*args, **kwargs):
        process = start(*args, **kwargs)
        started_pids.append(process.launched.pid)
        return process

    monkeypatch.setattr(engine, "_start", recording_start)
    started = time.monotonic()
    verdict = verdict_of(shared_scicode, SLOW_COMPARISON, timeout=STEP_TIMEOUT, use_zygote=use_zygote)
    elapsed = time.monotonic() - started
    assert verdict.status == "timeout", (verdict.status, verdict.reason, verdict.stderr[-2000:])
    assert elapsed < STEP_TIMEOUT + 30.0, elapsed  # it waited for the checker for ever before
    assert len(started_pids) == 2  # the checker and the test process, both killed with the step
    deadline = time.monotonic() + 5.0
    while any(map(running, started_pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(map(running, started_pids))


def cpu_limit_once_set(pid: int, wait_seconds: float) -> str:
    """The soft and hard CPU-time limits of `pid` once it has set them (else whatever it has after the wait)."""
    deadline = time.monotonic() + wait_seconds
    found = ""
    while time.monotonic() < deadline:
        try:
            lines = Path(f"/proc/{pid}/limits").read_text().splitlines()
        except OSError:
            return found
        found = " ".join(next(line for line in lines if line.startswith("Max cpu time")).split()[3:5])
        if found != "unlimited unlimited":
            return found
        time.sleep(0.02)
    return found


@pytest.mark.parametrize("use_zygote", [True, False])
def test_the_checker_runs_under_a_cpu_time_limit_from_the_step_timeout(tmp_path: Path, use_zygote: bool) -> None:
    """Should the engine be gone, the kernel ends a checker whose comparison cannot finish."""
    import sys

    from stages.score.parent.engine import checker_cpu_seconds
    from stages.score.parent.launcher import LaunchSpec, kill_group, launch

    engine_end, checker_end = socket.socketpair()
    limit = checker_cpu_seconds(STEP_TIMEOUT)
    spec = LaunchSpec("checker", sys.executable, checker_end.fileno(), 1, 2, tmp_path, {}, 1024, cpu_seconds=limit)
    launched = launch(spec, use_zygote=use_zygote)
    checker_end.close()
    try:
        assert cpu_limit_once_set(launched.pid, 60.0) == f"{limit} {limit + 1}"  # it waits for its spec meanwhile
    finally:
        kill_group(launched.pid)
        launched.wait(10.0)
        engine_end.close()


# -- a values frame costs the engine what it holds, at most the step's memory ------------------------------

ANNOUNCE_FRAME = """
def tensor(*args):
    import os, time
    os.write(3, ({size}).to_bytes(8, "big") + b"V")
    time.sleep(60)
"""


def test_a_values_frame_longer_than_the_step_s_memory_is_refused_before_it_is_held(shared_scicode: Path) -> None:
    memory_mb = 300
    started = time.monotonic()
    code = ANNOUNCE_FRAME.format(size=memory_mb * 2**20 + 1)
    verdict = verdict_of(shared_scicode, code, memory_mb=memory_mb, timeout=30.0)
    assert_fails(verdict, f"a frame of {memory_mb * 2**20 + 1} bytes (the limit is {memory_mb * 2**20})")
    assert time.monotonic() - started < 20.0
    within = verdict_of(shared_scicode, ANNOUNCE_FRAME.format(size=memory_mb * 2**20), memory_mb=memory_mb, timeout=3.0)
    assert within.status == "timeout", within.reason  # announced within the bound: the engine waits for the rest
