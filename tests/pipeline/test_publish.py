"""Results a researcher can publish, end to end: two real `doit run`s of the committed replay fixtures on five
validation problems, their summaries with error bars, the paired comparison, the run index (in Chromium) and
the exports, each checked against counts and intervals computed by hand.

The fixtures (`tests/fixtures/replay_a.json`, `replay_b.json`) hold answers written for this test (textbook
implementations, a wrong `return None`, an endless loop, and prose without code: a parse_error) for every scored
step of problems 19, 29, 38, 47 and 78. With `step_timeout_seconds=5`:

    step   19.1 19.2  29.1 29.2 29.3  38.1 38.2 38.3  47.1 47.2 47.3    47.4  78.1 78.2 78.3
    A      pass parse pass pass pass  pass pass pass  pass fail timeout parse pass fail parse
    B      pass pass  (the rest as A)

A: pass 9, fail 2, timeout 1, parse_error 3; resolved 29 and 38 (2/5). B: pass 10, fail 2, timeout 1,
parse_error 2; resolved 19, 29 and 38 (3/5).
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.support.browser import browser, open_page  # noqa: F401 - the browser fixture
from tests.support.pipeline_support import DEAD_URL, assert_ok, load_json, run_doit
from tests.support.run_files import summary_file

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PROBLEMS = "19,29,38,47,78"
EXPECTED_COUNTS = {
    "a": {
        "pass": 9,
        "fail": 2,
        "timeout": 1,
        "parse_error": 3,
        "eval_error": 0,
        "skipped": 0,
        "not_generated": 0,
        "no_verdict": 0,
    },
    "b": {
        "pass": 10,
        "fail": 2,
        "timeout": 1,
        "parse_error": 2,
        "eval_error": 0,
        "skipped": 0,
        "not_generated": 0,
        "no_verdict": 0,
    },
}
PRICES = {"a": ("2.5", "10"), "b": ("0.5", "2")}


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory, shared_scicode: Path) -> dict[str, Path]:
    from tests.conftest import STAGED_FILES

    workdir = tmp_path_factory.mktemp("publish")
    (workdir / "data" / "scicode").mkdir(parents=True)
    for name in STAGED_FILES:
        shutil.copyfile(shared_scicode / name, workdir / "data" / "scicode" / name)
    shutil.copyfile(shared_scicode / "test_data_dev.h5", workdir / "test_data_dev.h5")
    found: dict[str, Path] = {}
    for name in ("a", "b"):
        shutil.copyfile(FIXTURES / f"replay_{name}.json", workdir / f"replay_{name}.json")
        price_in, price_out = PRICES[name]
        result = run_doit(
            workdir,
            f"data_dir={workdir / 'data'}",
            f"dataset_zip_url={DEAD_URL}",
            f"h5py_file={workdir / 'test_data_dev.h5'}",
            f"model=replay:replay_{name}.json",
            "split=validation",
            f"sample_ids={PROBLEMS}",
            "mode=naive",
            "step_timeout_seconds=5",
            f"run=replay-{name}",
            f"price_input_per_mtok={price_in}",
            f"price_output_per_mtok={price_out}",
            timeout=600,
        )
        assert_ok(result)
        found[name] = workdir / "results" / "scicode" / f"replay_replay_{name}.json" / f"replay-{name}"
    compared = run_doit(workdir, "compare", f"runs={found['a']},{found['b']}", timeout=120)
    assert_ok(compared)
    found["compare_md"] = next((workdir / "results" / "scicode" / "compare").glob("*.md"))
    indexed = run_doit(workdir, "runs", timeout=120)
    assert_ok(indexed)
    found["index"] = workdir / "results" / "scicode" / "runs.html"
    exported = run_doit(workdir, "export", f"runs={found['a']}", timeout=120)
    assert_ok(exported)
    found["workdir"] = workdir
    return found


def headline_lines(markdown: str) -> list[str]:
    """The two headline rows of summary.md's Scores table, their cells without the padding."""
    scores = markdown.split("## Scores", 1)[1].split("Raw counts:", 1)[0]
    rows = [line for line in scores.splitlines() if line.startswith(("| main_problem_resolve_rate", "| subproblem "))]
    return [" | ".join(cell.strip() for cell in row.strip("|").split("|")) for row in rows]


def test_replay_fixtures_give_the_known_counts(published) -> None:
    for name in ("a", "b"):
        summary = load_json(summary_file(published[name], "json"))
        assert summary["status_counts"] == EXPECTED_COUNTS[name]


def test_summary_lines_hold_both_rates_with_their_intervals(published) -> None:
    a = headline_lines(summary_file(published["a"], "md").read_text(encoding="utf-8"))
    # A: 2 of 5 resolved, Wilson [0.117621, 0.769277].
    # Steps (passed/scored) 19: 1/2, 29: 3/3, 38: 3/3, 47: 1/4, 78: 1/3; N = 15, p = 9/15 = 0.6;
    # passed - p * steps: -0.2, 1.2, 1.2, -1.4, -0.8; squares 0.04 + 1.44 + 1.44 + 1.96 + 0.64 = 5.52;
    # SE = sqrt(5.52) / 15 = 0.156631; V_cl = 5.52 / 225 = 0.024533, V_bin = 0.24 / 15 = 0.016: deff = 1.533333
    # (below 47 / 15), n_eff = 9.782609; Wilson of 0.6 on it: [0.310144, 0.833463]
    assert a == [
        "main_problem_resolve_rate | 2/5 (40.0%) | 11.8% to 76.9% (Wilson)",
        "subproblem | 9/15 (60.0%) | 31.0% to 83.3% (clustered Wilson, effective n 9.8 of 15 steps)",
    ]
    b = headline_lines(summary_file(published["b"], "md").read_text(encoding="utf-8"))
    # B: 3 of 5: centre = (3 + 1.920729) / 8.841459 = 0.556551, half = 0.221679 * sqrt(1.2 + 0.960365) = 0.325828
    # -> [0.230723, 0.882379]. Steps 10/15, p = 2/3: 0.666667, 1, 1, -1.666667, -1; squares sum 6.222222;
    # V_cl = 0.027654, V_bin = (2/9) / 15 = 0.014815: deff = 1.866667, n_eff = 8.035714 -> [0.339303, 0.886220]
    assert b == [
        "main_problem_resolve_rate | 3/5 (60.0%) | 23.1% to 88.2% (Wilson)",
        "subproblem | 10/15 (66.7%) | 33.9% to 88.6% (clustered Wilson, effective n 8.0 of 15 steps)",
    ]
    record = load_json(summary_file(published["a"], "json"))
    assert record["intervals"]["subproblem"]["se"] == pytest.approx(0.156631, abs=1e-6)
    # cost: the built-in replay reports tokens of about 4 characters each; $2.50 in / $10.00 out per million
    usage = record["usage"]
    assert record["cost"]["total"] == pytest.approx(
        (usage["input_tokens"] * 2.5 + usage["output_tokens"] * 10.0) / 1e6, rel=1e-9
    )


def test_compare_states_mcnemar_counts_and_p(published) -> None:
    text = published["compare_md"].read_text(encoding="utf-8")
    # Resolved: A only none, B only 19: n = 1, p = min(1, 2 * C(1, 0) / 2) = 1.
    # Steps: differences 19: +1, others 0; D = 1/15 = 0.066667; residuals 1 - 2 D = 0.866667, -3 D = -0.2 (29),
    # -0.2 (38), -4 D = -0.266667 (47), -0.2 (78); squares sum 0.942222; SE = 0.970681 / 15 = 0.064712;
    # z = 1.030203, p = 2 (1 - Phi(z)) = 0.302911.
    # Interval: A [0.310144, 0.833463] at 0.6, B [0.339303, 0.886220] at 2/3 (above). sum a b = 5.4, so
    # r = 5.4 / sqrt(5.52 * 6.222222) = 0.921407, less Newcombe's 1 / (2 m sqrt(0.24 * 2/9)) with
    # m = sqrt(9.782609 * 8.035714) = 8.866242: 0.244192, phi = 0.677215.
    # low = D - sqrt(0.327364^2 - 2 phi 0.327364 * 0.233463 + 0.233463^2) = 0.066667 - 0.241157 = -0.174490
    # high = D + sqrt(0.219553^2 - 2 phi 0.219553 * 0.289856 + 0.289856^2) = 0.066667 + 0.214536 = 0.281203
    assert text.splitlines()[0] == (
        "Paired tests on the 5 problems both runs scored (attempt 1): resolved problems, A only 0 vs B only 1, "
        "exact McNemar p = 1: not distinguishable from noise; step pass rate B - A +6.7 pp (95% CI -17.4 pp to "
        "+28.1 pp, Newcombe hybrid score, clustered by problem), p = 0.303: not distinguishable from noise."
    )
    assert "| resolved by A only / by B only (discordant) | 0 / 1 |" in text


def test_index_page_lists_both_runs(browser, published) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    open_page(browser, published["index"])
    rows = browser.find_elements(By.CSS_SELECTOR, "#runs tr.run")
    assert sorted(row.find_element(By.CSS_SELECTOR, "td").text for row in rows) == [
        "replay:replay_a.json",
        "replay:replay_b.json",
    ]
    texts = {row.find_element(By.CSS_SELECTOR, "td").text: row.text for row in rows}
    assert "2/5 (40.0%)" in texts["replay:replay_a.json"] and "11.8% to 76.9%" in texts["replay:replay_a.json"]
    assert "3/5 (60.0%)" in texts["replay:replay_b.json"] and "23.1% to 88.2%" in texts["replay:replay_b.json"]
    plot = browser.find_element(By.ID, "plot-validation-with-background")
    assert len(plot.find_elements(By.CSS_SELECTOR, "g.point")) == 2
    # B resolves more for less (cheaper prices): it alone is on the Pareto front
    front = plot.find_elements(By.CSS_SELECTOR, "g.point.on-front")
    assert [point.get_attribute("data-row") for point in front] == ["run-replay_replay_b.json--replay-b"]


def test_report_and_compare_pages_show_the_intervals_and_tests(browser, published) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    from tests.support.run_files import report_file

    open_page(browser, report_file(published["a"]))
    assert browser.find_element(By.ID, "resolve-interval").text == "11.8% to 76.9% (Wilson)"
    assert browser.find_element(By.ID, "subproblem-interval").text.startswith("31.0% to 83.3% (clustered Wilson")
    assert browser.find_element(By.ID, "run-cost").text.startswith("$")
    assert browser.find_element(By.ID, "confinement").text
    browser.find_element(By.CSS_SELECTOR, "#run-settings summary").click()
    assert "price_input_per_mtok" in browser.find_element(By.ID, "settings-table").text
    open_page(browser, published["compare_md"].with_suffix(".html"))
    verdict = browser.find_element(By.ID, "paired-verdict").text
    assert verdict == published["compare_md"].read_text(encoding="utf-8").splitlines()[0]
    assert "A only 0 vs B only 1, exact McNemar p = 1" in verdict


def test_export_of_run_a_is_read_by_inspect_ai(published) -> None:
    from inspect_ai.log import read_eval_log

    logs = list((published["a"] / "export" / "inspect").glob("*_scicode_*.json"))
    assert len(logs) == 1
    log = read_eval_log(str(logs[0]))
    assert log.samples is not None
    statuses = []
    for sample in log.samples:
        assert sample.scores is not None
        steps = sample.scores["steps"].value
        assert isinstance(steps, Mapping), steps
        statuses += list(steps.values())
    assert {status: statuses.count(status) for status in set(statuses)} == {
        "pass": 9,
        "fail": 2,
        "timeout": 1,
        "parse_error": 3,
    }
    rows = (published["a"] / "export" / "steps.csv").read_text(encoding="utf-8").splitlines()
    assert len(rows) == 1 + 15
