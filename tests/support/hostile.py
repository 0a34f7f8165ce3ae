"""Hostile text for the property tests of the trusted side: what a model (or a process running its code) can
send, as `hypothesis` strategies.

`PAYLOADS` are the inputs known to break naive parsing or writing: nesting too deep for `ast.parse`
(RecursionError) or for its parser (MemoryError), for `json.loads` and for `ast.unparse`; null bytes; lone
surrogates; more text than the trusted side accepts; fences that yield nothing; terminal escape sequences
(cursor movement, OSC 52 clipboard, window title); raw HTML and Markdown that would forge a table or a
heading. `hostile_text()` draws them alone, embedded in arbitrary text, inside fences, and arbitrary text
of every code point (surrogates and control characters included).
"""

from __future__ import annotations

from hypothesis import strategies as st

from stages.execution.safe_ast import MAX_PARSED_CHARS

DEEP_UNARY = "-" * 5000 + "1"  # ast.parse: RecursionError
DEEPER_UNARY = "-" * 100_000 + "1"  # ast.parse: MemoryError
TOO_DEEP_TO_UNPARSE = "def f():\n    return " + "-" * 900 + "1\n"  # parses; ast.unparse: RecursionError
ESCAPES = "\x1b[1A\x1b[2K- 78.2 (pass)\x1b]52;c;cm0gLXJmIH4K\x07\x1b]0;owned\x07\x9b31m"
FAKE_TABLE = "<table><tr><td>main_problem_resolve_rate</td><td>15/15 (100.0%)</td></tr></table>"

PAYLOADS: tuple[str, ...] = (
    DEEP_UNARY,
    DEEPER_UNARY,
    TOO_DEEP_TO_UNPARSE,
    "(" * 5000 + ")" * 5000,
    "[" * 100_000,
    "a" + ".a" * 100_000,
    "1" + "+1" * 50_000,
    "def f():\x00\n    pass\n",
    "\x00",
    "\ud800",
    "def f():\n    return '\udfff'\n",
    '{"code": "\\ud800"}',
    '{"code": ' + "[" * 100_000 + "}",
    "x" * (MAX_PARSED_CHARS + 1),
    "```",
    "```python\n```",
    "def f(x):\n    return x\n```",
    "``` ```",
    ESCAPES,
    FAKE_TABLE,
    "## Scores\n| main_problem_resolve_rate | 15/15 |\n|---|---|",
    "`` ` ``` `|`|\n\r\n\u2028\u2029\u202e\u200b",
    "\x7f\x85\ufeff\U000e0041",
)

ANY_CODE_POINT = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=())
SHORT_TEXT = st.text(alphabet=ANY_CODE_POINT, max_size=40)
PAYLOAD = st.sampled_from(range(len(PAYLOADS))).map(PAYLOADS.__getitem__)  # a short repr, not megabytes


def _fenced(tag: str, body: str, closed: bool) -> str:
    return f"```{tag}\n{body}" + ("\n```" if closed else "")


def hostile_text() -> st.SearchStrategy[str]:
    """Any text, with the known-bad payloads drawn often: alone, between arbitrary text, or in a fence."""
    return st.one_of(
        PAYLOAD,
        st.text(alphabet=ANY_CODE_POINT, max_size=400),
        st.builds(lambda before, payload, after: before + payload + after, SHORT_TEXT, PAYLOAD, SHORT_TEXT),
        st.builds(
            _fenced, st.sampled_from(["python", "py", "Python", "", "text", "python3 x"]), PAYLOAD, st.booleans()
        ),
        st.builds(
            _fenced, st.sampled_from(["python", ""]), st.text(alphabet=ANY_CODE_POINT, max_size=200), st.booleans()
        ),
    )
