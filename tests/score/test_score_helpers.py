"""Our `scicode.parse.parse` / `scicode.compare.cmp` (official semantics), the simps shim, the rewrite
of every official test case, and test-script assembly."""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import h5py
import numpy as np
import pytest
import scipy.sparse
import sympy

from stages.score.checker.rewrite import CAPTURE_FUNCTION, RewriteError, checker_scope, rewrite_test
from stages.score.parent.script import build_step_script
from tests.score.score_helpers import problem, shared_data_paths

RUNTIME = Path(__file__).resolve().parents[2] / "stages" / "score" / "shared" / "runtime"


def _load(relative: str, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, RUNTIME / relative)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


parse = _load("scicode/parse/parse.py", "_test_scicode_parse")
cmp = _load("scicode/compare/cmp.py", "_test_scicode_cmp")


@pytest.fixture
def targets_file(tmp_path: Path) -> Path:
    path = tmp_path / "t.h5"
    with h5py.File(path, "w") as handle:
        handle.create_dataset("1.1/test1/var1", data=np.arange(3.0))
        handle.create_dataset("1.1/test2/var1", data=2.5)
        handle.create_dataset("1.1/test2/var2", data="text")
        handle.create_dataset("1.1/test2/var10", data=7)
        lst = handle.create_group("1.1/test3/var1/list")
        lst.create_dataset("var1", data=np.arange(2))
        lst.create_dataset("var2", data=np.arange(3))
        d = handle.create_group("1.1/test4/var1")
        d.create_dataset("0.5", data=1.0)
        d.create_dataset("name", data=2.0)
        d.create_dataset("label", data="hello")
        coo = scipy.sparse.coo_matrix(np.eye(3))
        sm = d.create_group("matrix").create_group("sparse_matrix")
        sm.create_dataset("data", data=coo.data)
        sm.create_dataset("shape", data=coo.shape)
        sm.create_dataset("row", data=coo.row)
        sm.create_dataset("col", data=coo.col)
        csr = scipy.sparse.csr_matrix(np.array([[0, 2.0], [3.0, 0]]))
        top = handle.create_group("1.1/test5/var1/sparse_matrix")
        top.create_dataset("data", data=csr.data)
        top.create_dataset("shape", data=csr.shape)
        top.create_dataset("indices", data=csr.indices)
        top.create_dataset("indptr", data=csr.indptr)
    return path


def test_process_hdf5_to_tuple_official_layout(targets_file: Path) -> None:
    first, second, third, fourth, fifth = parse.process_hdf5_to_tuple("1.1", 5, str(targets_file))
    assert isinstance(first, np.ndarray) and np.allclose(first, [0, 1, 2])
    assert isinstance(second, tuple) and len(second) == 3
    assert isinstance(second[0], np.floating) and second[0] == 2.5
    assert second[1:] == (7, "text")  # h5py name order: var1, var10, var2; bytes decoded
    assert [list(x) for x in third] == [[0, 1], [0, 1, 2]]
    assert set(fourth) == {0.5, "name", "label", "matrix"} and fourth["label"] == "hello"
    assert isinstance(fourth["matrix"], scipy.sparse.coo_matrix) and np.allclose(fourth["matrix"].toarray(), np.eye(3))
    assert isinstance(fifth, scipy.sparse.csr_matrix) and np.allclose(fifth.toarray(), [[0, 2], [3, 0]])


def test_missing_group_raises(targets_file: Path) -> None:
    with pytest.raises(FileNotFoundError, match="1.2/test1"):
        parse.process_hdf5_to_tuple("1.2", 1, str(targets_file))


def test_compare_helpers_semantics() -> None:
    x = sympy.Symbol("x")
    assert cmp.cmp_tuple_or_list([1.0, np.arange(3), True], [1.0 + 1e-9, np.arange(3), True])
    assert not cmp.cmp_tuple_or_list([1.0], [1.0, 2.0])
    assert not cmp.cmp_tuple_or_list([True], [False])
    with pytest.raises(TypeError):  # as the official helper: only ValueError falls back to ==
        cmp.cmp_tuple_or_list(["ab"], ["ab"])
    assert cmp.cmp_tuple_or_list([[[1, 2], [3]]], [[[1, 2], [3]]])  # ragged: allclose ValueError -> ==
    assert not cmp.cmp_tuple_or_list([[[1, 2], [3]]], [[[1, 2], [4]]])
    assert cmp.are_dicts_close({x: 1.0, "k": "v"}, {"x": 1.0 + 1e-12, "k": "v"})
    assert not cmp.are_dicts_close({"a": 1.0}, {"b": 1.0})
    sparse = scipy.sparse.csr_matrix(np.eye(2))
    assert cmp.are_csc_matrix_close(sparse, scipy.sparse.csr_matrix(np.eye(2)))
    assert cmp.cmp_tuple_or_list(
        [sparse, {"m": scipy.sparse.coo_matrix(np.eye(2))}], [sparse, {"m": scipy.sparse.coo_matrix(np.eye(2))}]
    )


def test_simps_shim_has_the_old_signature() -> None:
    code = (
        f"import sys; sys.path.insert(0, {str(RUNTIME)!r}); import _scicode_compat, numpy as np\n"
        "print(_scicode_compat.install())\n"
        "from scipy.integrate import simps, simpson\n"
        "x = np.linspace(0, 1, 11); y = x ** 2\n"
        "assert abs(simps(y, x) - 1 / 3) < 1e-12 and simps(y, x) == simpson(y, x=x)\n"
        "x = np.linspace(0, 1, 10); y = x ** 3\n"
        "vals = [simps(y, x, even=e) for e in ('first', 'last', 'avg')]\n"
        "assert all(abs(v - 0.25) < 1e-3 for v in vals) and abs(vals[2] - (vals[0] + vals[1]) / 2) < 1e-15\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout


def _all_test_cases(shared_scicode: Path) -> list[tuple[str, int, str, str]]:
    cases: list[tuple[str, int, str, str]] = []
    for name in ("problems_dev.jsonl", "problems_test.jsonl"):
        for line in (shared_scicode / name).read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            for step in record["sub_steps"]:
                cases.extend(
                    (step["step_number"], i, t, record["required_dependencies"])
                    for i, t in enumerate(step["test_cases"])
                )
    return cases


def constant_value(node: ast.expr) -> object:
    """The value of a constant expression (the temp name a capture call is given)."""
    assert isinstance(node, ast.Constant), ast.dump(node)
    return node.value


def test_every_official_test_case_splits_and_every_assertion_is_checked(shared_scicode: Path) -> None:
    cases = _all_test_cases(shared_scicode)
    rewritten = [(step, rewrite_test(source, index, checker_scope(deps))) for step, index, source, deps in cases]
    assert len(rewritten) == 1082
    assert sum(item.reads_target for _, item in rewritten) == 1074
    assert len({step for step, _ in rewritten}) == 338  # every scored step (prefilled steps have no test cases)
    for step, item in rewritten:
        prefetch = ast.parse(item.prefetch)
        assert not any(isinstance(node, ast.Assert) for node in ast.walk(prefetch)), (step, item.index)
        assert "target" not in {node.id for node in ast.walk(prefetch) if isinstance(node, ast.Name)}
        assert item.check is not None, (step, item.index)  # every official cell asserts something
        check = ast.parse(item.check)
        assert any(isinstance(node, ast.Assert) for node in ast.walk(check))
        captured = {
            constant_value(node.args[0])
            for node in ast.walk(prefetch)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == CAPTURE_FUNCTION
        }
        assert captured == set(item.temps)
    inlined = {step for step, item in rewritten if "__scicode_test_case_" in item.prefetch}
    assert inlined == {"78.1", "78.2"}


def test_checked_statements_keep_comparisons_in_the_checker() -> None:
    item = rewrite_test(
        "x = f(1)\nassert np.allclose(g(x), target) and h(2) == target[0], 'msg'\n",
        0,
        checker_scope("import numpy as np"),
    )
    assert "f(1)" in item.prefetch and "g(x)" in item.prefetch and "h(2)" in item.prefetch
    assert "target" not in item.prefetch and "allclose" not in item.prefetch
    assert item.check == "assert np.allclose(__scicode_t0, target) and __scicode_t1 == target[0], 'msg'"
    assert item.temps == ("__scicode_t0", "__scicode_t1")


def test_assertions_without_target_and_attribute_values_are_checked() -> None:
    item = rewrite_test(
        "block = f()\nassert np.allclose(block.length, 3) and sorted(block.keys) == [1, 2]\n",
        0,
        checker_scope("import numpy as np"),
    )
    assert item.check == "assert np.allclose(__scicode_t0, 3) and sorted(__scicode_t1) == [1, 2]"
    assert "__scicode_capture('__scicode_t0', block.length)" in item.prefetch


def test_test_functions_comparing_targets_run_in_the_checker() -> None:
    source = "def same(a, b):\n    return len(a) == len(b)\nassert same(f(), target)\n"
    item = rewrite_test(source, 0, checker_scope(""))
    assert (
        item.check is not None
        and item.check.startswith("def same(a, b):")
        and "same(__scicode_t0, target)" in item.check
    )
    with pytest.raises(RewriteError, match="names the checker cannot have"):
        rewrite_test("def same(a, b):\n    return g(a) == b\nassert same(f(), target)\n", 0, checker_scope(""))


@pytest.mark.parametrize(
    "source",
    [
        "assert all(f(t) for t in target)\n",
        "assert np.allclose(f(target), 1)\n",
        "for t in target:\n    assert f(t)\n",
        "if f():\n    assert g()\n",
    ],
)
def test_cells_that_would_give_model_code_a_target_are_refused(source: str) -> None:
    with pytest.raises(RewriteError):
        rewrite_test(source, 0, checker_scope("import numpy as np"))


def test_script_assembly_uses_carried_code_and_full_current_code(shared_scicode: Path) -> None:
    prob = problem(shared_scicode, "19")
    earlier = "def tensor(*args):\n    return 1\n\ndef helper():\n    return 2\n\nTOP = 3\n"
    current = "def n_tangle(psi):\n    return 0\n\ndef extra():\n    return 4\n"
    codes = {"19.1": earlier, "19.2": current}
    whole = build_step_script(prob, 1, codes, shared_data_paths(shared_scicode), "full")
    assert whole.sections[0].code == earlier
    script = build_step_script(prob, 1, codes, shared_data_paths(shared_scicode), "definition")
    assert script.sections[0].code.startswith("def tensor") and "helper" not in script.sections[0].code
    assert script.sections[1].code == whole.sections[1].code == current
    text = script.official_text("/x/t.h5")
    assert text.startswith(prob.required_dependencies)
    assert "targets = process_hdf5_to_tuple('19.2', 4, '/x/t.h5')" in text
    assert (
        text.index("target = targets[0]") < text.index(prob.steps[1].test_cases[0]) < text.index("target = targets[1]")
    )
