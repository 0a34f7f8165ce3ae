"""Real doit runs under `protocol=`: the protocol's request parameters reach the endpoint, and a model whose id is
an alias of a published row gets that row's figure beside its own, with the reasons it is not comparable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.pipeline_support import (
    TEST_API_KEY,
    ScriptedModel,
    assert_ok,
    data_args,
    is_preflight_probe,
    model_args,
    run_dir,
    run_doit,
    steps_of,
)

GPT_4O = "gpt-4o-2024-05-13"  # an alias of the official leaderboard's GPT-4o row


@pytest.mark.slow
def test_a_replayed_model_with_a_published_alias_shows_the_published_figure(
    workdir: Path, staged_data_dir: Path, dev_targets: Path, start_server
) -> None:
    model = ScriptedModel(steps_of(staged_data_dir, ("1", "3"), "validation"))  # the reference answers
    server = start_server(model)
    result = run_doit(
        workdir,
        *data_args(staged_data_dir, dev_targets),
        *model_args(server, GPT_4O),
        "protocol=scicode-paper",
        "split=validation",
        "sample_ids=1,3",
        api_key=TEST_API_KEY,
    )
    assert_ok(result)
    asked = [request for request in server.requests if not is_preflight_probe(request)]
    assert asked and all(  # noqa
        request.params.get("temperature") == 0 and not request.tools for request in asked
    )
    final = result.stdout.splitlines()
    line = next(text for text in final if text.startswith(f"{GPT_4O} / validation-naive-nobg-scicode-paper: "))
    assert "resolved 2/2 (100.0%)" in line
    assert "not the published setting scicode-paper: settings differ from the protocol's: split=validation" in line
    run = run_dir(workdir, GPT_4O, "validation-naive-nobg-scicode-paper")
    (summary_path,) = run.glob("summary*.json")
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    assert summary["published_setting"]["is_published"] is False
    (reference,) = summary["references"]
    assert (reference["model"], reference["comparable"], reference["resolve_inside"]) == ("GPT-4o", False, None)
    assert reference["reasons"][:2] == [
        "settings differ from the protocol's: split=validation (protocol: test)",
        "2 of the 15 problems of split validation (a subset)",
    ]
    head = summary_path.with_suffix(".md").read_text(encoding="utf-8").split("\n## ", 1)[0]
    assert "- GPT-4o (scicode-paper): resolved 1.5%, steps 25.0%; not comparable: settings differ" in head
