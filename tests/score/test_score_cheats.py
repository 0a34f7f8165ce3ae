"""Every way code under test could pass without computing the answer must fail, naming what happened.

All runs are real test processes (zygote forks) against the real dev targets, on step 19.1 (`tensor`)
and 19.2 (`n_tangle`, which calls `tensor`).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from score_helpers import problem, run_code
from stages.score.engine import execute_step
from score_helpers import make_job

TENSOR = '''
def tensor(*args):
    M = 1
    for a in args:
        M = np.kron(M, a)
    return M
'''


def verdict_of(shared_scicode: Path, code: str, step_id: str = "19.1", **options):
    return run_code(shared_scicode, "19", step_id, code, **options)


def assert_fails(verdict, *fragments: str) -> None:
    assert verdict.status == "fail", (verdict.status, verdict.reason, verdict.stderr[-2000:])
    for fragment in fragments:
        assert fragment in verdict.reason, (verdict.reason, verdict.stderr[-2000:])


def test_honest_code_passes(shared_scicode: Path) -> None:
    verdict = verdict_of(shared_scicode, TENSOR)
    assert verdict.status == "pass", (verdict.reason, verdict.stderr)
    assert (verdict.tests_passed, verdict.tests_total, verdict.returncode) == (3, 3, 0)


def test_wrong_answer_fails(shared_scicode: Path) -> None:
    verdict = verdict_of(shared_scicode, TENSOR.replace("return M", "return M * 2"))
    assert_fails(verdict, "test 1 failed", "AssertionError")
    assert verdict.tests_passed == 0


# -- exiting early -----------------------------------------------------------------

@pytest.mark.parametrize("code, fragment", [
    ("def tensor(*args):\n    exit(0)\n", "SystemExit(0)"),
    ("def tensor(*args):\n    import sys\n    sys.exit(0)\n", "SystemExit(0)"),
    (TENSOR + "raise SystemExit(0)\n", "SystemExit(0)"),
    ("def tensor(*args):\n    quit()\n", "SystemExit"),
])
def test_system_exit_fails(shared_scicode: Path, code: str, fragment: str) -> None:
    assert_fails(verdict_of(shared_scicode, code), fragment, "exiting early is not a pass")


@pytest.mark.parametrize("code", [
    "def tensor(*args):\n    import os\n    os._exit(0)\n",
    TENSOR + "__import__('os')._exit(0)\n",
])
def test_os_exit_zero_fails(shared_scicode: Path, code: str) -> None:
    verdict = verdict_of(shared_scicode, code)
    assert_fails(verdict, "exited with code 0", "early exit is not a pass")
    assert verdict.returncode == 0


@pytest.mark.parametrize("code", [
    "def tensor(*args):\n    import atexit, os\n    atexit.register(lambda: os._exit(0))\n    return 0\n",
    "import atexit\nfrom os import _exit\n" + TENSOR.replace("return M", "atexit.register(_exit, 0)\n    return -M"),
])
def test_atexit_handlers_never_turn_a_failure_into_a_pass(shared_scicode: Path, code: str) -> None:
    verdict = verdict_of(shared_scicode, code)
    assert_fails(verdict, "test 1")
    assert verdict.returncode != 0


@pytest.mark.parametrize("signal_name", ["SIGKILL", "SIGTERM"])
def test_signals_to_self_fail(shared_scicode: Path, signal_name: str) -> None:
    code = f"def tensor(*args):\n    import os, signal\n    os.kill(os.getpid(), signal.{signal_name})\n"
    assert_fails(verdict_of(shared_scicode, code), "blocked os.kill")


def test_signal_through_pthread_kill_fails(shared_scicode: Path) -> None:
    code = "def tensor(*args):\n    import signal, threading\n    signal.pthread_kill(threading.main_thread().ident, signal.SIGKILL)\n"
    assert_fails(verdict_of(shared_scicode, code), "blocked signal.pthread_kill")


# -- replacing what the tests compare with ----------------------------------------------

@pytest.mark.parametrize("code, fragment", [
    (TENSOR + "np.allclose = lambda *a, **k: True\n", "replaced numpy.allclose"),
    (TENSOR + "import numpy._core.numeric as numeric\nnumeric.isclose = lambda *a, **k: np.array(True)\n",
     "replaced numpy._core.numeric.isclose"),
    (TENSOR.replace("return M", "import builtins\n    builtins.all = lambda *a: True\n    return M"), "replaced builtins.all"),
    (TENSOR + "import sys\nsys.modules['scicode.compare.cmp'] = type(sys)('fake')\n", "module scicode.compare.cmp"),
])
def test_replacing_library_functions_fails(shared_scicode: Path, code: str, fragment: str) -> None:
    assert_fails(verdict_of(shared_scicode, code), fragment)


def test_changing_library_function_defaults_fails(shared_scicode: Path) -> None:
    code = TENSOR + "np.allclose._implementation.__defaults__ = (1e300, 1e300, False)\n"
    assert_fails(verdict_of(shared_scicode, code), "__defaults__")


@pytest.mark.parametrize("code", [
    TENSOR + "class _Anything:\n    def allclose(self, *a, **k):\n        return True\nnp = _Anything()\n",
    TENSOR.replace("return M", "globals()['np'] = __import__('types').SimpleNamespace(allclose=lambda *a, **k: True)\n    return M"),
])
def test_shadowing_np_in_the_shared_namespace_fails(shared_scicode: Path, code: str) -> None:
    assert_fails(verdict_of(shared_scicode, code), "replaced `np` in the test namespace")


@pytest.mark.parametrize("code, fragment", [
    ("class AlwaysEqual:\n    def __eq__(self, other):\n        return True\n    def __array__(self, *a, **k):\n        return np.zeros(4)\n"
     "def tensor(*args):\n    return AlwaysEqual()\n", "AlwaysEqual object defined after the harness started"),
    ("class Dispatch:\n    def __array_function__(self, func, types, args, kwargs):\n        return True\n"
     "def tensor(*args):\n    return [Dispatch()]\n", "Dispatch object defined after the harness started"),
    ("class Sub(np.ndarray):\n    def __eq__(self, other):\n        return True\n"
     "def tensor(*args):\n    return np.zeros(4).view(Sub)\n", "Sub object defined after the harness started"),
])
def test_objects_that_pretend_to_match_fail(shared_scicode: Path, code: str, fragment: str) -> None:
    assert_fails(verdict_of(shared_scicode, code), fragment)


# -- reading the targets -------------------------------------------------------------------

FRAME_WALK = '''
def tensor(*args):
    import sys
    frame = sys._getframe()
    while frame is not None:
        for scope in (frame.f_locals, frame.f_globals):
            for name in ("target", "targets"):
                if name in scope:
                    value = scope[name]
                    return value[0] if name == "targets" else value
        frame = frame.f_back
    return None
'''

INSPECT_WALK = '''
def tensor(*args):
    import inspect
    for info in inspect.stack():
        scope = info.frame.f_globals
        if "target" in scope:
            return scope["target"]
    return None
'''

TRACEBACK_WALK = '''
def tensor(*args):
    try:
        raise ValueError
    except ValueError as error:
        frame = error.__traceback__.tb_frame
    while frame is not None:
        if "target" in frame.f_globals:
            return frame.f_globals["target"]
        frame = frame.f_back
    return None
'''


@pytest.mark.parametrize("code", [FRAME_WALK, INSPECT_WALK, TRACEBACK_WALK])
def test_reading_target_from_caller_frames_finds_nothing_and_fails(shared_scicode: Path, code: str) -> None:
    verdict = verdict_of(shared_scicode, code)
    assert_fails(verdict, "test 1")


def test_opening_the_targets_file_with_h5py_fails(shared_scicode: Path) -> None:
    path = str((shared_scicode / "test_data_dev.h5").resolve())
    code = f"def tensor(*args):\n    import h5py\n    with h5py.File({path!r}, 'r') as f:\n        return f['19.1/test1/var1'][()]\n"
    assert_fails(verdict_of(shared_scicode, code), "blocked open", "test_data_dev.h5")


def test_opening_the_targets_file_with_open_fails(shared_scicode: Path) -> None:
    path = str((shared_scicode / "test_data_dev.h5").resolve())
    code = f"def tensor(*args):\n    try:\n        open({path!r}, 'rb').read(10)\n    except Exception:\n        pass\n    return np.kron(*args)\n"
    assert_fails(verdict_of(shared_scicode, code), "blocked open", "the targets file")


def test_opening_a_copy_or_link_of_an_hdf5_file_fails(shared_scicode: Path) -> None:
    path = str((shared_scicode / "test_data_dev.h5").resolve())
    code = f"def tensor(*args):\n    import os\n    os.symlink({path!r}, 'x.bin')\n    return open('x.bin', 'rb').read()\n"
    assert_fails(verdict_of(shared_scicode, code), "blocked open")


@pytest.mark.parametrize("call", ["gc.get_objects()", "gc.get_referrers(np)", "gc.get_referents(np)"])
def test_heap_scans_fail(shared_scicode: Path, call: str) -> None:
    code = f"def tensor(*args):\n    import gc\n    try:\n        {call}\n    except Exception:\n        pass\n    return np.kron(*args)\n"
    assert_fails(verdict_of(shared_scicode, code), "blocked gc.")


def test_reading_process_memory_fails(shared_scicode: Path) -> None:
    code = "def tensor(*args):\n    return open('/proc/self/mem', 'rb')\n"
    assert_fails(verdict_of(shared_scicode, code), "blocked open", "process internals")


def test_ctypes_fails(shared_scicode: Path) -> None:
    code = "def tensor(*args):\n    import ctypes\n    return ctypes.string_at(id(args), 8)\n"
    assert_fails(verdict_of(shared_scicode, code), "blocked ctypes.")


CHANNEL_SCAN = '''
def _harness_sockets():
    import os, stat
    for fd in range(3, 64):
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                yield fd
        except OSError:
            pass

def _frame(payload):
    return len(payload).to_bytes(8, "big") + payload
'''


def test_fetching_a_target_through_the_channel_fails(shared_scicode: Path) -> None:
    code = CHANNEL_SCAN + '''
def tensor(*args):
    import json, os, pickle
    for fd in _harness_sockets():
        os.write(fd, _frame(json.dumps({"type": "fetch", "test": 0, "nonce": ""}).encode()))
        reply = os.read(fd, 1 << 20)
        if reply[8:9] == b"T":
            return pickle.loads(reply[9:])
    return None
'''
    assert_fails(verdict_of(shared_scicode, code), "targets read outside the test harness", "without the harness nonce")


def test_forging_a_completion_record_fails(shared_scicode: Path) -> None:
    code = CHANNEL_SCAN + '''
def tensor(*args):
    import json, os
    for fd in _harness_sockets():
        for index in range(3):
            os.write(fd, _frame(json.dumps({"type": "test_passed", "test": index}).encode()))
        os.write(fd, _frame(json.dumps({"type": "complete", "passed": 3}).encode()))
    os._exit(0)
'''
    assert_fails(verdict_of(shared_scicode, code), "without the harness nonce")


def test_subprocess_and_fork_fail(shared_scicode: Path) -> None:
    code = "def tensor(*args):\n    import subprocess\n    subprocess.run(['true'])\n    return np.kron(*args)\n"
    assert_fails(verdict_of(shared_scicode, code), "blocked subprocess.Popen")
    code = "def tensor(*args):\n    import os\n    if os.fork() == 0:\n        os._exit(0)\n    return np.kron(*args)\n"
    assert_fails(verdict_of(shared_scicode, code), "blocked os.fork")


def test_tracing_fails(shared_scicode: Path) -> None:
    code = "def tensor(*args):\n    import sys\n    sys.settrace(lambda *a: None)\n    return np.kron(*args)\n"
    assert_fails(verdict_of(shared_scicode, code), "blocked sys.settrace")


def test_background_thread_fails(shared_scicode: Path) -> None:
    code = "import threading, time\n" + TENSOR.replace(
        "return M", "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n    return M")
    assert_fails(verdict_of(shared_scicode, code), "left threads running")


# -- cheats defined in an earlier step -------------------------------------------------------

def test_cheat_in_an_earlier_step_fails(shared_scicode: Path) -> None:
    evil_tensor = TENSOR.replace("return M", "np.allclose = lambda *a, **k: True\n    return M")
    prob = problem(shared_scicode, "19")
    job = make_job(shared_scicode, prob, "19.2", {"19.1": evil_tensor, "19.2": "def n_tangle(psi):\n    return tensor(psi)\n"})
    verdict = execute_step(job)
    assert_fails(verdict, "replaced numpy.allclose")


# Under carry=full an earlier step's whole code reaches every later step's script: a cheat at its module
# level must fail the later step by the same rule as the step itself. Under carry=definition only the
# named function is carried, so the same module-level code never runs in later steps.
CARRIED_CHEATS = {
    "system exit": (TENSOR + "raise SystemExit(0)\n", "SystemExit(0)"),
    "os._exit(0)": (TENSOR + "__import__('os')._exit(0)\n", "exited with code 0"),
    "replaced library function": (TENSOR + "np.allclose = lambda *a, **k: True\n", "replaced numpy.allclose"),
    "replaced builtin": (TENSOR + "import builtins\nbuiltins.all = lambda *a: True\n", "replaced builtins.all"),
    "replaced comparison module": (TENSOR + "import sys\nsys.modules['scicode.compare.cmp'] = type(sys)('fake')\n",
                                   "module scicode.compare.cmp"),
    "shadowed np": (TENSOR + "class _Anything:\n    def allclose(self, *a, **k):\n        return True\nnp = _Anything()\n",
                    "replaced `np` in the test namespace"),
    "signal to self": (TENSOR + "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", "blocked os.kill"),
    "subprocess": (TENSOR + "import subprocess\nsubprocess.run(['true'])\n", "blocked subprocess.Popen"),
    "tracing": (TENSOR + "import sys\nsys.settrace(lambda *a: None)\n", "blocked sys.settrace"),
    "background thread": (TENSOR + "import threading, time\nthreading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n",
                          "left threads running"),
    "targets file read": (TENSOR + "try:\n    open({targets!r}, 'rb').read(10)\nexcept Exception:\n    pass\n", "blocked open"),
}


def carried_cheat(shared_scicode: Path, name: str) -> tuple[str, str]:
    code, fragment = CARRIED_CHEATS[name]
    return code.replace("{targets!r}", repr(str((shared_scicode / "test_data_dev.h5").resolve()))), fragment


@pytest.mark.parametrize("name", sorted(CARRIED_CHEATS))
def test_module_level_cheat_of_an_earlier_step_fails_later_steps_under_carry_full(shared_scicode: Path, name: str) -> None:
    earlier, fragment = carried_cheat(shared_scicode, name)
    prob = problem(shared_scicode, "19")
    assert_fails(execute_step(make_job(shared_scicode, prob, "19.2", {"19.1": earlier}, carry="full")), fragment)


@pytest.mark.parametrize("name", ["system exit", "replaced library function", "targets file read"])
def test_module_level_code_of_an_earlier_step_is_not_carried_under_carry_definition(shared_scicode: Path, name: str) -> None:
    earlier, _ = carried_cheat(shared_scicode, name)
    prob = problem(shared_scicode, "19")
    verdict = execute_step(make_job(shared_scicode, prob, "19.2", {"19.1": earlier}, carry="definition"))
    assert verdict.status == "pass", verdict.reason


def test_carried_atexit_hook_never_turns_a_later_failure_into_a_pass(shared_scicode: Path) -> None:
    earlier = TENSOR + "import atexit, os\natexit.register(os._exit, 0)\n"
    wrong = "def n_tangle(psi):\n    return -1.0\n"
    prob = problem(shared_scicode, "19")
    verdict = execute_step(make_job(shared_scicode, prob, "19.2", {"19.1": earlier, "19.2": wrong}, carry="full"))
    assert_fails(verdict, "test 1")
    assert verdict.returncode != 0


def test_bypassing_the_h5py_tripwire_still_cannot_read_the_targets(shared_scicode: Path) -> None:
    path = str((shared_scicode / "test_data_dev.h5").resolve())
    code = f'''
def tensor(*args):
    import h5py, h5py.h5f as h5f
    try:
        original = h5f.open.__closure__[0].cell_contents
        fid = original({path!r}.encode(), h5f.ACC_RDONLY)
        return h5py.File(fid)['19.1/test1/var1'][()]
    except Exception:
        return None
'''
    verdict = verdict_of(shared_scicode, code)
    assert verdict.status == "fail" and verdict.tests_passed == 0, (verdict.reason, verdict.stderr[-1500:])
