"""Only values computed by model code cross to the checker: which statements of a cell the checker evaluates
itself, which values are captured from the test process, and the 1082 official cells."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from stages.score.checker.rewrite import CAPTURE_FUNCTION, RewrittenTest, checker_scope, rewrite_test, rewrite_tests

NUMPY = "import numpy as np"


def split(source: str, deps: str = NUMPY) -> RewrittenTest:
    return rewrite_test(source, 0, checker_scope(deps))


def captured(item: RewrittenTest) -> list[str]:
    """The captured expressions, as source, in capture order."""
    return [
        ast.unparse(node.args[1])
        for node in ast.walk(ast.parse(item.prefetch))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == CAPTURE_FUNCTION
    ]


def checker_statements(item: RewrittenTest) -> list[str]:
    assert item.check is not None
    return [ast.unparse(statement) for statement in ast.parse(item.check).body]


# -- what the checker evaluates itself ---------------------------------------------------------------


def test_inputs_and_expected_values_built_from_literals_are_the_checkers_own() -> None:
    item = split(
        "x0 = np.linspace(0, 1, 5)\nexpected = np.sin(x0)\nout = f(x0)\n"
        "assert np.allclose(out, expected)\nassert np.allclose(g(out), target)\n"
    )
    assert captured(item) == ["out", "g(out)"]
    assert checker_statements(item)[:2] == ["x0 = np.linspace(0, 1, 5)", "expected = np.sin(x0)"]
    assert item.evaluated == 2


def test_only_the_statements_a_comparison_needs_are_evaluated_by_the_checker() -> None:
    item = split("big = np.ones((4000, 4000))\ntol = 1e-6\nout = f(big)\nassert abs(out - 1) < tol\n")
    assert captured(item) == ["out"]
    assert checker_statements(item) == ["tol = 1e-06", "assert abs(__scicode_t0 - 1) < tol"]


def test_functions_of_the_cell_over_checker_values_run_in_the_checker() -> None:
    item = split(
        "def energy(u):\n    return np.sum(u ** 2)\nu = np.array([1.0, 2.0])\nE0 = energy(u)\nv = step(u)\n"
        "E1 = energy(v)\nassert np.isclose(E0, E1) == target\n"
    )
    assert captured(item) == ["E1"]
    assert "E0 = energy(u)" in checker_statements(item)


def test_a_function_of_the_cell_given_model_values_runs_in_the_test_process() -> None:
    item = split("def check(wf):\n    return wf.value(1)\nassert np.allclose(check(Model()), target)\n")
    assert captured(item) == ["check(Model())"]


def test_names_of_the_dependencies_are_the_checkers_even_when_model_code_rebinds_them() -> None:
    item = split("assert np.allclose(f(), pi / 2)\n", "import numpy as np\nfrom math import *")
    assert captured(item) == ["f()"]
    assert (
        item.check is not None and "pi" in item.check
    )  # the checker's own math.pi, whatever the test process's `pi` became


def test_statements_of_the_dependencies_the_checker_can_evaluate_are_part_of_its_scope() -> None:
    scope = checker_scope("import numpy as np\nTOL = 1e-8\nDATA = os.environ['X']\nrng = np.random.default_rng(1)")
    assert "TOL" in scope.names and "np" in scope.names
    assert "DATA" not in scope.names and "rng" not in scope.names  # the environment; a generator model code may use
    assert "TOL = 1e-08" in scope.program and "os.environ" not in scope.program
    item = rewrite_test("assert abs(f() - 1) < TOL\n", 0, scope)
    assert captured(item) == ["f()"]


def test_what_depends_on_the_process_stays_in_the_test_process() -> None:
    item = split("import time\nstamp = time.time()\nh = hash('a')\nassert f(stamp, h) == (stamp, h)\n")
    assert captured(item) == ["f(stamp, h)", "stamp", "h"]


# -- values the cell changes with model values -------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        "x[0] = f(1)",
        "x.append(f(1))",
        "x += f(1)",
        "np.copyto(x, f(1))",
        "np.add(x, f(1), out=x)",
        "y = x\ny.append(f(1))",  # through an alias
        "def fill(a):\n    a.append(f(1))\nfill(x)",  # through a function of the cell
        "for i in range(2):\n    x[i] = f(i)",
    ],
)
def test_a_value_the_cell_changes_with_a_model_value_is_captured(change: str) -> None:
    item = split(f"x = [0, 0]\n{change}\nassert x == target\n")
    assert captured(item) == ["x"]


@pytest.mark.parametrize(
    "call",
    ["f(x)", "f(x.copy())", "f(*x)", "out = f(x)\nout[0] = 1", "obj = Model()\nobj.run(x)", "g = f\ng(x)"],
)
def test_what_code_under_test_does_to_a_value_it_is_given_never_reaches_the_checker(call: str) -> None:
    item = split(f"x = np.zeros(2)\n{call}\nassert np.allclose(x, target)\n")
    assert captured(item) == []
    assert "x = np.zeros(2)" in checker_statements(item)


def test_a_cell_function_that_does_not_change_its_arguments_leaves_them_the_checkers() -> None:
    item = split("def run(a, n):\n    return f(a) * n\nn = 3\nx = np.ones(2)\nr = run(x, n)\nassert r == n * target\n")
    assert captured(item) == ["r"]
    assert "n = 3" in checker_statements(item)


# -- random draws -------------------------------------------------------------------------------------


def test_draws_after_the_cells_seed_and_before_a_model_call_are_the_checkers() -> None:
    item = split("np.random.seed(0)\nx = np.random.rand(3)\nout = f(x)\nassert np.allclose(out, x.sum())\n")
    assert captured(item) == ["out"]
    assert checker_statements(item)[:2] == ["np.random.seed(0)", "x = np.random.rand(3)"]
    assert not item.random_in_test_process


@pytest.mark.parametrize(
    "cell",
    [
        # after a call into model code, which may consume the same state
        "np.random.seed(0)\nw = f(1)\nx = np.random.rand(3)\nassert np.allclose(g(w), x)\n",
        # a state the cell did not seed (earlier model code used it)
        "x = np.random.rand(3)\nassert np.allclose(g(1), x)\n",
        "import random\nx = random.random()\nassert g(1) == x\n",
        # a generator seeded from entropy, or used after a model call
        "rng = np.random.default_rng()\nx = rng.normal()\nassert g(1) == x\n",
        "rng = np.random.default_rng(0)\nw = f(rng)\nx = rng.normal()\nassert g(w) == x\n",
        # seeded from entropy
        "np.random.seed()\nx = np.random.rand()\nassert g(1) == x\n",
    ],
)
def test_draws_the_checker_cannot_reproduce_stay_in_the_test_process(cell: str) -> None:
    item = split(cell)
    assert "x" in captured(item)
    assert item.random_in_test_process


def test_a_generator_the_cell_seeds_is_the_checkers_until_model_code_runs() -> None:
    item = split("rng = np.random.default_rng(7)\nx = rng.normal(size=3)\nout = f(x)\nassert np.allclose(out, x)\n")
    assert captured(item) == ["out"]


def test_a_draw_inside_a_checked_statement_is_made_by_the_test_process() -> None:
    item = split("np.random.seed(0)\nassert np.allclose(f(1), np.random.rand(3))\n")
    assert captured(item) == ["f(1)", "np.random.rand(3)"]


def test_a_function_of_the_cell_that_draws_is_called_in_the_test_process_after_model_code() -> None:
    source = (
        "np.random.seed(1)\ndef noise(n):\n    return np.random.normal(size=n)\na = noise(2)\nw = f(a)\n"
        "b = noise(2)\nassert np.allclose(g(w), a + b)\n"
    )
    assert captured(split(source)) == ["g(w)", "b"]


# -- the official cells -------------------------------------------------------------------------------


def official_cells(shared_scicode: Path) -> dict[str, RewrittenTest]:
    cells = {}
    for name in ("problems_dev.jsonl", "problems_test.jsonl"):
        for line in (shared_scicode / name).read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            for step in record["sub_steps"]:
                for item in rewrite_tests(step["test_cases"], record["required_dependencies"]):
                    cells[f"{step['step_number']}#{item.index + 1}"] = item
    return cells


def test_the_official_cells_capture_only_what_model_code_computed(shared_scicode: Path) -> None:
    cells = official_cells(shared_scicode)
    assert len(cells) == 1082
    assert sum(len(item.temps) for item in cells.values()) == 1276  # 1317 when every name was captured
    # 78.1: the expected value the cell builds from literals (a frame walk could overwrite it in place)
    assert captured(cells["78.1#1"]) == ["__scicode_test_case_1_output"]
    assert "__scicode_test_case_1_expected_output = np.array" in (cells["78.1#1"].check or "")
    # 6.1 test 4: the thresholds the cell passes to the code under test
    assert captured(cells["6.1#4"]) == ["MaskAreaDiff", "MaskAreaDiff"]
    assert "frequency_threshold1 = 50" in (cells["6.1#4"].check or "")
    # the draws that stay in the test process: unseeded (50.3) or after a model call (77.12)
    assert sorted(key for key, item in cells.items() if item.random_in_test_process) == [
        "50.3#1",
        "50.3#2",
        "50.3#3",
        "77.12#1",
    ]
