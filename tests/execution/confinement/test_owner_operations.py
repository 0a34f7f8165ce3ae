"""What an owner may do without any capability, refused to model code in both modes (root and a normal user).

Each attack runs first unconfined on decoy files of the test's own, to show it works on this machine, then
confined: as root, model code runs under ids that own nothing on the host; as a normal user, under the user's
own ids in a user namespace with the mount namespace, the tmpfs scratch and the task limit in force. Either way,
the seccomp filter refuses the metadata calls and leases. `.ci/run` runs this file as root and as a normal user.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stages.execution.confinement import confinement_of
from stages.execution.confinement.kernel import UNPRIVILEGED_ID
from stages.storage.paths import STATE_DIR_NAME
from tests.execution.confinement.probes import RAW, confined, last_json, unconfined
from tests.support.pipeline_support import DODO
from tests.support.run_artifacts import json_str

pytestmark = pytest.mark.skipif(
    not confinement_of(sys.executable).get("seccomp"), reason="no seccomp filter on this machine"
)

AS_ROOT = os.geteuid() == 0

# Every owner operation of the findings, each reporting its errno name ("0": it worked).
OWNER_OPERATIONS = RAW + textwrap.dedent("""\
    import fcntl
    decoy, folder = sys.argv[1], sys.argv[2]
    def lease():
        fd = os.open(decoy, os.O_RDONLY)
        try:
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
        finally:
            os.close(fd)
    def notify():
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.fcntl(fd, fcntl.F_NOTIFY, fcntl.DN_ACCESS)
        finally:
            os.close(fd)
    print(json.dumps({
        "setuid and world-writable": outcome(lambda: os.chmod(decoy, 0o6777)),
        "mtime 1970": outcome(lambda: os.utime(decoy, (0, 0))),
        "user xattr": outcome(lambda: os.setxattr(decoy, "user.scicode", b"1")),
        "remove xattr": outcome(lambda: os.removexattr(decoy, "user.kept")),
        "chown to self": outcome(lambda: os.chown(decoy, os.getuid(), os.getgid())),
        "read lease": outcome(lease),
        "directory notification": outcome(notify),
        "folder mode 000": outcome(lambda: os.chmod(folder, 0)),
    }))
""")
PROGRAM = "import sys; sys.argv[1:] = {args!r}; exec({code!r})"


def run_attack(code: str, decoy: Path, *, confine: bool, scratch: Path) -> dict[str, str]:
    program = PROGRAM.format(args=[str(decoy), str(decoy.parent)], code=code)
    # The decoy's folder is readable to the confined code: Landlock alone would refuse the lease's open().
    confined_run = confined(program, scratch, readable=(decoy.parent,)) if confine else None
    return last_json(confined_run or unconfined(program, scratch))


def state_of(path: Path) -> tuple[int, int, dict[str, bytes]]:
    info = path.stat()
    return info.st_mode, info.st_mtime_ns, {name: os.getxattr(path, name) for name in os.listxattr(path)}


@pytest.fixture
def decoy(tmp_path: Path) -> Path:
    """A stand-in of `~/.ssh/id_rsa` (mode 600) in a folder of its own, with an xattr to remove."""
    folder = tmp_path / "home" / ".ssh"
    folder.mkdir(parents=True)
    key = folder / "id_rsa"
    key.write_text("not a real key\n")
    key.chmod(0o600)
    try:
        os.setxattr(key, "user.kept", b"1")
    except OSError as error:
        pytest.skip(f"this filesystem has no user xattrs: {error}")
    return key


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    folder = tmp_path / "scratch"
    folder.mkdir()
    return folder


def test_every_owner_operation_works_unconfined_and_fails_confined(decoy: Path, scratch: Path) -> None:
    shown = run_attack(OWNER_OPERATIONS, decoy, confine=False, scratch=scratch)
    assert set(shown.values()) == {"0"}, shown  # every attack works on this machine without the confinement
    decoy.parent.chmod(0o700)
    decoy.chmod(0o600)
    os.setxattr(decoy, "user.kept", b"1")
    os.removexattr(decoy, "user.scicode")
    os.utime(decoy)
    before = state_of(decoy), decoy.parent.stat().st_mode

    refused = run_attack(OWNER_OPERATIONS, decoy, confine=True, scratch=scratch)
    assert refused == dict.fromkeys(shown, "EPERM")
    assert (state_of(decoy), decoy.parent.stat().st_mode) == before


def test_a_lease_cannot_stall_an_open_on_the_host(decoy: Path, scratch: Path) -> None:
    """A write lease held in a loop made every host open() of the file wait the lease-break time."""
    code = RAW + textwrap.dedent("""\
        import fcntl
        fd = os.open(sys.argv[1], os.O_RDONLY)
        print(json.dumps({"lease": outcome(lambda: fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK))}))
    """)
    assert run_attack(code, decoy, confine=False, scratch=scratch) == {"lease": "0"}
    assert run_attack(code, decoy, confine=True, scratch=scratch) == {"lease": "EPERM"}


def test_model_code_runs_under_ids_that_own_nothing_as_root_and_its_own_as_a_user(scratch: Path) -> None:
    code = "import json, os; print(json.dumps([os.getuid(), os.getgid(), os.getgroups()]))"
    uid, gid, groups = last_json(confined(code, scratch))
    if AS_ROOT:
        assert (uid, gid, groups) == (UNPRIVILEGED_ID, UNPRIVILEGED_ID, [])
    else:
        assert (uid, gid) == (os.geteuid(), os.getegid())


def test_scratch_stays_writable_and_a_mode_copy_there_is_refused(scratch: Path) -> None:
    """What the filter breaks in ordinary code: `shutil.copy` copies the mode too, and fails inside scratch."""
    code = textwrap.dedent("""\
        import json, os, shutil
        open("a.txt", "w").write("data")
        result = {"written": open("a.txt").read()}
        try:
            shutil.copy("a.txt", "b.txt")
            result["copy"] = "0"
        except PermissionError:
            result["copy"] = "EPERM"
        shutil.copyfile("a.txt", "c.txt")
        result["copyfile"] = open("c.txt").read()
        print(json.dumps(result))
    """)
    assert last_json(confined(code, scratch)) == {"written": "data", "copy": "EPERM", "copyfile": "data"}


def unprivileged_user_namespaces_work() -> bool:
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    return subprocess.run([unshare, "-Ur", "true"], capture_output=True, timeout=30).returncode == 0


def test_the_confinement_line_is_full_in_this_mode() -> None:
    """As a normal user on a kernel that allows user namespaces, the mount namespace, the tmpfs scratch and the
    task limit are in force (they were lost: the id map was written with the ids read inside the namespace)."""
    record = confinement_of(sys.executable)
    line = json_str(record["description"])
    if AS_ROOT:
        assert "runs as ids 65534:65534 owning nothing on the host" in line, line
        assert "pid+net+ipc+mount namespaces" in line, line
    else:
        if not unprivileged_user_namespaces_work():
            pytest.skip("this kernel refuses unprivileged user namespaces (`unshare -Ur true` fails)")
        assert "user+pid+net+ipc+mount namespaces (at most 1024 tasks)" in line, line
        assert f"runs as the user's own ids {os.geteuid()}:{os.getegid()}" in line, line
    assert "scratch on a size-limited tmpfs" in line and "seccomp filter" in line, line
    assert record["full"] is True, line


def run_doit_here(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "doit", "-f", str(DODO), "-d", str(workdir), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=workdir)


def test_a_state_folder_that_cannot_be_used_gives_one_line_and_exit_5(tmp_path: Path) -> None:
    (tmp_path / STATE_DIR_NAME).write_text("a file where the state folder belongs\n")
    result = run_doit_here(tmp_path, "list")
    assert result.returncode == 5, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().startswith("scicode: cannot write the state folder")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.skipif(AS_ROOT, reason="root writes into a folder whatever its mode says")
def test_a_state_folder_made_read_only_gives_one_line_and_exit_5(tmp_path: Path) -> None:
    state = tmp_path / STATE_DIR_NAME
    state.mkdir()
    state.chmod(0o500)
    try:
        result = run_doit_here(tmp_path, "list")
    finally:
        state.chmod(0o700)
    assert result.returncode == 5, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert str(state) in result.stderr
