"""A journaled reply whose handling fails is that step's recorded error, its reply kept and never read back into
the same failure; asking the endpoint again is the explicit `reask_unhandled_replies=true` (the real `openai`
client against a stand-in endpoint on 127.0.0.1; the handling failure is a fault injected into the pipeline's
own answer handling, as a bug of ours would be)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stages.config.settings import Settings, load_settings
from stages.generate import loops
from stages.generate.stage import run_generate
from tests.support.hostile_services import HostileServer, Json, chat_body
from tests.support.pipeline_support import steps_of


def settings_of(server: HostileServer, tmp_path: Path, data_dir: Path, **extra: str) -> Settings:
    values = {
        "model": "acme-coder-1",
        "base_url": f"{server.url}/v1",
        "mode": "naive",
        "split": "validation",
        "data_dir": str(data_dir),
        "results_dir": str(tmp_path / "results"),
        **extra,
    }
    return load_settings(values, cwd=tmp_path)


def broken_handling(*args: object) -> None:
    raise RuntimeError("the answer handling broke on this reply")


def test_a_reply_whose_handling_failed_is_kept_and_asked_again_only_on_request(
    tmp_path: Path, staged_data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    [step] = steps_of(staged_data_dir, ("1",), "validation").values()
    answer = f"```python\n{step.ground_truth_code}\n```"
    with HostileServer(lambda request: Json(chat_body(answer))) as server:
        settings = settings_of(server, tmp_path, staged_data_dir)
        journal = settings.run_paths.replies("1")
        with monkeypatch.context() as patched:
            patched.setattr(loops, "final_status", broken_handling)
            first: Any = run_generate(settings, "1")
            assert len(server.calls("/chat/completions")) == 1
            [failed] = first["steps"]
            assert failed["status"] == "error" and "the answer handling broke" in failed["error"]
            assert "reask_unhandled_replies=true" in failed["error"] and str(journal) in failed["error"]
            assert answer.splitlines()[1] in journal.read_text(encoding="utf-8")  # the paid reply is kept

            again: Any = run_generate(settings, "1")  # the same fault: the reply is not read back into it

            assert len(server.calls("/chat/completions")) == 1
            [refused] = again["steps"]
            assert refused["status"] == "error" and "handling its reply failed before" in refused["error"]
            assert refused["usage"]["calls"] == 0

        kept: Any = run_generate(settings, "1")  # the fault is gone, but asking again is a choice: still refused
        assert kept["steps"][0]["status"] == "error" and len(server.calls("/chat/completions")) == 1

        reasked: Any = run_generate(settings_of(server, tmp_path, staged_data_dir, reask_unhandled_replies="true"), "1")

        assert len(server.calls("/chat/completions")) == 2
        assert reasked["status"] == "complete" and reasked["steps"][0]["status"] == "ok"
        assert not journal.exists()
