"""The system-call surface of a confined process: the seccomp filter, the bounded scratch, the task limit.

Each attack runs in a real confined process started by the snippet launcher (`confine.py`, as for every tool
snippet) and, for the attacks the scoring engine must stop too, in a real test process (`execute_step`). Where an
attack's refusal proves something only if the same call works unconfined (a key added to the user keyring, a
pathname unix socket outside the sandbox, the i386 system-call gate), the test shows that first, and skips with
that reason where this machine does not allow it at all.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from stages.execution.confinement import CONFINE_SCRIPT, binding_arguments, confinement_of, seccomp_binding
from stages.execution.confinement.confine import TASK_LIMIT, Confinement
from stages.execution.confinement.kernel import (
    CAP_DAC_READ_SEARCH,
    DENIED_SYSCALLS,
    UNIFIED_SYSCALL_NUMBERS,
    UNPRIVILEGED_ID,
)
from tests.execution.confinement.probes import RAW, SNIPPET_MEMORY_MB, confined, last_json, unconfined
from tests.score.score_helpers import run_code

pytestmark = pytest.mark.skipif(
    not confinement_of(sys.executable).get("seccomp"), reason="no seccomp filter on this machine"
)

KEY_SPEC_USER_KEYRING = -4
KEYCTL_UNLINK, KEYCTL_SEARCH = 9, 10
TENSOR_BODY = "    M = 1\n    for a in args:\n        M = np.kron(M, a)\n    return M\n"


def syscall_number(name: str) -> int | None:
    import pyseccomp

    number = int(pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name))
    return number if number >= 0 else UNIFIED_SYSCALL_NUMBERS.get(name)


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    folder = tmp_path / "scratch"
    folder.mkdir()
    return folder


# -- the filter is there, and says so ------------------------------------------------------------------------


def test_the_binding_comes_from_the_pipeline_environment() -> None:
    binding = seccomp_binding()
    assert binding is not None and binding.endswith("pyseccomp.py") and Path(binding).is_file()
    assert binding_arguments() == ["--seccomp-binding", binding]


def test_without_the_binding_the_line_names_it_and_the_filter_is_absent(scratch: Path) -> None:
    probe = subprocess.run(
        [sys.executable, "-I", str(CONFINE_SCRIPT), "--probe", "--seccomp-binding", str(scratch / "missing.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    record = json.loads(probe.stdout)
    assert record["seccomp"] is False and record["full"] is False
    assert "no seccomp filter (seccomp binding unusable: FileNotFoundError" in record["description"]


def test_every_denied_system_call_fails_with_eperm(scratch: Path) -> None:
    numbers = {
        name: number
        for _, names in DENIED_SYSCALLS
        for name in names.split()
        if (number := syscall_number(name)) is not None
    }
    assert {"add_key", "keyctl", "ptrace", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "setns"} <= set(
        numbers
    )
    code = RAW + f"print(json.dumps({{name: raw(number, 0, 0, 0, 0, 0, 0) for name, number in {numbers!r}.items()}}))"
    results = last_json(confined(code, scratch))
    assert results == dict.fromkeys(numbers, "EPERM")


# -- 8: a key in the user keyring outliving the run ----------------------------------------------------------


def add_key_program(description: str) -> str:
    return RAW + textwrap.dedent(f"""\
        libc.syscall.argtypes = None
        serial = libc.syscall({syscall_number("add_key")}, b"user", {description.encode()!r}, b"secret", 6,
                              ctypes.c_long({KEY_SPEC_USER_KEYRING}))
        print(json.dumps({{"serial": serial, "errno": errno.errorcode.get(ctypes.get_errno(), "0")}}))
    """)


def search_key_program(description: str, unlink: bool) -> str:
    return RAW + textwrap.dedent(f"""\
        serial = libc.syscall({syscall_number("keyctl")}, {KEYCTL_SEARCH}, ctypes.c_long({KEY_SPEC_USER_KEYRING}),
                              b"user", {description.encode()!r}, 0)
        found = serial > 0
        if found and {unlink!r}:
            libc.syscall({syscall_number("keyctl")}, {KEYCTL_UNLINK}, ctypes.c_long(serial),
                          ctypes.c_long({KEY_SPEC_USER_KEYRING}))
        print(json.dumps({{"found": found}}))
    """)


@pytest.fixture
def user_keyring(tmp_path: Path):
    """A key description; skips unless `add_key` works unconfined here (the key is removed again)."""
    probe = f"scicode-unconfined-probe-{uuid.uuid4().hex}"
    added = last_json(unconfined(add_key_program(probe), tmp_path))
    if added["serial"] <= 0:
        pytest.skip(f"add_key does not work unconfined on this machine ({added['errno']})")
    assert last_json(unconfined(search_key_program(probe, unlink=True), tmp_path))["found"]
    description = f"scicode-confined-{uuid.uuid4().hex}"
    yield description
    unconfined(search_key_program(description, unlink=True), tmp_path)


def test_a_snippet_cannot_add_a_key_that_outlives_it(user_keyring: str, scratch: Path, tmp_path: Path) -> None:
    added = last_json(confined(add_key_program(user_keyring), scratch))
    assert (added["serial"], added["errno"]) == (-1, "EPERM")
    assert not last_json(unconfined(search_key_program(user_keyring, unlink=False), tmp_path))["found"]


def test_a_test_process_cannot_add_a_key_that_outlives_it(
    user_keyring: str, shared_scicode: Path, tmp_path: Path
) -> None:
    add_key = syscall_number("add_key")
    code = (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "def tensor(*args):\n"
        f"    serial = libc.syscall({add_key}, b'user', {user_keyring.encode()!r}, b'secret', 6, ctypes.c_long(-4))\n"
        "    assert serial > 0, ctypes.get_errno()\n" + TENSOR_BODY
    )
    verdict = run_code(shared_scicode, "19", "19.1", code)
    assert verdict.status == "fail" and f"AssertionError: {errno.EPERM}" in verdict.reason, verdict.reason
    assert not last_json(unconfined(search_key_program(user_keyring, unlink=False), tmp_path))["found"]


# -- 7: unix sockets outside the sandbox ---------------------------------------------------------------------


@pytest.fixture
def unix_listener(tmp_path: Path):
    """A pathname unix socket outside any sandbox, and an abstract one; reachable unconfined (shown first)."""
    path = tmp_path / "service.sock"
    abstract = f"\0scicode-test-{uuid.uuid4().hex}"
    servers = []
    for address in (str(path), abstract):
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(address)
        server.listen()
        server.settimeout(0.5)
        servers.append(server)
    reach = f"import socket\nfor a in ({str(path)!r}, {abstract!r}):\n    socket.socket(socket.AF_UNIX).connect(a)\n"
    assert unconfined(reach, tmp_path).returncode == 0
    for server in servers:
        server.accept()[0].close()
    yield str(path), abstract, servers
    for server in servers:
        server.close()


def assert_nobody_connected(servers: list[socket.socket]) -> None:
    for server in servers:
        with pytest.raises(TimeoutError):
            server.accept()


def test_a_snippet_cannot_reach_unix_sockets(unix_listener, scratch: Path) -> None:
    path, abstract, servers = unix_listener
    code = RAW + textwrap.dedent(f"""\
        results = {{}}
        for label, address in (("path", {path!r}), ("abstract", {abstract!r})):
            results[label] = outcome(lambda: socket.socket(socket.AF_UNIX).connect(address))
        results["datagram"] = outcome(lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b"x", {path!r}))
        pair = socket.socketpair()
        pair[0].sendall(b"ping")
        results["socketpair"] = pair[1].recv(4).decode()
        print(json.dumps(results))
    """)
    assert last_json(confined(code, scratch)) == {
        "path": "EPERM",
        "abstract": "EPERM",
        "datagram": "EPERM",
        "socketpair": "ping",
    }
    assert_nobody_connected(servers)


def test_a_test_process_cannot_reach_unix_sockets(unix_listener, shared_scicode: Path) -> None:
    path, abstract, servers = unix_listener
    for address in (path, abstract):
        code = (
            f"import socket\ndef tensor(*args):\n    socket.socket(socket.AF_UNIX).connect({address!r})\n" + TENSOR_BODY
        )
        verdict = run_code(shared_scicode, "19", "19.1", code)
        assert verdict.status == "fail" and "PermissionError" in verdict.reason, verdict.reason
    assert_nobody_connected(servers)


SOCKET_FAMILIES = {"netlink": 16, "packet": 17, "vsock": 40, "alg": 38, "bluetooth": 31, "can": 29, "rds": 21}


def test_every_socket_family_but_inet_is_refused(scratch: Path, tmp_path: Path) -> None:
    socket_number = syscall_number("socket")
    code = RAW + textwrap.dedent(f"""\
        results = {{name: raw({socket_number}, family, 2, 0) for name, family in {SOCKET_FAMILIES!r}.items()}}
        results["unix, family with high bits set"] = raw({socket_number}, (1 << 32) | 1, 1, 0)
        results["inet"] = outcome(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close())
        results["inet6"] = outcome(lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).close())
        print(json.dumps(results))
    """)
    results = last_json(confined(code, scratch))
    assert results.pop("inet") == "0" and results.pop("inet6") == "0"
    assert results == dict.fromkeys(results, "EPERM") and len(results) == len(SOCKET_FAMILIES) + 1
    # The high-bits trick is real: unconfined, the kernel reads the family as an int and makes a unix socket.
    trick = RAW + f"print(json.dumps({{'unix': raw({socket_number}, (1 << 32) | 1, 1, 0)}}))"
    assert last_json(unconfined(trick, tmp_path)) == {"unix": "0"}


# -- namespaces, mounts, clone3, other ABIs ------------------------------------------------------------------


def test_namespaces_and_mounts_are_refused_but_threads_and_processes_work(scratch: Path) -> None:
    unshare, clone, clone3 = syscall_number("unshare"), syscall_number("clone"), syscall_number("clone3")
    code = RAW + textwrap.dedent(f"""\
        import subprocess, threading
        results = {{}}
        for name, flag in (("user", 0x10000000), ("mount", 0x20000), ("pid", 0x20000000), ("net", 0x40000000),
                           ("uts", 0x04000000), ("cgroup", 0x02000000), ("ipc", 0x08000000), ("time", 0x80)):
            results["unshare " + name] = raw({unshare}, flag)
        child = libc.syscall({clone}, ctypes.c_long(0x10000000 | 17), 0, 0, 0, 0)
        if child == 0:
            os._exit(0)
        results["clone user"] = errno.errorcode.get(ctypes.get_errno(), "0") if child < 0 else "0"
        results["clone3"] = raw({clone3}, 0, 0)
        results["unshare files"] = raw({unshare}, 0x400)
        box = []
        thread = threading.Thread(target=lambda: box.append(6 * 7))
        thread.start()
        thread.join()
        results["thread"] = box
        results["process"] = subprocess.run(["/bin/echo", "ok"], capture_output=True, text=True).stdout.strip()
        print(json.dumps(results))
    """)
    results = last_json(confined(code, scratch))
    assert results.pop("clone3") == "ENOSYS"
    assert (results.pop("unshare files"), results.pop("thread"), results.pop("process")) == ("0", [42], "ok")
    assert results == dict.fromkeys(results, "EPERM") and len(results) == 9


I386_GETPID = "bytes([0xB8, 20, 0, 0, 0, 0xCD, 0x80, 0xC3])"  # mov eax, 20 (getpid); int 0x80; ret


def other_abi_program(kind: str) -> str:
    """Calls getpid through the i386 gate or as x32 in a child; prints the child's exit status."""
    call = {
        "i386": f"m = mmap.mmap(-1, 4096, prot=7)\n    m.write({I386_GETPID})\n"
        "    f = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))\n"
        "    os._exit(0 if f() == os.getpid() else 3)",
        "x32": "os._exit(0 if libc.syscall(0x40000000 | 39) == os.getpid() else 3)",
    }[kind]
    return (
        RAW
        + f"import mmap\npid = os.fork()\nif pid == 0:\n    {call}\n"
        + ("print(json.dumps({'status': os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])}))")
    )


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the i386 and x32 gates exist on x86_64 only")
@pytest.mark.parametrize("kind", ["i386", "x32"])
def test_system_calls_of_another_abi_kill_the_process(kind: str, scratch: Path, tmp_path: Path) -> None:
    if kind == "i386" and last_json(unconfined(other_abi_program(kind), tmp_path))["status"] != 0:
        pytest.skip("this kernel has no i386 emulation: nothing to refuse")
    assert last_json(confined(other_abi_program(kind), scratch))["status"] == -31  # SIGSYS


# -- 9: bounded scratch ----------------------------------------------------------------------------------------


def test_a_snippet_cannot_fill_the_disk_and_its_files_vanish_with_it(scratch: Path) -> None:
    (scratch / "program.py").write_text("copied in\n")
    code = RAW + textwrap.dedent("""\
        results = {"copied": open("program.py").read().strip()}
        fd = os.open("huge.bin", os.O_WRONLY | os.O_CREAT)
        results["fallocate 2 GiB"] = outcome(lambda: os.posix_fallocate(fd, 0, 2 << 30))
        def fill():
            with open("chunks.bin", "wb") as handle:
                for _ in range(100):
                    handle.write(b"x" * (1 << 20))
        results["write 100 MiB"] = outcome(fill)
        print(json.dumps(results))
    """)
    results = last_json(confined(code, scratch, scratch_limit_mb=64))
    assert results["copied"] == "copied in"
    assert results["fallocate 2 GiB"] in ("ENOSPC", "EFBIG") and results["write 100 MiB"] in ("ENOSPC", "EFBIG")
    assert sorted(path.name for path in scratch.iterdir()) == ["program.py"]  # the tmpfs went with the snippet


def test_a_step_that_fills_its_scratch_fails_alone(shared_scicode: Path) -> None:
    hog = "def tensor(*args):\n    import os\n    fd = os.open('hog.bin', os.O_WRONLY | os.O_CREAT)\n"
    hog += "    os.posix_fallocate(fd, 0, 2 << 30)\n" + TENSOR_BODY
    verdict = run_code(shared_scicode, "19", "19.1", hog)
    assert verdict.status == "fail", verdict.reason
    assert "No space left on device" in verdict.reason or "File too large" in verdict.reason, verdict.reason
    honest = run_code(shared_scicode, "19", "19.1", "def tensor(*args):\n" + TENSOR_BODY)
    assert honest.status == "pass", honest.reason


def test_without_a_tmpfs_each_file_is_still_bounded(tmp_path: Path) -> None:
    code = textwrap.dedent(f"""\
        import os, sys
        sys.path.insert(0, {str(CONFINE_SCRIPT.parent)!r})
        import confine
        confine.apply_limits(None, scratch_limit_mb=1)
        try:
            open("big.bin", "wb").write(b"x" * (2 << 20))
        except OSError as error:
            print(error.strerror)
    """)
    assert unconfined(code, tmp_path).stdout.strip() == "File too large"
    line = Confinement(landlock_abi=7, namespaces="pid+net+ipc", seccomp=True, scratch_reason="no mount namespace")
    assert "scratch bounded per file only (no mount namespace)" in line.description and not line.full


# -- fork bombs, shared memory, other processes --------------------------------------------------------------


def test_a_fork_bomb_stops_at_the_task_limit(scratch: Path) -> None:
    code = textwrap.dedent("""\
        import json, os, time
        count = 0
        try:
            while count < 5000:
                if os.fork() == 0:
                    time.sleep(60)
                    os._exit(0)
                count += 1
        except OSError as error:
            print(json.dumps({"count": count, "error": error.strerror}))
    """)
    result = last_json(confined(code, scratch))
    assert result["error"] == "Resource temporarily unavailable"
    assert TASK_LIMIT - 20 < result["count"] < TASK_LIMIT


# -- memory outside the address-space limit --------------------------------------------------------------------


# Pages written to an anonymous file, a SysV segment or a message queue are held by the kernel object, not by any
# mapping: RLIMIT_AS does not count them once unmapped (a 256 MiB step held 2 GiB this way).
def hold_memory(total_mb: int) -> str:
    """A program that tries to hold `total_mb` MiB outside its address space, each way (memfd files of 32 MiB, below
    the per-file limit), and prints the errno names."""
    return RAW + textwrap.dedent(f"""\
        MiB = 1 << 20
        def memfd(total):
            for _ in range(total // (32 * MiB)):
                fd = os.memfd_create("held")
                for _ in range(32):
                    os.write(fd, bytes(MiB))
        def sysv_shm(total):
            if libc.shmget(0, total, 0o1600) < 0:
                raise OSError(ctypes.get_errno(), "shmget")
        def message_queue(total):
            if libc.msgget(0, 0o1600) < 0:
                raise OSError(ctypes.get_errno(), "msgget")
        def descriptors(total):
            for _ in range(total):
                os.pipe()
        results = {{name: outcome(lambda: hold({total_mb} * MiB)) for name, hold in
                   (("memfd", memfd), ("sysv shm", sysv_shm), ("message queue", message_queue))}}
        results["300 pipes"] = outcome(lambda: descriptors(300))
        print(json.dumps(results))
    """)


HELD_REFUSED = {"memfd": "EPERM", "sysv shm": "EPERM", "message queue": "EPERM", "300 pipes": "EMFILE"}


def test_a_snippet_cannot_hold_memory_outside_its_limit(scratch: Path) -> None:
    assert last_json(confined(hold_memory(2 * SNIPPET_MEMORY_MB), scratch)) == HELD_REFUSED


def test_a_test_process_cannot_hold_memory_outside_its_limit(shared_scicode: Path) -> None:
    body = "".join(f"    {line}\n" for line in hold_memory(2 * 256).splitlines())
    code = f"def tensor(*args):\n{body}    raise RuntimeError('held: ' + json.dumps(results))\n"
    verdict = run_code(shared_scicode, "19", "19.1", code, memory_mb=256)
    assert verdict.status == "fail", verdict.reason
    assert "held: " + json.dumps(HELD_REFUSED) in verdict.reason, verdict.reason


def hold_in_processes(count: int, each_mb: int) -> str:
    """A program that forks `count` processes, each holding `each_mb` MiB (within its own address-space limit) for a
    second, and prints how each ended ("0", or the signal that killed it)."""
    return textwrap.dedent(f"""\
        import json, os, signal, time
        children = []
        for _ in range({count}):
            pid = os.fork()
            if pid == 0:
                held = bytearray({each_mb} << 20)
                held[::4096] = b"x" * len(held[::4096])
                time.sleep(1.5)
                os._exit(0)
            children.append(pid)
        ended = [os.waitpid(pid, 0)[1] for pid in children]
        results = [signal.Signals(os.WTERMSIG(s)).name if os.WIFSIGNALED(s) else str(os.WEXITSTATUS(s)) for s in ended]
    """)


def memory_cgroup_in_force() -> str:
    return str(confinement_of(sys.executable).get("memory_cgroup", ""))


def may_create_a_memory_cgroup() -> bool:
    """Whether this process can make a child of its memory cgroup that has a memory limit (found by doing it)."""
    from stages.execution.confinement import cgroups

    hierarchy, _ = cgroups.own_memory_cgroup()
    if hierarchy is None:
        return False
    folder = os.path.join(hierarchy.folder, f"scicode-test-{uuid.uuid4().hex[:8]}")
    try:
        os.mkdir(folder)
    except OSError:
        return False
    try:
        return os.path.exists(os.path.join(folder, hierarchy.limit_file))
    finally:
        os.rmdir(folder)


def test_a_memory_cgroup_is_in_force_wherever_one_can_be_made() -> None:
    assert bool(memory_cgroup_in_force()) == may_create_a_memory_cgroup(), confinement_of(sys.executable)


def test_the_confinement_line_says_whether_a_step_s_processes_share_one_memory_limit() -> None:
    record = confinement_of(sys.executable)
    if record.get("memory_cgroup"):
        assert f"memory bounded per step ({record['memory_cgroup']})" in str(record["description"])
    else:
        assert "memory bounded per process only (no memory cgroup: " in str(record["description"])
        assert record.get("memory_cgroup_reason")


def test_a_snippet_s_processes_together_stay_within_its_memory_where_a_cgroup_is_in_force(scratch: Path) -> None:
    """Eight processes of 160 MiB each (every one within the 1 GiB address-space limit) hold 1.25 GiB: more than a
    snippet's memory and scratch (1 GiB + 64 MiB) where a memory cgroup bounds the step, which ends some."""
    code = hold_in_processes(8, 160) + "print(json.dumps(results))\n"
    results = json.loads(confined(code, scratch).stdout.strip().splitlines()[-1])
    if memory_cgroup_in_force():
        assert "SIGKILL" in results, results
    else:
        assert results == ["0"] * 8, results


def test_a_test_process_s_processes_together_stay_within_the_step_s_memory_where_a_cgroup_is_in_force(
    shared_scicode: Path,
) -> None:
    """Eight processes of 240 MiB each (every one within the 1 GiB address-space limit, numpy and scipy loaded) hold
    1.9 GiB: more than the step's memory and scratch (1 GiB + 512 MiB)."""
    body = "".join(f"    {line}\n" for line in hold_in_processes(8, 240).splitlines())
    code = f"def tensor(*args):\n{body}    raise RuntimeError('ended: ' + json.dumps(results))\n"
    verdict = run_code(shared_scicode, "19", "19.1", code, memory_mb=1024)
    assert verdict.status == "fail", verdict.reason
    if memory_cgroup_in_force():
        assert "ended: " in verdict.reason and "SIGKILL" in verdict.reason, verdict.reason
    else:
        assert "ended: " + json.dumps(["0"] * 8) in verdict.reason, verdict.reason


READABLE_ELSEWHERE = ("/dev/kmsg", "/dev/vsock", "/dev/tty", "/proc/self/environ", "/sys/kernel/mm", "/sys/fs/cgroup")


def test_shared_memory_devices_and_system_folders_stay_out_of_reach(scratch: Path) -> None:
    key = 0x5C1C0DE
    present = [path for path in READABLE_ELSEWHERE if os.path.exists(path)]
    code = RAW + textwrap.dedent(f"""\
        from multiprocessing import shared_memory
        results = {{"posix shm": outcome(lambda: shared_memory.SharedMemory(create=True, size=4096))}}
        results["/dev/shm"] = outcome(lambda: open("/dev/shm/scicode-escape", "wb").close())
        for path in {present!r}:
            results[path] = outcome(lambda: os.close(os.open(path, os.O_RDONLY)))
        results["sysv shm"] = "0" if libc.shmget({key}, 4096, 0o1666) >= 0 else errno.errorcode[ctypes.get_errno()]
        print(json.dumps(results))
    """)
    results = last_json(confined(code, scratch))
    assert results.pop("sysv shm") == "EPERM"  # its pages would be memory outside the address-space limit
    with open("/proc/sysvipc/shm") as table:
        assert str(key) not in [line.split()[0] for line in table.readlines()[1:] if line.split()]
    assert results == dict.fromkeys(results, "EACCES") and len(results) == 2 + len(present), results
    assert not os.path.exists("/dev/shm/scicode-escape")


def bring_in_program(decoy: Path) -> str:
    return RAW + textwrap.dedent(f"""\
        results = {{"hard link": outcome(lambda: os.link({str(decoy)!r}, "linked"))}}
        results["symbolic link, read"] = outcome(lambda: (os.symlink({str(decoy)!r}, "pointer"), open("pointer").read()))
        results["device node"] = outcome(lambda: os.mknod("null", 0o600 | 0o020000, os.makedev(1, 3)))
        print(json.dumps(results))
    """)


def test_a_host_file_cannot_be_brought_into_the_scratch(scratch: Path, tmp_path: Path) -> None:
    """A hard link or a symbolic link to a file outside, or a device node: what a link names stays outside
    Landlock's rules (the tmpfs scratch is another file system; a link is followed to where it points) and no
    device can be made. Unconfined, beside the decoy, both links work."""
    decoy = tmp_path / "decoy.txt"
    decoy.write_text("host data", encoding="utf-8")
    beside = tmp_path / "beside"
    beside.mkdir()
    plain = last_json(unconfined(bring_in_program(decoy), beside))
    assert plain["hard link"] == "0" and plain["symbolic link, read"] == "0"
    results = last_json(confined(bring_in_program(decoy), scratch))
    assert results == {"hard link": "EXDEV", "symbolic link, read": "EACCES", "device node": "EPERM"}, results


def test_the_processes_outside_are_out_of_reach(scratch: Path) -> None:
    victim = subprocess.Popen(["sleep", "60"])
    try:
        ptrace, readv = syscall_number("ptrace"), syscall_number("process_vm_readv")
        code = RAW + textwrap.dedent(f"""\
            import signal
            results = {{"ptrace attach": raw({ptrace}, 16, {victim.pid}, 0, 0),
                        "process_vm_readv": raw({readv}, {victim.pid}, 0, 0, 0, 0, 0),
                        "kill": outcome(lambda: os.kill({victim.pid}, signal.SIGKILL)),
                        "tiocsti": raw({syscall_number("ioctl")}, 0, 0x5412, ctypes.c_char_p(b"x"))}}
            child = os.fork()
            if child == 0:  # every process this one may signal (in its namespace: none but itself and PID 1)
                try:
                    os.kill(-1, signal.SIGKILL)
                finally:
                    os._exit(0)
            os.waitpid(child, 0)
            print(json.dumps(results))
        """)
        results = last_json(confined(code, scratch))
        assert results["ptrace attach"] == "EPERM" and results["process_vm_readv"] == "EPERM"
        assert results["kill"] in ("ESRCH", "EPERM") and results["tiocsti"] == "EPERM"  # ESRCH: not in the namespace
        threading.Event().wait(0.2)
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


def test_the_seccomp_mode_of_every_confined_process(scratch: Path, shared_scicode: Path) -> None:
    mode = "ctypes.CDLL(None).prctl(21, 0, 0, 0, 0)"
    assert confined(f"import ctypes\nprint({mode})", scratch).stdout.strip() == "2"
    verdict = run_code(
        shared_scicode, "19", "19.1", f"import ctypes\nassert {mode} == 2\ndef tensor(*args):\n" + TENSOR_BODY
    )
    assert verdict.status == "pass", verdict.reason
    assert ctypes.CDLL(None).prctl(21, 0, 0, 0, 0) == 0  # the pipeline itself is not filtered


def process_status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        return dict(line.rstrip("\n").split(":\t", 1) for line in handle if ":\t" in line)


def descendant_chain(pid: int) -> list[int]:
    """The first child of `pid`, its first child, and so on: a fresh test process run by a normal user supervises
    from a fork of itself (a user namespace needs a single-threaded caller), so the confined process may be a
    grandchild."""
    chain: list[int] = []
    while children := children_of(pid):
        pid = children[0]
        chain.append(pid)
    return chain


def children_of(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as handle:
        return [int(child) for child in handle.read().split()]


@pytest.mark.parametrize("use_zygote", [True, False])
def test_the_test_process_and_the_checker_both_run_filtered(use_zygote: bool, tmp_path: Path) -> None:
    """The checker confines itself in the process it was launched as; the test process is the child of its
    supervising parent. Both wait for their job on the channel while this test reads their status."""
    from stages.execution.isolation import scrubbed_environment
    from stages.score.parent.launcher import LaunchSpec, kill_group, launch

    confined_pids = {}
    launched = []
    ends = []
    try:
        for role in ("checker", "test"):
            ours, theirs = socket.socketpair()
            ends.append(ours)
            spec = LaunchSpec(
                role, sys.executable, theirs.fileno(), 1, 2, tmp_path, scrubbed_environment(home=tmp_path), 1024, 16
            )
            process = launch(spec, use_zygote=use_zygote)
            theirs.close()
            launched.append(process)
            assert process.mode == ("zygote" if use_zygote else "fresh")
            confined_pids[role] = process.pid
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            statuses = {role: process_status(pid) for role, pid in confined_pids.items()}
            supervised = descendant_chain(confined_pids["test"])
            if supervised and statuses["checker"].get("Seccomp") == "2":
                statuses["test"] = process_status(supervised[-1])
                if statuses["test"].get("Seccomp") == "2":
                    break
            time.sleep(0.05)
        # As root, only CAP_DAC_READ_SEARCH stays (reads bounded by Landlock), under ids that own nothing.
        kept, ids = (1 << CAP_DAC_READ_SEARCH, UNPRIVILEGED_ID) if os.geteuid() == 0 else (0, os.geteuid())
        for role, status in statuses.items():
            assert (status["Seccomp"], status["NoNewPrivs"], int(status["CapEff"], 16)) == ("2", "1", kept), role
            assert status["Uid"].split() == [str(ids)] * 4 and status["Gid"].split()[0] == str(
                UNPRIVILEGED_ID if ids == UNPRIVILEGED_ID else os.getegid()
            ), role
        for parent in [confined_pids["test"], *supervised[:-1]]:  # the supervising parent runs no model code
            assert process_status(parent)["Seccomp"] == "0"
    finally:
        for end in ends:
            end.close()
        for process in launched:
            kill_group(process.pid)
            process.wait(10)
