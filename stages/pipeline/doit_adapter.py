"""The one reader of doit's internals: the `name=value` words of the command line.

doit keeps those words in `doit.doit_cmd._CMDLINE_VARS`, a private name of the doit release pinned in
pyproject.toml (`DOIT_VERSION`); a test fails when the installed doit is another release, so a doit upgrade is
checked here first. Everything else the pipeline takes from doit is its public API (`create_after`,
`TaskFailed`, the reporter).
"""

from __future__ import annotations

DOIT_VERSION = "0.37.0"  # the release whose private `doit_cmd._CMDLINE_VARS` this module reads


def command_line_variables() -> dict[str, str]:
    """The `name=value` words of this doit command line (empty before doit has parsed them)."""
    from doit import doit_cmd

    return dict(doit_cmd._CMDLINE_VARS or {})
