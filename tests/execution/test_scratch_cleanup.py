"""Removing a scratch folder never follows what model code planted there (symlinks, hard links, locked folders).

Every test uses decoy folders of its own (modes 755 and 1777, as `/` and `/tmp` have) and checks that their mode
and content are unchanged after the cleanup. The cleanup runs the way it does after a step whose scratch was no
tmpfs (`ScratchDir`, `remove_tree`), after a stopped run (`live_processes.remove_tracked_folders`), and end to end
after a real test process and a real snippet.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path

import pytest

from stages.config.settings import load_settings
from stages.execution import live_processes
from stages.execution.isolation import ScratchDir
from stages.execution.tree_removal import remove_tree
from stages.generate.tools import CODE_INTERPRETER, run_tool
from tests.score.score_helpers import run_code

TENSOR_BODY = "    M = 1\n    for a in args:\n        M = np.kron(M, a)\n    return M\n"


def make_decoys(folder: Path) -> dict[str, Path]:
    """Two folders with the modes of `/` and `/tmp`, and a file in the first."""
    decoys = {"755": folder / "decoy-755", "1777": folder / "decoy-1777"}
    for mode, path in decoys.items():
        path.mkdir()
        path.chmod(int(mode, 8))
    decoys["file"] = decoys["755"] / "precious.txt"
    decoys["file"].write_text("untouched")
    decoys["file"].chmod(0o644)
    return decoys


def decoy_state(decoys: dict[str, Path]) -> dict[str, object]:
    return {
        "755": stat.S_IMODE(decoys["755"].stat().st_mode),
        "1777": stat.S_IMODE(decoys["1777"].stat().st_mode),
        "file": (stat.S_IMODE(decoys["file"].stat().st_mode), decoys["file"].read_text()),
        "listing": sorted(p.name for p in decoys["755"].iterdir()),
    }


UNTOUCHED_FILE = (0o644, "untouched")
UNTOUCHED = {"755": 0o755, "1777": 0o1777, "file": UNTOUCHED_FILE, "listing": ["precious.txt"]}


def plant(scratch: Path, decoys: dict[str, Path]) -> None:
    """What a hostile step leaves behind: links to the decoys at every level, locked folders, a hard link."""
    (scratch / "link-755").symlink_to(decoys["755"])
    (scratch / "link-1777").symlink_to(decoys["1777"])
    (scratch / "deep" / "er").mkdir(parents=True)
    (scratch / "deep" / "er" / "link").symlink_to(decoys["1777"])
    (scratch / "deep" / "file-link").symlink_to(decoys["file"])
    os.link(decoys["file"], scratch / "hard-link")
    (scratch / "locked" / "inner").mkdir(parents=True)
    (scratch / "locked" / "inner" / "link").symlink_to(decoys["755"])
    (scratch / "locked" / "inner").chmod(0)
    (scratch / "locked").chmod(0o500)
    (scratch / "deep").chmod(0)
    os.mkfifo(scratch / "fifo")


@pytest.fixture
def decoys(tmp_path: Path) -> dict[str, Path]:
    return make_decoys(tmp_path)


def test_scratch_dir_removes_everything_and_follows_nothing(tmp_path: Path, decoys: dict[str, Path]) -> None:
    base = tmp_path / "scratches"
    with ScratchDir(base, "step-") as scratch:
        plant(scratch, decoys)
    assert list(base.iterdir()) == []
    assert decoy_state(decoys) == UNTOUCHED


def test_a_link_in_place_of_the_folder_itself_is_removed_not_followed(tmp_path: Path, decoys) -> None:
    link = tmp_path / "scratch-link"
    link.symlink_to(decoys["1777"])
    remove_tree(link)
    assert not link.exists() and not link.is_symlink()
    assert decoy_state(decoys) == UNTOUCHED


def test_a_stopped_run_removes_tracked_folders_the_same_way(tmp_path: Path, decoys) -> None:
    scratch = tmp_path / "tracked"
    scratch.mkdir()
    plant(scratch, decoys)
    live_processes.track_folder(scratch)
    live_processes.remove_tracked_folders()
    assert not scratch.exists()
    assert decoy_state(decoys) == UNTOUCHED


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user")
def test_as_a_user_who_owns_the_decoys_nothing_outside_changes() -> None:
    """Not root: permission checks apply, so a followed chmod would succeed on the user's own decoys."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgid(65534)
            os.setuid(65534)
            home = Path(tempfile.mkdtemp(prefix="scicode-cleanup-user-"))
            own_decoys = make_decoys(home)
            scratch = home / "scratch"
            scratch.mkdir()
            plant(scratch, own_decoys)
            remove_tree(scratch)
            report = {"scratch_left": scratch.exists(), "decoys": decoy_state(own_decoys), "home": str(home)}
            os.write(write_fd, json.dumps(report).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_fd)
    _, status = os.waitpid(pid, 0)
    report = json.loads(os.read(read_fd, 65536) or b"{}")
    os.close(read_fd)
    assert os.waitstatus_to_exitcode(status) == 0, report
    remove_tree(report["home"])
    assert report["scratch_left"] is False
    assert report["decoys"] == {**UNTOUCHED, "file": list(UNTOUCHED_FILE)}


PLANT_CODE = """
import os
os.symlink({d755!r}, 'link-755')
os.symlink({d1777!r}, 'link-1777')
os.makedirs('locked/inner')
os.symlink({d755!r}, 'locked/inner/link')
for folder in ('locked/inner', 'locked'):
    try:
        os.chmod(folder, 0)  # refused by the seccomp filter; where there is none, the folders are locked
    except PermissionError:
        pass
"""


def test_a_step_that_plants_links_changes_nothing_outside(shared_scicode: Path, decoys) -> None:
    planting = PLANT_CODE.format(d755=str(decoys["755"]), d1777=str(decoys["1777"]))
    code = planting + "def tensor(*args):\n" + TENSOR_BODY  # planted once, when the step's code runs
    verdict = run_code(shared_scicode, "19", "19.1", code)
    assert verdict.status == "pass", verdict.reason
    assert decoy_state(decoys) == UNTOUCHED


def test_a_snippet_that_plants_links_changes_nothing_outside(tmp_path: Path, decoys) -> None:
    settings = load_settings({"code_workdir": str(tmp_path / "interpreter"), "model": "m"}, cwd=tmp_path)
    code = PLANT_CODE.format(d755=str(decoys["755"]), d1777=str(decoys["1777"])) + "print('planted')\n"
    outcome = run_tool(CODE_INTERPRETER, json.dumps({"code": code}), settings)
    assert (outcome.status, outcome.output) == ("ok", "planted\n")
    assert decoy_state(decoys) == UNTOUCHED
    assert list((tmp_path / "interpreter").iterdir()) == []
