"""A gold run in tool_use mode whose tool snippets run in a real SandboxFusion server equals the local run.

The server (../shared/sandboxfusion) is started once per session by the `sandboxfusion_url` fixture.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.pipeline_support import (
    assert_ok,
    data_args,
    load_json,
    run_doit,
    step_statuses,
)
from tests.support.run_files import config_file, summary_file

GOLD_PROBLEMS = ("70", "29", "38")  # 14 steps, each first run through the tool by the gold model


def tool_results(run: Path) -> dict[str, list[tuple[str, str]]]:
    """step id -> [(status, output)] of every tool call of the run."""
    found: dict[str, list[tuple[str, str]]] = {}
    for path in sorted((run / "generations").glob("*.json")):
        for step in load_json(path)["steps"]:
            found[step["step_id"]] = [(r["status"], r["output"]) for r in step["trajectory"]["tool_results"]]
    return found


@pytest.mark.slow
def test_gold_run_with_the_real_sandbox_equals_the_local_run(
    tmp_path: Path, staged_data_dir: Path, dev_targets: Path, sandboxfusion_url: str
) -> None:
    args = (
        *data_args(staged_data_dir, dev_targets),
        "model=gold",
        "split=validation",
        "mode=tool_use",
        f"sample_ids={','.join(GOLD_PROBLEMS)}",
    )
    local = run_doit(tmp_path, *args, "run=local")
    assert_ok(local)
    remote = run_doit(tmp_path, *args, "run=sandbox", f"sandbox_url={sandboxfusion_url}")
    assert_ok(remote)
    runs = {name: tmp_path / "results" / "scicode" / "gold" / name for name in ("local", "sandbox")}
    summaries = {name: load_json(summary_file(run, "json")) for name, run in runs.items()}
    for key in ("subproblem_correct", "subproblem_total", "main_problem_resolved"):
        assert summaries["sandbox"][key] == summaries["local"][key], key
    assert summaries["sandbox"]["subproblem_correct"] == summaries["sandbox"]["subproblem_total"] == 14
    assert step_statuses(runs["sandbox"] / "details") == step_statuses(runs["local"] / "details")
    there, here = tool_results(runs["sandbox"]), tool_results(runs["local"])
    assert there == here
    assert sum(len(calls) for calls in there.values()) == 14
    assert all(status == "ok" for calls in there.values() for status, _ in calls), there
    assert load_json(config_file(runs["sandbox"]))["settings"]["sandbox_url"] == sandboxfusion_url
    print(
        f"gold via SandboxFusion: {summaries['sandbox']['subproblem_correct']}/{summaries['sandbox']['subproblem_total']} "
        f"steps, {summaries['sandbox']['main_problem_resolved']} problems; tool calls: {sum(map(len, there.values()))} ok"
    )
