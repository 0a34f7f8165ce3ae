"""`ast.parse` that is safe to call from several threads of one process at once.

CPython 3.11.0-3.11.7 and 3.12.0-3.12.1 keep the AST constructor's recursion-depth counter in state
shared by every thread. When a garbage collection inside `ast.parse` runs a finalizer and the
interpreter switches threads there, another thread's parse moves the same counter, and one of the two
fails with `SystemError: AST constructor recursion depth mismatch` (python/cpython#106905, fixed in
3.11.8 and 3.12.2). The pipeline parses code in many threads at once (generation, target derivation,
scoring), so its parses go through one process-wide lock here. The lock is re-entrant: a finalizer
that runs inside a parse may parse too. Parsing a step's code takes well under a millisecond, so the
lock costs nothing measurable.
"""

from __future__ import annotations

import ast
import threading

_PARSE_LOCK = threading.RLock()


def parse(source: str, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    """`ast.parse(source, filename, mode)` under the process-wide parse lock (SyntaxError as usual)."""
    with _PARSE_LOCK:
        return ast.parse(source, filename=filename, mode=mode)


def parse_module(source: str, filename: str = "<unknown>") -> ast.Module:
    """A module's syntax tree, parsed under the process-wide parse lock."""
    tree = parse(source, filename, "exec")
    assert isinstance(tree, ast.Module)
    return tree
