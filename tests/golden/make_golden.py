"""Build the golden artifact files of tests/golden/ from a made-up problem, through the real pipeline.

    python tests/golden/make_golden.py     # rewrites tests/golden/current/ and tests/golden/before_parts/

Run it only when an artifact format changes on purpose, and commit its output with that change: the tests
of tests/records/test_golden.py read these files with the current code, so a format change that old files would
not survive shows up as a failing test instead of as a re-billed run. No official problem text is used: the
problem, its reference code, its tests and the prompt templates below are made up here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT_ROOT = HERE.parents[1]
DODO = PROJECT_ROOT / "dodo.py"
CURRENT = HERE / "current"
BEFORE_PARTS = HERE / "before_parts"  # the format before artifacts carried `fingerprint_parts`
PROBLEM_ID = "901"
MODEL = "gold"
RUN = "validation-naive-bg"
COMPARED = f"{MODEL}--{RUN}"  # the golden comparison is of the golden run with itself

STEP_1 = '''def doubled(x):
    """Twice x."""
    return 2 * x
'''
STEP_2 = '''def quadrupled(x):
    """Four times x, through doubled."""
    return doubled(doubled(x))
'''


def made_up_problem() -> dict[str, object]:
    """A two-step problem in the official record layout; every text in it is invented for these files."""

    def step(number: str, description: str, code: str, header: str, value: str, expected: str) -> dict:
        return {
            "step_number": number,
            "step_description_prompt": description,
            "step_background": f"Background of step {number}: multiplication by a constant.",
            "ground_truth_code": code,
            "function_header": header,
            "test_cases": [
                f"x = {value}\nassert np.allclose({header.split('(')[0][4:]}(x), target)",
                f"x = {expected}\nassert np.allclose({header.split('(')[0][4:]}(x), target)",
            ],
            "return_line": "    return " + code.rsplit("return ", 1)[1].strip(),
        }

    return {
        "problem_name": "made_up_scaling",
        "problem_id": PROBLEM_ID,
        "problem_description_main": "Scale a number by two, then by four (a made-up problem for golden files).",
        "problem_background_main": "",
        "problem_io": '"""\nInput: x (float)\nOutput: the scaled value (float)\n"""',
        "required_dependencies": "import numpy as np",
        "sub_steps": [
            step(f"{PROBLEM_ID}.1", "Write doubled(x).", STEP_1, 'def doubled(x):\n    """Twice x."""', "1.5", "3"),
            step(f"{PROBLEM_ID}.2", "Write quadrupled(x).", STEP_2, "def quadrupled(x):", "0.25", "-2"),
        ],
        "general_solution": STEP_1 + "\n" + STEP_2,
        "general_tests": [],
    }


TEMPLATES = {
    "multistep_template.txt": (
        "PROBLEM DESCRIPTION (made up):\n\nPREVIOUS STEPS DESCRIPTION:\n{problem_steps_str}\n\n"
        "NEXT STEP - PROBLEM STEP AND FUNCTION HEADER:\n{next_step_str}\n\nDEPENDENCIES:\n{dependencies}\n\n"
        "Answer with one Python code block.\n"
    ),
}


def staged_data(root: Path) -> Path:
    """A data_dir holding the made-up problem as both splits' problem files, and made-up templates."""
    folder = root / "data" / "scicode"
    folder.mkdir(parents=True)
    line = json.dumps(made_up_problem()) + "\n"
    (folder / "problems_dev.jsonl").write_text(line, encoding="utf-8")
    (folder / "problems_test.jsonl").write_text(line.replace(f'"{PROBLEM_ID}', '"902'), encoding="utf-8")
    for name, text in TEMPLATES.items():
        (folder / name).write_text(text, encoding="utf-8")
    background = TEMPLATES["multistep_template.txt"].replace("one Python code block", "background, then code")
    (folder / "background_comment_template.txt").write_text(background, encoding="utf-8")
    return root / "data"


def doit(workdir: Path, *args: str) -> None:
    command = [sys.executable, "-m", "doit", "-f", str(DODO), "-d", str(workdir), *args]
    environment = {name: value for name, value in os.environ.items() if name != "OPENAI_API_KEY"}
    result = subprocess.run(command, cwd=workdir, env=environment, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")


def without_parts(value: object) -> object:
    """`value` with every `fingerprint_parts` key removed, at any depth: the earlier format."""
    if isinstance(value, dict):
        return {key: without_parts(item) for key, item in value.items() if key != "fingerprint_parts"}
    if isinstance(value, list):
        return [without_parts(item) for item in value]
    return value


def golden_files(workdir: Path, data_dir: Path) -> dict[str, Path]:
    run = workdir / "results" / "scicode" / MODEL / RUN
    return {
        "manifest.json": data_dir / "scicode" / "manifest.json",
        "config.json": run / "config.json",
        "selection.json": run / "selection.json",
        "generation.json": run / "generations" / f"{PROBLEM_ID}.json",
        "details.json": run / "details" / f"{PROBLEM_ID}.json",
        "summary.json": run / "summary.json",
        "compare.json": workdir / "results" / "scicode" / "compare" / f"{COMPARED}__vs__{COMPARED}.json",
    }


def not_scored_record(workdir: Path) -> None:
    from stages.records.not_scored import record
    from stages.storage.paths import RunPaths

    record(RunPaths(workdir / "not_scored_run"), PROBLEM_ID, ValueError("made-up failure for the golden file"))


def main() -> None:
    sys.path.insert(0, str(PROJECT_ROOT))
    with tempfile.TemporaryDirectory(prefix="golden-") as temp:
        workdir = Path(temp)
        data_dir = staged_data(workdir)
        common = (
            f"data_dir={data_dir}",
            "dataset_zip_url=http://127.0.0.1:9/none.zip",
            f"model={MODEL}",
            "verify_checksums=false",
        )
        doit(workdir, *common, "split=validation", "mode=naive")
        doit(workdir, *common, "compare", f"runs={MODEL}/{RUN},{MODEL}/{RUN}")
        files = golden_files(workdir, data_dir)
        not_scored_record(workdir)
        files["not_scored.json"] = next((workdir / "not_scored_run").rglob("*.json"))
        for folder in (CURRENT, BEFORE_PARTS):
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
        for name, source in files.items():
            record = json.loads(source.read_text(encoding="utf-8"))
            text = json.dumps(record, indent=2, sort_keys=True) + "\n"
            (CURRENT / name).write_text(text.replace(temp, "<workdir>"), encoding="utf-8")
            old = json.dumps(without_parts(record), indent=2, sort_keys=True) + "\n"
            (BEFORE_PARTS / name).write_text(old.replace(temp, "<workdir>"), encoding="utf-8")


if __name__ == "__main__":
    main()
