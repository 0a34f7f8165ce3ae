"""The official SciCode answer protocol: code extraction, import removal, code carried to later steps.

Shared by generation (prompts carry earlier steps forward) and scoring (test scripts), so the code a
later step sees in its prompt is the code its test script runs. The rules follow the official
generator where it is right, so carried code is byte for byte what an official run carries, and fix
its known defects:

- Extraction: the first ```python (```py, ```Python, ```python3) block, else the first fenced block;
  the code is the text after the fence's tag up to the closing fence, the line break that ends the
  fence line included (as officially). An answer without a fence is code only when its whole text
  parses as Python and defines the name the step's header defines; other prose is never code. An
  extraction that is empty or whitespace once top-level imports are removed (e.g. code followed by a
  lone closing fence, whose "block" is what follows it), or longer than MAX_CODE_CHARS, is no code.
- Import removal: top-level `import`/`from ... import` statements only (AST-based, multi-line
  imports included; imports inside functions stay). A removed statement's lines are left empty, and
  the blank lines directly above it go with it, exactly as the official rule removes them; every
  other character, inside strings or not, stays byte for byte.
- Carried code (`Carry`): `full` carries each earlier step's whole code (an uninterrupted official
  run); `definition` carries only the definition the header names, rendered with `ast.unparse` (a
  resumed official run), a class whole (officially a bare `__init__`). Prefilled steps are always
  carried as their official file, verbatim.

Every function here takes model-written text and never raises on it: code is parsed only through
`safe_ast.parse_untrusted` (size-capped, any failure means "does not parse").
"""

from __future__ import annotations

import ast
import re
from typing import Literal

from stages.benchmark.problems import Step, prefilled_code
from stages.execution import safe_ast
from stages.storage.paths import DataPaths

Carry = Literal["full", "definition"]
CARRY_MODES: tuple[Carry, ...] = ("full", "definition")
DEFAULT_CARRY: Carry = "full"

_FENCE = re.compile(r"```([^\n`]*)(.*?)(?:```|\Z)", re.DOTALL)
_PYTHON_TAGS = {"python", "py", "python3"}
_DEFINITION = re.compile(r"^(?:async\s+def|def|class)\s+([A-Za-z_]\w*)", re.MULTILINE)
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")
_LINE_END = re.compile(r"(?:\r\n|\r|\n)\Z")
_LEADING_SEMICOLON = re.compile(r"\A[ \t]*;[ \t]*")
_COMMENT_ONLY = re.compile(r"[ \t]*(?:#.*)?")
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
MAX_CODE_CHARS = safe_ast.MAX_PARSED_CHARS  # a longer extraction is no code (it is never parsed or run)


# ---------------------------------------------------------------------------
# Extraction
# ---------------------------------------------------------------------------


def extract_fenced_code(answer: str) -> str | None:
    """The first ```python (```py, ```Python) block, else the first fenced block; None without a fence.

    The block's text starts right after the tag (with the line break ending the fence line, as the
    official extraction takes it). An unclosed last fence (a truncated answer) yields the text up to
    the end.
    """
    blocks: list[tuple[str, str]] = [(tag.strip().lower(), body) for tag, body in _FENCE.findall(answer or "")]
    if not blocks:
        return None
    for tag, body in blocks:
        if tag in _PYTHON_TAGS:
            return body
    return blocks[0][1]


def defined_name(function_header: str) -> str | None:
    """The name of the function or class a step header defines (the unindented `def`/`class` line)."""
    match = _DEFINITION.search(function_header or "")
    return match.group(1) if match else None


def _top_level_definition(tree: ast.Module, name: str) -> ast.stmt | None:
    return next((node for node in tree.body if isinstance(node, _DEFINITIONS) and node.name == name), None)


def is_unfenced_code(answer: str, name: str | None) -> bool:
    """True when an answer without a fence is, as a whole, Python that defines `name` at top level."""
    if name is None or not (answer or "").strip():
        return False
    tree = safe_ast.parse_untrusted(answer)
    return tree is not None and _top_level_definition(tree, name) is not None


def is_code(code: str) -> bool:
    """Whether an extraction (top-level imports removed) is code a step contributes: not blank, and at most
    MAX_CODE_CHARS characters."""
    return bool(code.strip()) and len(code) <= MAX_CODE_CHARS


def answer_to_code(answer: str, defines: str | None) -> str | None:
    """The code a step's answer contributes, top-level imports removed; None when it has none.

    `defines` is the name the step's header defines: an answer without a fence is code only when its
    whole text parses and defines that name. An extraction that fails `is_code` is none."""
    fenced = extract_fenced_code(answer)
    if fenced is not None:
        code = remove_top_level_imports(fenced)
    elif is_unfenced_code(answer, defines):
        code = remove_top_level_imports(answer)
    else:
        return None
    return code if is_code(code) else None


def no_code_reason(answer: str | None) -> str:
    """Why an answer contributes no code, in words for its `parse_error` verdict."""
    fenced = extract_fenced_code(answer or "")
    if fenced is None:
        return "no fenced code block, nor Python that defines the step's name"
    if len(fenced) > MAX_CODE_CHARS:
        return f"its code block has {len(fenced)} characters, more than the {MAX_CODE_CHARS} accepted"
    if not fenced.strip():
        return "its code block is empty (a lone closing fence starts an empty block)"
    return "its code block holds nothing but top-level imports"


# ---------------------------------------------------------------------------
# Import removal
# ---------------------------------------------------------------------------


def source_lines(code: str) -> list[str]:
    """`code` split into lines with their line breaks, the way Python numbers lines (\\n, \\r\\n, \\r only)."""
    return _LINE.findall(code)


def _line_end(line: str) -> str:
    match = _LINE_END.search(line)
    return match.group(0) if match else ""


def _char_offset(line: str, byte_offset: int) -> int:
    """ast column offsets count UTF-8 bytes; convert to a character index."""
    return len(line.encode("utf-8")[:byte_offset].decode("utf-8", errors="ignore"))


def _blank_run_above(lines: list[str], line_index: int) -> int:
    """Index of the first of the whitespace-only lines directly above `line_index` (itself if none)."""
    top = line_index
    while top > 0 and not lines[top - 1].strip():
        top -= 1
    return top


def _remove_statement(lines: list[str], node: ast.stmt) -> list[str]:
    """`lines` without the statement `node`: its lines left empty, other statements on them kept; when
    it starts its line, the blank lines directly above it are removed too."""
    first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
    before = lines[first][: _char_offset(lines[first], node.col_offset)]
    rest = lines[last][_char_offset(lines[last], node.end_col_offset or 0) :]
    ending = _line_end(rest)
    after = _LEADING_SEMICOLON.sub("", rest[: len(rest) - len(ending)], count=1)
    starts_line = not before.strip()
    if starts_line and _COMMENT_ONLY.fullmatch(after):
        after = ""  # a comment on the import's own line goes with it
    if first == last:
        replacement = [before + after + ending]
    else:
        inner = [_line_end(line) for line in lines[first + 1 : last]]
        replacement = [before + _line_end(lines[first]), *inner, after + ending]
    top = _blank_run_above(lines, first) if starts_line else first
    return lines[:top] + replacement + lines[last + 1 :]


def remove_top_level_imports(code: str) -> str:
    """Remove module-level `import`/`from ... import` statements (see the module docstring).

    Code that does not parse is returned unchanged (it fails at scoring with its own error).
    """
    tree = safe_ast.parse_untrusted(code)
    if tree is None:
        return code
    imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    if not imports:
        return code
    lines = source_lines(code)
    # From the end, so the line numbers of statements not yet removed stay valid.
    for node in sorted(imports, key=lambda n: (n.lineno, n.col_offset), reverse=True):
        lines = _remove_statement(lines, node)
    return "".join(lines)


# ---------------------------------------------------------------------------
# Carried code
# ---------------------------------------------------------------------------


def named_definition(code: str, function_header: str) -> str:
    """The definition the header names, rendered with `ast.unparse` (a class whole); the whole code
    when it has no such definition or does not parse. A definition nested too deeply for `ast.unparse`
    (RecursionError) is carried as its source text."""
    name = defined_name(function_header)
    if name is None:
        return code
    tree = safe_ast.parse_untrusted(code)
    if tree is None:
        return code
    node = _top_level_definition(tree, name)
    if node is None:
        node = next((n for n in ast.walk(tree) if isinstance(n, _DEFINITIONS) and n.name == name), None)
    if node is None:
        return code
    return _rendered(code, node)


def _rendered(code: str, node: ast.stmt) -> str:
    try:
        return ast.unparse(node)
    except (RecursionError, MemoryError):
        return ast.get_source_segment(code, node) or code


def carried_code(code: str, function_header: str, carry: Carry) -> str:
    """What a generated earlier step contributes to later prompts and test scripts under `carry`."""
    if carry == "full":
        return code
    return named_definition(code, function_header)


def carried_forward(step: Step, code: str | None, data_paths: DataPaths, carry: Carry) -> str:
    """What `step` contributes to later prompts and test scripts: the official file of a prefilled step
    (verbatim), else `carried_code` of the step's final code ("" when the step produced none)."""
    official = prefilled_code(data_paths, step)
    if official is not None:
        return official
    return carried_code(code or "", step.function_header, carry)
