"""`environments=` through real doit runs: a replayed answer that uses `np.product` (removed in numpy 2) fails in
this interpreter and passes under OR with SciCode-Verified's 2024-era environment; adding the environment
re-scores without regenerating (generations and the run identity untouched), `doit explain` names the change,
and summary.md / summary.json / the export carry each environment's verdicts."""

from __future__ import annotations

import csv
import io
import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.score.test_environments import NUMPY1_INNER_PRODUCT
from tests.support.pipeline_support import data_args, run_doit

pytestmark = [pytest.mark.slow, pytest.mark.network]  # the 2024-era venv comes from the package index once
PROBLEM = "29"


def answer(code: str) -> str:
    return f"Here it is.\n\n```python\n{code}\n```\n"


@pytest.fixture
def common(tmp_path: Path, staged_data_dir: Path, shared_scicode: Path) -> tuple[str, ...]:
    from stages.benchmark.problems import problems_by_id
    from stages.storage.paths import DataPaths

    targets = tmp_path / "targets" / "test_data_dev.h5"
    targets.parent.mkdir()
    shutil.copyfile(shared_scicode / "test_data_dev.h5", targets)
    prob = problems_by_id(DataPaths(staged_data_dir))[PROBLEM]
    answers = {step.step_id: answer(step.ground_truth_code or "") for step in prob.steps}
    (tmp_path / "answers.json").write_text(json.dumps({**answers, "29.2": answer(NUMPY1_INNER_PRODUCT)}))
    return (
        *data_args(staged_data_dir, targets),
        "model=replay:answers.json",
        "mode=naive",
        "run=envs",
        f"sample_ids={PROBLEM}",
    )


def explained(workdir: Path, common: tuple[str, ...], *args: str) -> str:
    result = run_doit(workdir, "explain", f"generate:{PROBLEM}", f"score:{PROBLEM}", *common, *args)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_adding_the_2024_era_environment_rescores_without_regenerating(
    tmp_path: Path, common: tuple[str, ...], era2024_python: Path
) -> None:
    current = f"environments=current:{sys.executable}"
    both = f"environments=current:{sys.executable},2024-era:{era2024_python}"
    first = run_doit(tmp_path, *common, current)
    assert first.returncode == 0, first.stdout + first.stderr
    (folder,) = (tmp_path / "results" / "scicode").glob("*/envs")  # the replay model's run
    generation = (folder / "generations" / f"{PROBLEM}.json").read_bytes()
    identity = (folder / "identity.json").read_bytes()
    summary = json.loads((folder / f"summary-ids-{PROBLEM}.json").read_text())
    assert summary["subproblem_correct"] == 1 and summary["environments"]["environments"][0]["name"] == "current"

    why = explained(tmp_path, common, both, "all_environments=true")
    assert f"generate:{PROBLEM} is up to date" in why
    assert f"score:{PROBLEM} will run: settings changed (" in why and "environments" in why

    second = run_doit(tmp_path, *common, both, "all_environments=true")
    assert second.returncode == 0, second.stdout + second.stderr
    assert "environment ok: environment 2024-era" in second.stdout + second.stderr
    assert (folder / "generations" / f"{PROBLEM}.json").read_bytes() == generation  # never regenerated
    assert (folder / "identity.json").read_bytes() == identity
    summary = json.loads((folder / f"summary-ids-{PROBLEM}.json").read_text())
    assert summary["subproblem_correct"] == 3 and summary["main_problem_resolved"] == 1
    counts = {entry["name"]: entry for entry in summary["environments"]["environments"]}
    assert counts["2024-era"]["only"] == ["29.2", "29.3"] and counts["current"]["only"] == []
    assert (counts["current"]["passed"], counts["2024-era"]["passed"]) == (1, 3)
    text = (folder / f"summary-ids-{PROBLEM}.md").read_text()
    assert "- grading environments: current, 2024-era; a step passes when any passes (every environment ran)" in text
    assert "  - 2024-era: passed 3 of 3 graded steps; 2 passed only here: 29.2, 29.3" in text

    assert f"score:{PROBLEM} is up to date" in explained(tmp_path, common, both, "all_environments=true")
    exported = run_doit(tmp_path, "export", *common, both, "all_environments=true")
    assert exported.returncode == 0, exported.stdout + exported.stderr
    (steps_csv,) = folder.glob("export*/steps.csv")
    rows = {row["step"]: row for row in csv.DictReader(io.StringIO(steps_csv.read_text()))}
    assert rows["29.2"]["environments"] == "current=fail;2024-era=pass" and rows["29.2"]["status"] == "pass"
    (log,) = steps_csv.parent.glob("inspect/*_scicode_*.json")  # the inspect_ai log: each step's metadata
    (sample,) = json.loads(log.read_text())["samples"]
    entries = {entry["step_id"]: entry for entry in sample["metadata"]["steps"]}
    assert entries["29.2"]["environments"] == "current=fail;2024-era=pass"
