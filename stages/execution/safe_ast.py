"""`ast.parse` that is safe to call from several threads of one process at once.

CPython 3.11.0-3.11.7 and 3.12.0-3.12.1 keep the AST constructor's recursion-depth counter in state
shared by every thread. When a garbage collection inside `ast.parse` runs a finalizer and the
interpreter switches threads there, another thread's parse moves the same counter, and one of the two
fails with `SystemError: AST constructor recursion depth mismatch` (python/cpython#106905, fixed in
3.11.8 and 3.12.2). The pipeline parses code in many threads at once (generation, target derivation,
scoring), so its parses go through one process-wide lock here. The lock is re-entrant: a finalizer
that runs inside a parse may parse too. Parsing a step's code takes well under a millisecond, so the
lock costs nothing measurable.

Code written by a model is parsed through `parse_untrusted`, which is total: any text, of any size, gives a
syntax tree or None, never an exception (a syntax error, a null byte, a lone surrogate, nesting deeper than
the parser allows: `-` repeated 5000 times raises RecursionError, 100,000 times MemoryError). Text longer
than MAX_PARSED_CHARS is not parsed at all.
"""

from __future__ import annotations

import ast
import threading

_PARSE_LOCK = threading.RLock()
MAX_PARSED_CHARS = 1_000_000  # 400 times the longest reference step (2,348 characters, 78.3)


def parse(source: str, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    """`ast.parse(source, filename, mode)` under the process-wide parse lock (SyntaxError as usual)."""
    with _PARSE_LOCK:
        return ast.parse(source, filename=filename, mode=mode)


def parse_module(source: str, filename: str = "<unknown>") -> ast.Module:
    """A module's syntax tree, parsed under the process-wide parse lock."""
    tree = parse(source, filename, "exec")
    assert isinstance(tree, ast.Module)
    return tree


def parse_untrusted(source: object, filename: str = "<unknown>") -> ast.Module | None:
    """The syntax tree of `source` (model-written code), or None when it is not a `str` of at most
    MAX_PARSED_CHARS characters that this process can parse; never raises (see the module docstring)."""
    if not isinstance(source, str) or len(source) > MAX_PARSED_CHARS:
        return None
    try:
        return parse_module(source, filename)
    except Exception:  # noqa: BLE001 - SyntaxError, ValueError, RecursionError, MemoryError: all mean "not parsed"
        return None
