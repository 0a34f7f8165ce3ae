"""report.html shows what a failed check compared, and old generations stay current: a real `doit run` of a
replay model on problem 19 in naive mode, checked in headless Chromium.

The replay answers 19.1 with a wrong Kronecker product (`2 * kron(...) + 0.5`) and 19.2 with the reference
code, which fails through 19.1's wrong `tensor`. By hand: 19.1's test 1 compares `tensor([0, 1], [0, 1])` =
[0.5, 0.5, 0.5, 2.5] with the target [0, 0, 0, 1]: differences 0.5, 0.5, 0.5, 1.5, so the largest absolute
difference is 1.5 and the largest relative one (over the non-zero target element) 1.5 / 1 = 1.5. The
details file describes the model-side value only; the target appears in report.html alone.

Then the generation is made as it was written before turns were recorded (the `turns_recorded` marker
removed): a rerun asks the model nothing (the file is current and unchanged), and the step view says "turns
not recorded".
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.browser import browser, open_page, wait_for_step  # noqa: F401 - the browser fixture
from tests.support.pipeline_support import DEAD_URL, load_json, reference_answer, run_doit, steps_of
from tests.support.run_files import report_file

pytestmark = pytest.mark.slow

WRONG_TENSOR = (
    "Here is the implementation.\n\n```python\ndef tensor(*args):\n    M = 1\n    for a in args:\n"
    "        M = np.kron(M, a)\n    return 2 * M + 0.5\n```\n"
)


def _args(workdir: Path) -> tuple[str, ...]:
    return (
        f"data_dir={workdir / 'data'}",
        f"dataset_zip_url={DEAD_URL}",
        f"h5py_file={workdir / 'test_data_dev.h5'}",
        "model=replay:answers.json",
        "split=validation",
        "sample_ids=19",
        "mode=naive",
    )


@pytest.fixture(scope="module")
def replay_run(tmp_path_factory: pytest.TempPathFactory, shared_scicode: Path) -> dict[str, Path]:
    from tests.conftest import STAGED_FILES

    workdir = tmp_path_factory.mktemp("conversation")
    (workdir / "data" / "scicode").mkdir(parents=True)
    for name in STAGED_FILES:
        shutil.copyfile(shared_scicode / name, workdir / "data" / "scicode" / name)
    shutil.copyfile(shared_scicode / "test_data_dev.h5", workdir / "test_data_dev.h5")
    steps = steps_of(workdir / "data", ("19",), "validation")
    answers = {"19.1": WRONG_TENSOR, "19.2": reference_answer(steps["19.2"])}
    (workdir / "answers.json").write_text(json.dumps(answers), encoding="utf-8")
    result = run_doit(workdir, *_args(workdir), timeout=600)
    run = workdir / "results" / "scicode" / "replay_answers.json" / "validation-naive-bg"
    if not run.is_dir():
        run = next(path.parent for path in (workdir / "results").rglob("selection.json"))
    assert report_file(run).is_file(), result.stdout + result.stderr
    return {"workdir": workdir, "run": run, "screenshots": workdir}


def test_the_details_hold_the_model_side_only(replay_run) -> None:
    details = load_json(replay_run["run"] / "details" / "19.json")
    steps = {step["step_id"]: step for step in details["attempts"][0]["meta"]["evaluation"]["steps"]}
    assert steps["19.1"]["status"] == "fail" and "test 1 failed" in steps["19.1"]["reason"]
    compared = steps["19.1"]["compared"]
    assert set(compared) == {"test", "statement", "uses_target", "values"}
    [value] = compared["values"]
    assert set(value) == {"name", "description", "target"} and value["target"] == []
    assert value["description"]["elements"] == [0.5, 0.5, 0.5, 2.5]
    assert value["description"]["shape"] == [4] and value["description"]["dtype"] == "float64"


def test_a_failed_assertion_shows_both_sides_and_the_differences(browser, replay_run) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    open_page(browser, report_file(replay_run["run"]), "s-19.1-a0")
    wait_for_step(browser, "s-19.1-a0")
    block = browser.find_element(By.CSS_SELECTOR, "#step-view details.compared")
    assert "What test 1 compared" in block.text
    assert "np.allclose" in block.find_element(By.CSS_SELECTOR, "pre.compared-statement").text
    assert block.find_element(By.CSS_SELECTOR, "td.model-elements").text == "[0.5, 0.5, 0.5, 2.5] (first 4 of 4)"
    assert block.find_element(By.CSS_SELECTOR, "td.target-elements").text == "[0, 0, 0, 1] (first 4 of 4)"
    assert "(4,)" in block.text and "float64" in block.text
    assert block.find_element(By.CSS_SELECTOR, "p.compared-differences").text == (
        "largest absolute difference 1.5, largest relative difference 1.5 (over all 4 elements)"
    )
    browser.save_screenshot(str(replay_run["screenshots"] / "report-compared.png"))
    open_page(browser, report_file(replay_run["run"]), "s-19.2-a0")
    wait_for_step(browser, "s-19.2-a0")
    scalar = browser.find_element(By.CSS_SELECTOR, "#step-view details.compared")
    assert "value 1 (model)" in scalar.text and scalar.find_element(By.CSS_SELECTOR, "p.compared-differences")


def test_a_generation_written_before_turns_were_recorded_stays_current(browser, replay_run) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    run, workdir = replay_run["run"], replay_run["workdir"]
    open_page(browser, report_file(run), "s-19.1-a0")
    wait_for_step(browser, "s-19.1-a0")
    turns = browser.find_elements(By.CSS_SELECTOR, "#step-view details.conversation div.turn")
    assert [turn.get_attribute("class").split()[1] for turn in turns] == ["turn-user", "turn-assistant"]
    generation = run / "generations" / "19.json"
    record = load_json(generation)
    for step in record["steps"]:
        step["trajectory"].pop("turns_recorded", None)
    generation.write_text(json.dumps(record), encoding="utf-8")
    before = generation.read_bytes()
    result = run_doit(workdir, *_args(workdir), timeout=600)
    assert generation.read_bytes() == before, result.stdout + result.stderr  # not generated again
    explained = run_doit(workdir, "explain", "generate:19", *_args(workdir), timeout=120)
    assert "generate:19 is up to date" in explained.stdout, explained.stdout + explained.stderr
    browser.get("about:blank")  # the same address again would not reload the page
    open_page(browser, report_file(run), "s-19.1-a0")
    wait_for_step(browser, "s-19.1-a0")
    note = browser.find_element(By.CSS_SELECTOR, "#step-view .turns-note").text
    assert note.startswith("turns not recorded")
    assert browser.find_elements(By.CSS_SELECTOR, "#step-view details.conversation") == []
    browser.find_element(By.CSS_SELECTOR, "#step-view details.prompt summary").click()
    assert "tensor" in browser.find_element(By.CSS_SELECTOR, "#step-view pre.prompt-text").text
