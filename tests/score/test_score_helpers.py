"""Our `scicode.parse.parse` / `scicode.compare.cmp` (official semantics), the simps shim, the rewrite
of every official test case, and test-script assembly."""
from __future__ import annotations

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

from score_helpers import problem, shared_data_paths
from stages.score.rewrite import RewriteError, rewrite_test
from stages.score.script import build_step_script

RUNTIME = Path(__file__).resolve().parents[2] / "stages" / "score" / "runtime"


def _load(relative: str, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, RUNTIME / relative)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
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
    assert cmp.cmp_tuple_or_list([sparse, {"m": scipy.sparse.coo_matrix(np.eye(2))}],
                                 [sparse, {"m": scipy.sparse.coo_matrix(np.eye(2))}])


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


def _all_test_cases(shared_scicode: Path) -> list[tuple[str, int, str]]:
    cases = []
    for name in ("problems_dev.jsonl", "problems_test.jsonl"):
        for line in (shared_scicode / name).read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            for step in record["sub_steps"]:
                cases.extend((step["step_number"], i, t) for i, t in enumerate(step["test_cases"]))
    return cases


def test_every_official_test_case_rewrites(shared_scicode: Path) -> None:
    cases = _all_test_cases(shared_scicode)
    rewritten = [rewrite_test(source, index) for _, index, source in cases]
    assert len(rewritten) == 1082
    assert sum(r.reads_target for r in rewritten) == 1074
    steps = {step_id for step_id, _, _ in cases}
    assert len(steps) == 338  # every scored step (prefilled steps have no test cases)
    for item in rewritten:
        if item.reads_target:
            compile(item.prefetch, "<prefetch>", "exec")
            residual = compile(item.residual, "<residual>", "exec")
            free = set(residual.co_names) - set(item.temps) - {"target"}
            assert all(not name.startswith("__scicode") for name in free)


def test_rewrite_hoists_model_calls_and_keeps_target_last() -> None:
    item = rewrite_test("x = f(1)\nassert np.allclose(g(x), target) and h(2) == target[0], 'msg'\n", 0)
    assert "f(1)" in item.prefetch and "g(x)" in item.prefetch and "h(2)" in item.prefetch
    assert "target" not in item.prefetch
    assert "g(" not in item.residual and "h(" not in item.residual and "np." not in item.residual
    with pytest.raises(RewriteError):
        rewrite_test("assert all(f(t) for t in target)\n", 0)


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
    assert text.index("target = targets[0]") < text.index(prob.steps[1].test_cases[0]) < text.index("target = targets[1]")
