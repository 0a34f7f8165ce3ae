"""The answer protocol: fence extraction, unfenced code, top-level import removal, carried code."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stages.benchmark.protocol import (
    CARRY_MODES,
    MAX_CODE_CHARS,
    answer_to_code,
    carried_code,
    defined_name,
    extract_fenced_code,
    is_code,
    is_unfenced_code,
    no_code_reason,
    remove_top_level_imports,
    source_lines,
)
from tests.support.hostile import DEEP_UNARY, DEEPER_UNARY, TOO_DEEP_TO_UNPARSE, hostile_text

# -- extraction -----------------------------------------------------------------------------


def test_fence_body_keeps_the_line_break_of_the_fence_line_as_officially() -> None:
    assert extract_fenced_code("Here:\n```python\nx = 1\n```\nDone.") == "\nx = 1\n"


def test_python_fence_is_preferred_then_the_first_fence() -> None:
    answer = "```text\nnot code\n```\n```Python\ny = 2\n```\n```py\nz = 3\n```"
    assert extract_fenced_code(answer) == "\ny = 2\n"
    assert extract_fenced_code("```\na = 1\n```\n```sh\nls\n```") == "\na = 1\n"
    assert extract_fenced_code("```py\nb = 1\n```") == "\nb = 1\n"


def test_unclosed_fence_runs_to_the_end_and_no_fence_is_none() -> None:
    assert extract_fenced_code("```python\ndef f(:") == "\ndef f(:"
    assert extract_fenced_code("def f(): pass") is None
    assert extract_fenced_code("") is None


def test_unfenced_answer_is_code_only_when_it_parses_and_defines_the_name() -> None:
    code = "import numpy as np\n\ndef f(x):\n    return np.sqrt(x)\n"
    assert is_unfenced_code(code, "f")
    assert answer_to_code(code, "f") == "\n\ndef f(x):\n    return np.sqrt(x)\n"
    assert answer_to_code("class F:\n    pass\n", "F") == "class F:\n    pass\n"
    assert answer_to_code(code, "g") is None  # defines another name
    assert answer_to_code("Sure! Here is f:\ndef f(x):\n    return x\n", "f") is None  # prose around it
    assert answer_to_code("if True:\n    def f(x):\n        return x\n", "f") is None  # not at top level
    assert answer_to_code("x = 1\n", "f") is None
    assert answer_to_code(code, None) is None
    assert answer_to_code("   \n", "f") is None
    assert answer_to_code("def f():\x00 pass", "f") is None


def test_fenced_answer_wins_over_the_unfenced_rule() -> None:
    assert answer_to_code("```python\nimport os\ndef g():\n    pass\n```", "f") == "\ndef g():\n    pass\n"


def test_defined_name_is_the_unindented_definition_of_the_header() -> None:
    assert defined_name("def f(x):\n    '''doc'''") == "f"
    assert defined_name("class Slater:\n    def __init__(self):\n        pass") == "Slater"
    assert defined_name("no definition") is None


# -- import removal ------------------------------------------------------------------------


def test_removed_imports_leave_their_lines_empty_and_keep_every_other_line() -> None:
    code = (
        "import numpy as np\n"
        "from scipy import (\n"
        "    integrate,\n"
        "    linalg,\n"
        ")\n"
        "X = 1\n"
        "def f():\n"
        "    import math\n"
        "    return math.pi\n"
        "try:\n"
        "    import sympy\n"
        "except ImportError:\n"
        "    sympy = None\n"
    )
    stripped = remove_top_level_imports(code)
    before, after = source_lines(code), source_lines(stripped)
    assert len(after) == len(before)
    assert after[:5] == ["\n"] * 5
    assert after[5:] == before[5:]  # imports inside functions and blocks stay


def test_whitespace_only_lines_inside_strings_stay_byte_for_byte() -> None:
    code = (
        "import numpy as np\n"
        "def P_tail(N):\n"
        "    '''Returns:\n"
        "     float\n"
        "     \n"
        "\t\n"
        "    '''\n"
        '    s = """\n'
        "\n"
        "   \n"
        '"""\n'
        "    return s\n"
    )
    stripped = remove_top_level_imports(code)
    assert stripped == "\n" + code.split("\n", 1)[1]


def test_blank_lines_directly_above_an_import_go_with_it_as_officially() -> None:
    code = "def f():\n    return 1\n\n\nimport os\nX = 2\n"
    assert remove_top_level_imports(code) == "def f():\n    return 1\n\nX = 2\n"
    # the usual answer: the fence line's break and the imports below it
    assert (
        remove_top_level_imports("\nimport numpy as np\nimport scipy\n\ndef f():\n    pass\n")
        == "\n\n\ndef f():\n    pass\n"
    )


def test_statements_sharing_a_line_with_an_import_stay() -> None:
    assert remove_top_level_imports("import os; x = 1\n") == "x = 1\n"
    assert remove_top_level_imports("x = 1; import os\n") == "x = 1; \n"
    assert remove_top_level_imports("x = 1; import os; y = 2\n") == "x = 1; y = 2\n"
    assert remove_top_level_imports("import os  # for paths\nx = 1\n") == "\nx = 1\n"


def test_line_breaks_and_unicode_are_kept() -> None:
    code = "import os\r\nname = 'é\u2028'\r\nfrom math import pi\rvalue = pi\r\n"
    assert remove_top_level_imports(code) == "\r\nname = 'é\u2028'\r\n\rvalue = pi\r\n"


def test_code_without_imports_or_that_does_not_parse_is_unchanged() -> None:
    assert remove_top_level_imports("x = 1\n\n\n") == "x = 1\n\n\n"
    broken = "import os\ndef f(:\n"
    assert remove_top_level_imports(broken) == broken


# -- carried code --------------------------------------------------------------------------

STEP_CODE = "\n\nSCALE = 2.0\n\n\ndef _helper(x):\n    return x * SCALE\n\n\ndef ket(dim):\n    return _helper(dim)\n"


def test_carry_full_is_the_whole_code_verbatim() -> None:
    assert carried_code(STEP_CODE, "def ket(dim):", "full") == STEP_CODE
    assert carried_code("def ket(:", "def ket(dim):", "full") == "def ket(:"


@pytest.mark.parametrize(
    "code, header, expected",
    [
        (STEP_CODE, "def ket(dim):", "def ket(dim):\n    return _helper(dim)"),
        (
            "class A:\n    def __init__(self):\n        self.x = 1\n    def f(self):\n        return 2\n",
            "class A:\n    def __init__(self):",
            "class A:\n\n    def __init__(self):\n        self.x = 1\n\n    def f(self):\n        return 2",
        ),
        ("def other():\n    pass\n", "def ket(dim):", "def other():\n    pass\n"),  # no such definition: whole code
    ],
)
def test_carry_definition_is_the_named_definition_unparsed(code: str, header: str, expected: str) -> None:
    assert carried_code(code, header, "definition") == expected


# -- hostile answers (the doit process parses model code: every function here is total) ------------------------


@pytest.mark.parametrize(
    "payload", [DEEP_UNARY, DEEPER_UNARY, "def f():\x00\n    pass\n", "def f():\n    return '\ud800'\n"]
)
def test_code_the_parser_cannot_take_is_never_an_exception(payload: str) -> None:
    # `-` x 5000: RecursionError in ast.parse; x 100,000: MemoryError; a null byte; a lone surrogate
    assert answer_to_code(payload, "f") is None  # unfenced: it does not parse, so it is not code
    fenced = f"```python\n{payload}\n```"
    assert answer_to_code(fenced, "f") == f"\n{payload}\n"  # fenced: taken as written, it fails when tested
    assert remove_top_level_imports(payload) == payload
    assert carried_code(payload, "def f():\n    '''doc'''", "definition") == payload


def test_a_definition_too_deep_for_ast_unparse_is_carried_as_its_source() -> None:
    code = "import os\n" + TOO_DEEP_TO_UNPARSE
    assert carried_code(code, "def f():\n    '''doc'''", "definition") == TOO_DEEP_TO_UNPARSE.rstrip("\n")


def test_a_lone_closing_fence_is_no_code() -> None:
    # issue 21: code, then a lone ``` opens an empty block: no code (parse_error), never "" with status ok
    answer = "def f(x):\n    return x\n```\n"
    assert extract_fenced_code(answer) == "\n"
    assert answer_to_code(answer, "f") is None
    assert "empty" in no_code_reason(answer)


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ("```python\n```", "empty"),
        ("```python\n   \n\t\n```", "empty"),
        ("```python\nimport numpy as np\nfrom scipy import (\n    linalg,\n)\n```", "top-level imports"),
        ("I would use numpy.", "no fenced code block"),
        ("```python\n" + "x = 1\n" * (MAX_CODE_CHARS // 6 + 1) + "```", "more than"),
    ],
)
def test_blank_import_only_or_oversized_extractions_are_no_code(answer: str, why: str) -> None:
    assert answer_to_code(answer, "f") is None
    assert why in no_code_reason(answer)


@given(hostile_text(), st.sampled_from(["f", "F", None]))
def test_extraction_is_total(answer: str, defines: str | None) -> None:
    code = answer_to_code(answer, defines)
    assert code is None or is_code(code)
    assert isinstance(no_code_reason(answer), str)
    assert extract_fenced_code(answer) is None or isinstance(extract_fenced_code(answer), str)


@given(hostile_text(), st.sampled_from(["def f(x):\n    '''doc'''", "class F:\n    '''doc'''", "no header"]))
def test_import_removal_and_carried_code_are_total(code: str, header: str) -> None:
    assert isinstance(remove_top_level_imports(code), str)
    for carry in CARRY_MODES:
        assert isinstance(carried_code(code, header, carry), str)
    assert isinstance(is_unfenced_code(code, "f"), bool)
