"""Probe programs of the confinement tests: each runs confined (by the snippet launcher, as a tool snippet is) or
unconfined, and reports the errno names of its system calls as its last line of JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from stages.execution.confinement import CONFINE_SCRIPT, binding_arguments

# Prelude of every probe program: errno of a raw system call (0 when it succeeded).
RAW = textwrap.dedent("""\
    import ctypes, errno, json, os, socket, sys
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    def raw(number, *args):
        ctypes.set_errno(0)
        result = libc.syscall(number, *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
        return errno.errorcode.get(ctypes.get_errno(), "0") if result < 0 else "0"
    def outcome(action):
        try:
            action()
            return "0"
        except OSError as error:
            return errno.errorcode.get(error.errno, str(error.errno))
""")


SNIPPET_MEMORY_MB = 1024


def confined(
    code: str, scratch: Path, *, scratch_limit_mb: int = 64, timeout: float = 120, readable: tuple[Path, ...] = ()
) -> subprocess.CompletedProcess:
    """`code` run by the snippet launcher in `scratch`, as a tool snippet is (`readable`: more read rules)."""
    command = [
        sys.executable,
        str(CONFINE_SCRIPT),
        *(word for path in readable for word in ("--read", str(path))),
        "--scratch",
        str(scratch),
        "--scratch-limit-mb",
        str(scratch_limit_mb),
        "--memory-mb",
        str(SNIPPET_MEMORY_MB),
        *binding_arguments(),
        "--python",
        "--",
        "-c",
        code,
    ]
    return subprocess.run(
        command,
        cwd=scratch,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"PATH": os.defpath},
    )


def unconfined(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=60)


def last_json(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode == 0, (result.returncode, result.stdout[-2000:], result.stderr[-2000:])
    return json.loads(result.stdout.strip().splitlines()[-1])
