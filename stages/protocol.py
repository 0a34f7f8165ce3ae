"""The official SciCode answer protocol: code extraction, import removal, code carried to later steps.

Shared by generation (prompts carry earlier steps forward) and scoring (test scripts). The known
defects of other harnesses are fixed here: prose without a fence is never code, only top-level
imports are removed (AST-based, multi-line imports included), and a class step carries its whole
class forward, not only `__init__`.
"""
from __future__ import annotations

import ast
import re

from stages import safe_ast

_FENCE = re.compile(r"```([^\n`]*)\n?(.*?)(?:```|\Z)", re.DOTALL)
_PYTHON_TAGS = {"python", "py", "python3"}
_DEFINITION = re.compile(r"^(?:async\s+def|def|class)\s+([A-Za-z_]\w*)", re.MULTILINE)


def extract_fenced_code(answer: str) -> str | None:
    """The first ```python (```py, ```Python) block, else the first fenced block; None without a fence.

    An unclosed last fence (a truncated answer) yields the text up to the end.
    """
    blocks = [(tag.strip().lower(), body) for tag, body in _FENCE.findall(answer or "")]
    if not blocks:
        return None
    for tag, body in blocks:
        if tag in _PYTHON_TAGS:
            return body
    return blocks[0][1]


def remove_top_level_imports(code: str) -> str:
    """Delete module-level `import`/`from ... import` statements; keep everything else verbatim.

    Code that does not parse is returned unchanged (it fails at scoring with its own error).
    """
    try:
        tree = safe_ast.parse_module(code)
    except SyntaxError:
        return code
    imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    if not imports:
        return code
    lines = code.splitlines(keepends=True)
    # Remove from the end so earlier offsets stay valid.
    for node in sorted(imports, key=lambda n: (n.lineno, n.col_offset), reverse=True):
        lines = _cut_statement(lines, node)
    kept = [line for line in lines if line.strip() not in {"", ";"} or line in ("\n", "\r\n")]
    return "".join(kept)


def _cut_statement(lines: list[str], node: ast.stmt) -> list[str]:
    start_line, end_line = node.lineno - 1, (node.end_lineno or node.lineno) - 1
    start_col = _char_offset(lines[start_line], node.col_offset)
    end_col = _char_offset(lines[end_line], node.end_col_offset or 0)
    before = lines[start_line][:start_col]
    after = lines[end_line][end_col:]
    after = re.sub(r"^\s*;\s*", "", after)
    if before.strip().endswith(";"):
        before = before.rstrip()[:-1]
    joined = before + after
    replacement = [joined] if joined.strip() else []
    return lines[:start_line] + replacement + lines[end_line + 1:]


def _char_offset(line: str, byte_offset: int) -> int:
    """ast column offsets count UTF-8 bytes; convert to a character index."""
    return len(line.encode("utf-8")[:byte_offset].decode("utf-8", errors="ignore"))


def answer_to_code(answer: str) -> str | None:
    """The code a step's answer contributes: fenced code with top-level imports removed; None if no fence."""
    fenced = extract_fenced_code(answer)
    if fenced is None:
        return None
    return remove_top_level_imports(fenced)


def defined_name(function_header: str) -> str | None:
    """The name of the function or class a step header defines (the unindented `def`/`class` line)."""
    match = _DEFINITION.search(function_header or "")
    return match.group(1) if match else None


def carried_code(code: str, function_header: str) -> str:
    """What an earlier step contributes to later prompts and test scripts.

    As in the official protocol, the definition the header names (rendered with `ast.unparse`); a
    class is carried whole. Code without that definition, or that does not parse, is carried whole.
    """
    name = defined_name(function_header)
    try:
        tree = safe_ast.parse_module(code)
    except SyntaxError:
        return code
    if name is None:
        return code
    definitions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    for node in tree.body:
        if isinstance(node, definitions) and node.name == name:
            return ast.unparse(node)
    for node in ast.walk(tree):
        if isinstance(node, definitions) and node.name == name:
            return ast.unparse(node)
    return code
