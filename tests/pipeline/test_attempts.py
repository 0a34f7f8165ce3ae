"""k attempts per problem through real `doit` runs: a scripted model whose answers differ by attempt,
every attempt generated, resumable and scored, and the attempt metrics of summary.json counted by hand.

The model is a `ModelServer` on 127.0.0.1 reached by the real `openai` client. Attempts of a problem
are generated in order, so the n-th time a step is asked is attempt n (the last plan is reused when a
step is asked more often, e.g. after a deleted generation file).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from stages.benchmark.problems import Step, load_problems
from stages.config.settings import load_settings
from stages.generate.server import ModelReply, ModelRequest, ModelServer
from stages.generate.stage import generation_path, generations_current
from stages.storage.paths import DataPaths
from tests.support.pipeline_support import PROBE_REPLY, is_preflight_probe
from tests.support.run_files import summary_file

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEAD_URL = "http://127.0.0.1:9/scicode.zip"  # nothing listens there: download uses the staged files
API_KEY = "sk-attempts-test-3b7e"
MODEL = "acme-sampler"
RUN = "validation-tool_use-bg"
PROBLEMS = ("1", "3", "19")  # steps 1.1, 3.1, 19.1, 19.2: quick to score
NEXT_STEP_MARKER = "NEXT STEP - PROBLEM STEP AND FUNCTION HEADER:"
DEPENDENCIES_MARKER = "\nDEPENDENCIES:"
NOTHING_TO_DO = "nothing to do: everything up to date"

# Which steps the model gets wrong in each attempt (everything else: the reference code).
WRONG_IN_ATTEMPT: tuple[frozenset[str], ...] = (
    frozenset(),  # attempt 1: resolves 1, 3, 19; steps 4/4
    frozenset({"3.1", "19.2"}),  # attempt 2: resolves 1;        steps 2/4 (1.1, 19.1)
    frozenset({"1.1", "3.1"}),  # attempt 3: resolves 19;       steps 2/4 (19.1, 19.2)
)


# Hand count. Problems resolved per attempt: 3, 1, 1 of 3; steps passed: 4, 2, 2 of 4.
# Correct attempts per problem (n = 3): problem 1: c = 2, problem 3: c = 1, problem 19: c = 2.
# pass@1 = mean(c / n) = (2/3 + 1/3 + 2/3) / 3 = 5/9
# pass@2 = mean(1 - C(n-c, 2) / C(3, 2)) = (1 + (1 - 1/3) + 1) / 3 = 8/9
# pass@3 = 1 (every problem resolved in some attempt)
EXPECTED_PER_ATTEMPT = [(3, 4), (1, 2), (1, 2)]
EXPECTED_PASS_AT = {"1": 5 / 9, "2": 8 / 9, "3": 1.0}
EXPECTED_MEAN_RESOLVE = (3 / 3 + 1 / 3 + 1 / 3) / 3  # 5/9
EXPECTED_MEAN_SUBPROBLEM = (4 / 4 + 2 / 4 + 2 / 4) / 3  # 2/3


def _fenced(code: str) -> str:
    return f"Here you go.\n\n```python\n{code.rstrip()}\n```\n"


def _body_indent(header: str) -> str:
    last = [line for line in header.rstrip().splitlines() if line.strip()][-1]
    return last[: len(last) - len(last.lstrip())] or "    "


def wrong_code(step: Step) -> str:
    return f"{step.function_header.rstrip()}\n{_body_indent(step.function_header)}return None\n"


class AttemptModel:
    """Answers a step from the plan of the attempt it is asked in (the how-many-th ask of that step)."""

    def __init__(self, steps: Mapping[str, Step]) -> None:
        self.steps = dict(steps)
        self.asked: Counter[str] = Counter()
        self._lock = threading.Lock()

    def step_of(self, request: ModelRequest) -> str:
        for message in reversed(request.messages):
            content = message.get("content") or ""
            if message.get("role") == "user" and NEXT_STEP_MARKER in content:
                block = content.split(NEXT_STEP_MARKER, 1)[1].split(DEPENDENCIES_MARKER, 1)[0].rstrip()
                found = [
                    sid
                    for sid, step in self.steps.items()
                    if block.endswith((step.function_header + "\n\n" + step.return_line).rstrip())
                ]
                assert len(found) == 1, found
                return found[0]
        raise AssertionError("no step prompt in the request")

    def __call__(self, request: ModelRequest) -> ModelReply:
        assert request.headers.get("authorization") == f"Bearer {API_KEY}"
        if is_preflight_probe(request):
            return PROBE_REPLY
        step_id = self.step_of(request)
        with self._lock:
            attempt = min(self.asked[step_id], len(WRONG_IN_ATTEMPT) - 1)
            self.asked[step_id] += 1
        step = self.steps[step_id]
        code = wrong_code(step) if step_id in WRONG_IN_ATTEMPT[attempt] else step.ground_truth_code
        assert code
        return ModelReply(text=_fenced(code), prompt_tokens=50, completion_tokens=20)

    def total(self) -> int:
        with self._lock:
            return sum(self.asked.values())


@pytest.fixture
def model(staged_data_dir: Path) -> Iterator[tuple[AttemptModel, ModelServer]]:
    steps = {
        step.step_id: step
        for problem in load_problems(DataPaths(staged_data_dir), "validation")
        if problem.problem_id in PROBLEMS
        for step in problem.steps
    }
    responder = AttemptModel(steps)
    with ModelServer(responder) as server:
        yield responder, server


@pytest.fixture
def dev_targets(tmp_path: Path, shared_scicode: Path) -> Path:
    path = tmp_path / "targets" / "test_data_dev.h5"
    path.parent.mkdir()
    shutil.copyfile(shared_scicode / "test_data_dev.h5", path)
    return path


def run_doit(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "doit", "-f", str(PROJECT_ROOT / "dodo.py"), "-d", str(workdir), *args]
    env = {**os.environ, "OPENAI_API_KEY": API_KEY}
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=workdir, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def load_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.slow
def test_three_attempts_generated_scored_and_summarized(
    tmp_path: Path, staged_data_dir: Path, dev_targets: Path, model: tuple[AttemptModel, ModelServer]
) -> None:
    responder, server = model
    args = (
        f"data_dir={staged_data_dir}",
        f"dataset_zip_url={DEAD_URL}",
        f"h5py_file={dev_targets}",
        f"model={MODEL}",
        f"base_url={server.base_url}",
        "split=validation",
        f"sample_ids={','.join(PROBLEMS)}",
        "attempts=3",
        "score_workers=2",
    )
    first = run_doit(tmp_path, *args)
    assert "generate   3/3 done" in first.stderr, first.stderr
    assert responder.asked == {"1.1": 3, "3.1": 3, "19.1": 3, "19.2": 3}
    run = tmp_path / "results" / "scicode" / MODEL / RUN

    # Every attempt has its generation file and its own entry in the details, scored like attempt 0.
    assert len(list((run / "generations").glob("*.json"))) == 9
    for problem_id in PROBLEMS:
        names = [f"{problem_id}.json", f"{problem_id}@1.json", f"{problem_id}@2.json"]
        assert [load_json(run / "generations" / name)["attempt"] for name in names] == [0, 1, 2]
    statuses = {}
    for problem_id in PROBLEMS:
        details = load_json(run / "details" / f"{problem_id}.json")
        assert len(details["attempts"]) == 3
        for attempt, record in enumerate(details["attempts"]):
            for step in record["meta"]["evaluation"]["steps"]:
                statuses[(attempt, step["step_id"])] = step["status"]
    expected = {
        (attempt, step_id): "fail" if step_id in WRONG_IN_ATTEMPT[attempt] else "pass"
        for attempt in range(3)
        for step_id in ("1.1", "3.1", "19.1", "19.2")
    }
    assert statuses == expected

    summary = load_json(summary_file(run, "json"))
    # The headline tables are attempt 1's (see stages/summarize/stage.py); the attempts section covers all three.
    assert summary["attempt_scored"] == 0
    assert (summary["main_problem_resolved"], summary["main_problem_total"]) == (3, 3)
    assert (summary["subproblem_correct"], summary["subproblem_total"]) == (4, 4)
    attempts = summary["attempts"]
    assert attempts["attempts"] == 3 and attempts["problems"] == 3 and attempts["strategy"] == "avg"
    assert [
        (row["main_problem_resolved"], row["subproblem_correct"]) for row in attempts["per_attempt"]
    ] == EXPECTED_PER_ATTEMPT
    assert all(row["main_problem_total"] == 3 and row["subproblem_total"] == 4 for row in attempts["per_attempt"])
    assert math.isclose(attempts["mean_main_problem_resolve_rate"], EXPECTED_MEAN_RESOLVE)
    assert math.isclose(attempts["mean_subproblem_rate"], EXPECTED_MEAN_SUBPROBLEM)
    assert attempts["pass_at_k"].keys() == EXPECTED_PASS_AT.keys()
    for k, value in EXPECTED_PASS_AT.items():
        assert math.isclose(attempts["pass_at_k"][k], value), (k, attempts["pass_at_k"][k])
    assert (attempts["any_attempt"]["main_problem_resolved"], attempts["any_attempt"]["subproblem_correct"]) == (3, 4)
    assert attempts["strategies"]["avg"] == {
        "main_problem_resolve_rate": attempts["mean_main_problem_resolve_rate"],
        "subproblem": attempts["mean_subproblem_rate"],
    }
    # Usage counts the model calls of every attempt (12 step answers, 50 + 20 tokens each).
    assert summary["usage"]["calls"] == 12 and summary["usage"]["total_tokens"] == 12 * 70
    markdown = summary_file(run, "md").read_text(encoding="utf-8")
    assert "pass@1 = 55.6% (" in markdown and "pass@2 = 88.9% (" in markdown
    # Intervals (clustered Wilson over draws of k attempts; resolved in 2, 1, 2 of the 3 attempts):
    # pass@1: 3 draws per problem, 2, 1, 2 resolving: N = 9, p = 5/9; sums 1/3, -2/3, 1/3: V_cl = (2/3) / 81 =
    #   0.008230 below V_bin = (20/81) / 9 = 0.027435, deff 1, n_eff 9: Wilson of 5 of 9 = [0.266651, 0.811221]
    # pass@3: 1 draw per problem, all resolving: Wilson of 3 of 3 = [3 / (3 + z^2), 1] = [0.438503, 1], where the
    #   bootstrap over problems said 100.0% to 100.0%
    assert "pass@1 = 55.6% (26.7% to 81.1%)" in markdown
    assert "pass@3 = 100.0% (43.9% to 100.0%)" in markdown  # every problem resolved by one of its 3 attempts
    intervals = attempts["pass_at_k_intervals"]
    assert intervals["3"] == {"low": pytest.approx(0.438503, abs=1e-6), "high": 1.0}
    assert intervals["1"] == {"low": pytest.approx(0.266651, abs=1e-6), "high": pytest.approx(0.811221, abs=1e-6)}
    assert intervals["2"]["low"] < attempts["pass_at_k"]["2"] < intervals["2"]["high"]
    assert attempts["interval_method"]["method"] == "clustered_wilson" and attempts["interval_method"]["level"] == 0.95
    assert "95% clustered Wilson intervals over problems" in markdown
    assert "| attempt 2" in markdown and "1/3 (33.3%)" in markdown

    # Up to date: all attempts current, no model call on a rerun.
    settings = load_settings(
        {
            "data_dir": str(staged_data_dir),
            "results_dir": str(tmp_path / "results"),
            "model": MODEL,
            "split": "validation",
            "attempts": "3",
        },
        cwd=tmp_path,
    )
    assert all(generations_current(settings, problem_id) for problem_id in PROBLEMS)
    assert NOTHING_TO_DO in run_doit(tmp_path, *args).stderr
    assert responder.total() == 12

    # One attempt's file lost: only that attempt of that problem is asked again; its verdicts come from the cache.
    generation_path(settings, "19", 2).unlink()
    assert not generations_current(settings, "19")
    again = run_doit(tmp_path, *args)
    assert "generate   1/3 done, 2 up-to-date" in again.stderr, again.stderr
    assert responder.total() == 14 and responder.asked["19.1"] == 4 and responder.asked["19.2"] == 4
    rescored = load_json(run / "details" / "19.json")["attempts"][2]["meta"]["evaluation"]["steps"]
    assert [(step["status"], step["cached"]) for step in rescored] == [("pass", True), ("pass", True)]
    assert load_json(summary_file(run, "json"))["attempts"]["pass_at_k"] == attempts["pass_at_k"]

    # attempt_strategy=pass names the any-attempt figures; the headline stays attempt 1's. No model call.
    passed = run_doit(tmp_path, *args, "attempt_strategy=pass")
    assert "generate   0/3 done, 3 up-to-date" in passed.stderr
    summary = load_json(summary_file(run, "json"))
    assert summary["attempts"]["strategy"] == "pass"
    assert (summary["main_problem_resolved"], summary["subproblem_correct"]) == (3, 4)
    assert summary["attempts"]["strategies"]["pass"] == {"main_problem_resolve_rate": 1.0, "subproblem": 1.0}
    assert "Configured attempt_strategy=pass: main_problem_resolve_rate 100.0%" in summary_file(run, "md").read_text()
    assert responder.total() == 14
