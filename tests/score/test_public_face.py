"""The public face of `stages.score` (its __init__): what the rest of `stages` may use of scoring, each name imported
from its module on first use, so that importing the package (every doit command does) stays cheap."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import stages.score

FACE = Path(stages.score.__file__)
PROJECT_ROOT = FACE.parents[2]


def type_checking_imports() -> dict[str, str]:
    """Each name the face imports for the type checker, with its module."""
    tree = ast.parse(FACE.read_text(encoding="utf-8"))
    blocks = [node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"]
    return {
        alias.name: node.module or ""
        for block in blocks
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def test_the_face_lists_each_name_once_where_the_type_checker_and_the_first_use_agree() -> None:
    assert sorted(stages.score.__all__) == sorted(stages.score.EXPORTED_FROM)
    assert type_checking_imports() == stages.score.EXPORTED_FROM


@pytest.mark.parametrize("name", sorted(stages.score.EXPORTED_FROM))
def test_each_public_name_is_the_object_its_module_defines(name: str) -> None:
    module = importlib.import_module(stages.score.EXPORTED_FROM[name])
    assert getattr(stages.score, name) is getattr(module, name)


def test_a_name_the_face_does_not_offer_is_one_line_naming_those_it_does() -> None:
    with pytest.raises(AttributeError) as raised:
        _ = stages.score.run_score
    message = str(raised.value)
    assert "\n" not in message and "'run_score'" in message and "expected_work" in message
    with pytest.raises(ImportError):
        exec("from stages.score import run_score", {})


def test_importing_the_face_imports_no_module_inside_it() -> None:
    probe = (
        "import sys, json; import stages.score; from stages.score import task; "
        "print(json.dumps(sorted(name for name in sys.modules if name.startswith(('stages.score.', 'numpy', 'h5py')))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=60, check=True
    )
    assert json.loads(done.stdout) == ["stages.score.task"]
