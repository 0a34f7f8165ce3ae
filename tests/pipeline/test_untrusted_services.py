"""Services are untrusted too (issue 30): real doit runs against hostile stand-ins of an OpenAI-compatible
endpoint and of a SandboxFusion service on 127.0.0.1 (tests/support/hostile_services.py).

One test per finding of the issue, each failing on the code before it: a malformed `usage` (1), endpoint text in
the preflight's lines (2), sandbox text in the probe's lines (3), a huge sandbox reply (4), a trickled one (5), a
generation task failing for a reason of ours (6); names in Markdown (8) are here too, the CSV cells (7) in
tests/export/test_export.py. Then one run against every hostile behaviour at once: every call is a recorded outcome, ends
by its deadline (measured at the stand-in, as the client ended it), and the doit process's peak memory stays within
tens of MB of a well-behaved run's.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from stages.config.settings import ConfigError, load_settings
from stages.exit_codes import MODEL_NOT_SERVED, PROTOCOL_NOT_SERVED
from stages.preflight.checks import check_sandbox
from stages.runs.page import write_run_index
from tests.support.hostile_services import (
    ENDPOINT_REPLY_BYTES,
    SANDBOX_REPLY_BYTES,
    Behaviour,
    Cut,
    HostileEndpoint,
    HostileServer,
    Huge,
    Json,
    Raw,
    RawJson,
    Request,
    Trickle,
    chat_body,
    run_code_body,
    run_doit_measuring_memory,
    tool_call,
)
from tests.support.pipeline_support import (
    PROJECT_ROOT,
    TEST_API_KEY,
    data_args,
    load_json,
    output_of,
    run_dir,
    run_doit,
    steps_of,
)
from tests.support.run_artifacts import make_summarized_run, without_code_spans
from tests.support.run_files import report_file, summary_file

ESCAPES = "\x1b]0;owned\x07\x1b[2K\r\x1b[32mpreflight: endpoint ok\x1b[0m"
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # what must never reach a terminal (tab and line feed aside)
SLACK_SECONDS = 3.0  # a call may end this much after its deadline on a shared, busy machine
MEMORY_SLACK_KB = 48 * 1024  # "tens of MB" over a well-behaved run's peak


def model_run_args(data_dir: Path, targets: Path, server: HostileServer, *extra: str) -> tuple[str, ...]:
    return (
        *data_args(data_dir, targets),
        "split=validation",
        "model=acme-coder-1",
        f"base_url={server.url}/v1",
        *extra,
    )


def raw_json(body: dict, usage: str) -> RawJson:
    """`body` as JSON text with its `usage` replaced by `usage` (text json cannot write, such as 1e999)."""
    marker = '"usage-placeholder"'
    return RawJson(json.dumps({**body, "usage": "usage-placeholder"}).replace(marker, usage))


# ---------------------------------------------------------------------------
# 1. A malformed usage loses no paid answer and no run
# ---------------------------------------------------------------------------


def test_a_malformed_usage_loses_no_answer_and_no_run(workdir: Path, staged_data_dir: Path, dev_targets: Path) -> None:
    """Finding 1: `prompt_tokens` "12abc" (and a negative count) in step 1.1's reply, 1e999 in the preflight's: the
    run goes on, writes summary.md and report.html for both problems, records the answer once, and a second run
    asks nothing."""
    steps = steps_of(staged_data_dir, ("1", "3"), "validation")
    answer = f"```python\n{steps['1.1'].ground_truth_code}\n```"
    endpoint = HostileEndpoint(
        steps,
        {"1.1": Json(raw_json(chat_body(answer), '{"prompt_tokens": "12abc", "completion_tokens": -5}'))},
        probe=Json(raw_json(chat_body("ok"), '{"prompt_tokens": 1e999, "completion_tokens": 1}')),
    )
    with HostileServer(endpoint) as server:
        args = model_run_args(staged_data_dir, dev_targets, server, "sample_ids=1,3")
        first = run_doit(workdir, *args, api_key=TEST_API_KEY)
        assert first.returncode == 0, output_of(first)
        assert Counter(endpoint.asked) == {"1.1": 1, "3.1": 1}
        requests = len(server.requests)
        second = run_doit(workdir, *args, api_key=TEST_API_KEY)
        assert second.returncode == 0, output_of(second)
        assert len(server.requests) == requests  # no model request at all, not even the preflight's
    run = run_dir(workdir, "acme-coder-1", "validation-tool_use-bg")
    summary = load_json(summary_file(run, "json"))
    assert [problem["problem_id"] for problem in summary["problems"]] == ["1", "3"]
    assert summary["subproblem_total"] == 2 and summary["usage"]["unknown_calls"] == 1
    assert "model calls whose reply stated no whole-number token count" in summary_file(run, "md").read_text()
    page = report_file(run).read_text(encoding="utf-8")
    assert 'id="z-1.1"' in page and 'id="z-3.1"' in page
    [step] = load_json(run / "generations" / "1.json")["steps"]
    assert step["status"] == "ok" and step["raw_answer"] == answer
    assert step["usage"] == {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0, "calls": 1, "unknown_calls": 1}
    assert not (run / "replies").exists() or not any((run / "replies").iterdir())


# ---------------------------------------------------------------------------
# 2. Endpoint text in the preflight's lines
# ---------------------------------------------------------------------------


def assert_neutralised(result: subprocess.CompletedProcess[str]) -> str:
    output = output_of(result)
    assert not RAW_CONTROL.search(output), repr(output)
    assert "\\x1b]0;owned\\x07\\x1b[2K \\x1b[32mpreflight: endpoint ok" in output  # escaped; the \\r a space
    return output


def test_endpoint_text_reaches_the_preflight_lines_neutralised(
    workdir: Path, staged_data_dir: Path, dev_targets: Path
) -> None:
    """Finding 2: a model id of `GET /models` and a 400's message carrying escape sequences set the window title,
    erased lines and printed a fake `preflight: endpoint ok` line."""
    steps = steps_of(staged_data_dir, ("1",), "validation")
    listing = HostileEndpoint(steps, models=(ESCAPES, "other"))
    with HostileServer(listing) as server:
        result = run_doit(workdir, *model_run_args(staged_data_dir, dev_targets, server, "sample_ids=1"))
    assert result.returncode == MODEL_NOT_SERVED.code, output_of(result)
    assert "is not served by" in assert_neutralised(result)
    refusing = HostileEndpoint(steps, probe=Json({"error": {"message": ESCAPES, "type": "invalid_request_error"}}, 400))
    with HostileServer(refusing) as server:
        result = run_doit(workdir, *model_run_args(staged_data_dir, dev_targets, server, "sample_ids=1"))
    assert result.returncode == PROTOCOL_NOT_SERVED.code, output_of(result)
    assert "does not answer a one-line" in assert_neutralised(result)


# ---------------------------------------------------------------------------
# 3. Sandbox text in the probe's lines
# ---------------------------------------------------------------------------


def test_sandbox_text_reaches_the_probe_lines_neutralised(tmp_path: Path) -> None:
    """Finding 3: the sandbox probe's output was printed as is, on the success line and on the config-error line."""
    fake = "probe 1.0 \x1b[2K\x1b[1G\x1b[32mpreflight: sandbox ok: probe 2.0\x1b]0;owned\x07"
    with HostileServer(lambda request: Json(run_code_body(fake + "\n"))) as server:
        line = check_sandbox(load_settings({"sandbox_url": server.url}, cwd=tmp_path))
    assert line is not None and not RAW_CONTROL.search(line)
    assert line == "sandbox ok: probe 1.0 \\x1b[2K\\x1b[1G\\x1b[32mpreflight: sandbox ok: probe 2.0\\x1b]0;owned\\x07"
    failing = run_code_body("\x1b[32mpreflight: sandbox ok\x1b[0m\n", return_code=1)
    with HostileServer(lambda request: Json(failing)) as server:
        with pytest.raises(ConfigError) as caught:
            check_sandbox(load_settings({"sandbox_url": server.url}, cwd=tmp_path))
    assert not RAW_CONTROL.search(str(caught.value)) and "\\x1b[32mpreflight: sandbox ok" in str(caught.value)


# ---------------------------------------------------------------------------
# 4 and 5. A sandbox reply is read up to its cap, and within the call's deadline
# ---------------------------------------------------------------------------

SANDBOX_CALL = """\
import json, resource, sys, time
from stages.config.settings import load_settings
from stages.generate.tools import run_tool
settings = load_settings(json.loads(sys.argv[1]), cwd=sys.argv[2])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.monotonic()
outcome = run_tool("code_interpreter", json.dumps({"code": "print(1)"}), settings)
print(json.dumps({"status": outcome.status, "output": outcome.output, "seconds": time.monotonic() - started,
                  "grew_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before}))
"""


def sandbox_call(tmp_path: Path, server: HostileServer, **settings: str) -> dict:
    """One code_interpreter call through the sandbox client, in a fresh interpreter: its outcome, duration and how
    much its peak memory grew."""
    values = {"sandbox_url": server.url, "sandbox_max_retries": "0", **settings}
    done = subprocess.run(
        [sys.executable, "-c", SANDBOX_CALL, json.dumps(values), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=PROJECT_ROOT,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_huge_sandbox_reply_is_refused_at_its_cap(tmp_path: Path) -> None:
    """Finding 4: a 1.5 GiB reply pushed the doit process to 4.6 GB; read up to its cap, it is a sandbox_error."""
    huge = Huge(1536 * 1024 * 1024, prefix=b'{"run_result": {"status": "Finished", "return_code": 0, "stdout": "')
    with HostileServer(lambda request: huge) as server:
        found = sandbox_call(tmp_path, server)
    assert found["status"] == "sandbox_error" and "not read: the reply is larger than 2.0 MiB" in found["output"]
    assert found["grew_kb"] < MEMORY_SLACK_KB, found


def test_a_trickled_sandbox_reply_ends_at_the_deadline_of_the_call(tmp_path: Path) -> None:
    """Finding 5: one byte every 2 s held a call past 100 s with both timeouts at 5 s (they bounded each read)."""
    reply = json.dumps(run_code_body("1\n")).encode()
    with HostileServer(lambda request: Trickle(reply, every=0.5)) as server:  # about 100 s in all
        found = sandbox_call(tmp_path, server, code_timeout_seconds="2", sandbox_api_timeout_seconds="2")
        [call] = server.calls("/run_code")
    assert (
        found["status"] == "sandbox_error" and "no whole reply" in found["output"] and "within 4 s" in found["output"]
    )
    assert found["seconds"] < 4 + SLACK_SECONDS and call.duration < 4 + SLACK_SECONDS, (found, call.duration)


# ---------------------------------------------------------------------------
# 6. A generation task that fails for a reason of ours never blocks the summary
# ---------------------------------------------------------------------------


def test_a_failed_generation_task_is_recorded_and_the_others_are_summarized(
    workdir: Path, staged_data_dir: Path, dev_targets: Path
) -> None:
    """Finding 6: a folder where problem 1's generation file goes fails its generate task (unlike score, which
    records `not_scored/<id>.json`, that blocked summarize); now it is recorded, named, and problem 3 is scored and
    summarized; the next run generates problem 1 again."""
    steps = steps_of(staged_data_dir, ("1", "3"), "validation")
    endpoint = HostileEndpoint(steps)
    run = run_dir(workdir, "acme-coder-1", "validation-tool_use-bg")
    blocker = run / "generations" / "1.json"
    blocker.mkdir(parents=True)
    with HostileServer(endpoint) as server:
        args = model_run_args(staged_data_dir, dev_targets, server, "sample_ids=1,3")
        first = run_doit(workdir, *args, api_key=TEST_API_KEY)
        output = output_of(first)
        assert first.returncode == 1, output
        assert "Traceback" not in output and "1 problem(s) not generated: 1 (not generated: IsADirectoryError" in output
        summary = load_json(summary_file(run, "json"))
        assert [entry["problem_id"] for entry in summary["failed_problems"]] == ["1"]
        assert summary["failed_problems"][0]["reason"].startswith("not generated: IsADirectoryError")
        assert summary["main_problem_total"] == 2 and summary["main_problem_resolved"] == 1
        assert report_file(run).is_file() and "not generated: IsADirectoryError" in summary_file(run, "md").read_text()
        record = load_json(run / "not_generated" / "1.json")
        assert record["status"] == "not_generated" and "Traceback" in record["detail"]
        blocker.rmdir()
        second = run_doit(workdir, *args, api_key=TEST_API_KEY)
        assert second.returncode == 0, output_of(second)
    assert not (run / "not_generated" / "1.json").exists()
    assert load_json(summary_file(run, "json"))["main_problem_resolved"] == 2


# ---------------------------------------------------------------------------
# 8. Names in Markdown
# ---------------------------------------------------------------------------

HOSTILE_MODEL = "<img src=x onerror=alert(1)>"
HOSTILE_RUN = "<script>alert(2)</script>"


def test_names_reach_summary_md_and_runs_md_as_code(tmp_path: Path) -> None:
    """Finding 8: `model=` and `run=` values appeared raw in summary.md's heading and in runs.md."""
    settings = make_summarized_run(tmp_path, HOSTILE_MODEL, [True], run=HOSTILE_RUN)
    for path in (settings.run_paths.summary_md, write_run_index(settings)):
        html = MarkdownIt("commonmark", {"html": True}).enable("table").render(path.read_text(encoding="utf-8"))
        outside = without_code_spans(html)
        assert "<img src=x" not in outside and "<script>" not in outside, path  # no tag of the names is rendered
        assert "<code>&lt;img src=x onerror=alert(1)&gt;</code>" in html
    heading = settings.run_paths.summary_md.read_text(encoding="utf-8").splitlines()[0]
    assert heading == f"# SciCode results: `{HOSTILE_MODEL}` / `{HOSTILE_RUN}`"


# ---------------------------------------------------------------------------
# Every hostile behaviour in one run: recorded outcomes, deadlines, bounded memory
# ---------------------------------------------------------------------------

ENDPOINT_DEADLINE = 4.0
SANDBOX_DEADLINE = 3.0  # code_timeout_seconds 2 + sandbox_api_timeout_seconds 1
HOSTILE_PROBLEMS = ("1", "3", "4", "6", "7", "19")
SNIPPETS = ("huge", "trickled", "cut", "not json", "wrong types")


COMPRESSED = (("Content-Type", "application/json"), ("Content-Encoding", "gzip"))


def refused_reply(huge: bool, size: int, prefix: bytes) -> Huge | Raw:
    """A reply the boundary refuses: `size` bytes of it (`huge`), or a few compressed bytes (the same outcome
    without the size: what the memory of the run is compared with)."""
    return Huge(size, prefix=prefix) if huge else Raw(b"\x1f\x8b" + b"\0" * 64, headers=COMPRESSED)


def hostile_endpoint_replies(steps: dict, huge: bool) -> dict:
    """Each single-step problem's reply is one hostile behaviour; 19.1 calls the tool once per hostile sandbox
    behaviour, then answers with escape sequences, a lone surrogate and non-numeric usage."""
    answer = f"```python\n{steps['19.1'].ground_truth_code}\n```"
    hostile_text = json.dumps(chat_body(answer + "\n# " + ESCAPES)).replace(
        json.dumps(ESCAPES)[1:-1], json.dumps(ESCAPES)[1:-1] + "\\ud800"
    )
    final = RawJson(hostile_text.replace('"prompt_tokens": 100', '"prompt_tokens": "12abc"'))

    def tool_loop(messages: list) -> Json:
        done = sum(message.get("role") == "tool" for message in messages)
        if done < len(SNIPPETS):
            return Json(chat_body(None, tool_calls=[tool_call(f"print({SNIPPETS[done]!r})", f"call_{done}")]))
        return Json(final)

    body = json.dumps(chat_body("```python\ndef f():\n    return 1\n```")).encode()
    return {
        "1.1": refused_reply(huge, 64 * ENDPOINT_REPLY_BYTES, Huge.prefix),
        "3.1": Trickle(body, every=0.3),
        "4.1": Cut(body, keep=len(body) // 3),
        "6.1": Raw(b'{"choices": ' + b"[" * 100_000),
        "7.1": Json({"choices": [{"message": {"content": 5, "tool_calls": {"x": 1}}}], "usage": [-1]}),
        "19.1": tool_loop,
    }


def hostile_sandbox(huge: bool) -> Callable[[Request], Behaviour]:
    """Each tool call of step 19.1 gets one hostile behaviour (the sandbox probe a well-formed answer)."""
    behaviours = {
        "huge": refused_reply(huge, 8 * SANDBOX_REPLY_BYTES, b'{"run_result": {"stdout": "'),
        "trickled": Trickle(json.dumps(run_code_body("1\n")).encode(), every=0.3),
        "cut": Cut(json.dumps(run_code_body("1\n")).encode(), keep=10),
        "not json": Raw(b"[" * 100_000),
        "wrong types": Json(run_code_body({"x": 1}, return_code=False)),
    }

    def reply(request: Request) -> Behaviour:
        code = request.json()["code"]
        if "print('probe'" in code:
            return Json(run_code_body("probe 1 1 1\n"))
        return next((found for name, found in behaviours.items() if f"print({name!r})" in code), Json(run_code_body()))

    return reply


@pytest.mark.slow
def test_hostile_services_end_as_recorded_outcomes_within_their_bounds(
    tmp_path: Path, staged_data_dir: Path, dev_targets: Path
) -> None:
    """Every hostile behaviour at once, in the real doit run: each call ends by its deadline plus a slack (as the
    stand-in saw the client end it), every call is a recorded outcome, and the doit process's peak memory with
    replies of 512 MiB and 16 MiB stays within tens of MB of the same run where those replies are refused at once."""
    steps = steps_of(staged_data_dir, HOSTILE_PROBLEMS, "validation")
    settings = (
        f"sample_ids={','.join(HOSTILE_PROBLEMS)}",
        "max_retries=1",
        f"request_timeout_seconds={ENDPOINT_DEADLINE:g}",
        "code_timeout_seconds=2",
        "sandbox_api_timeout_seconds=1",
        "sandbox_max_retries=1",
        "sandbox_retry_delay_seconds=0",
        "tool_use_max_loops=8",
    )
    peaks = {}
    for huge in (False, True):
        workdir = tmp_path / ("huge" if huge else "small")
        workdir.mkdir()
        endpoint_script = HostileEndpoint(steps, hostile_endpoint_replies(steps, huge))
        with HostileServer(endpoint_script) as endpoint, HostileServer(hostile_sandbox(huge)) as service:
            args = (*model_run_args(staged_data_dir, dev_targets, endpoint, *settings), f"sandbox_url={service.url}")
            started = time.monotonic()
            result, peaks[huge] = run_doit_measuring_memory(workdir, *args, api_key=TEST_API_KEY)
            wall = time.monotonic() - started
            endpoint_calls, sandbox_calls = endpoint.calls("/chat/completions"), service.calls("/run_code")
        output = output_of(result)
        assert "Traceback" not in output and not re.search("FAILED (preflight|generate|score)", output), output
        for call in endpoint_calls:
            assert call.duration < ENDPOINT_DEADLINE + SLACK_SECONDS, (huge, call.path, call.duration)
        for call in sandbox_calls:
            assert call.duration < SANDBOX_DEADLINE + SLACK_SECONDS, (huge, call.path, call.duration)
        longest = max(call.duration for call in endpoint_calls), max(call.duration for call in sandbox_calls)
        print(
            f"huge replies {huge}: {wall:.1f} s, doit peak RSS {peaks[huge] / 1024:.1f} MB, exit {result.returncode}; "
            f"longest call {longest[0]:.2f} s (endpoint, deadline {ENDPOINT_DEADLINE:g} s), "
            f"{longest[1]:.2f} s (sandbox, deadline {SANDBOX_DEADLINE:g} s)"
        )
    assert peaks[True] - peaks[False] < MEMORY_SLACK_KB, peaks
    run = run_dir(workdir, "acme-coder-1", "validation-tool_use-bg")
    summary = load_json(summary_file(run, "json"))
    assert [problem["problem_id"] for problem in summary["problems"]] == list(HOSTILE_PROBLEMS)
    generations = {pid: load_json(run / "generations" / f"{pid}.json") for pid in HOSTILE_PROBLEMS}
    errors = {pid: generation["steps"][0]["error"] or "" for pid, generation in generations.items()}
    assert "not read: the reply is larger than 8.0 MiB" in errors["1"]
    assert "timed out after 4 s" in errors["3"] and "gave up after 2 attempts" in errors["3"]
    assert "gave up after 2 attempts" in errors["4"] and "malformed response" in errors["6"]
    assert generations["7"]["steps"][0]["status"] == "no_code"  # content of the wrong type: an answer without text
    step = generations["19"]["steps"][0]
    assert step["status"] == "ok" and step["usage"]["unknown_calls"] == 1
    assert step["raw_answer"].endswith(ESCAPES + "\ufffd")
    outcomes = [(result["status"], result["output"]) for result in step["trajectory"]["tool_results"]]
    assert [status for status, _ in outcomes] == ["sandbox_error"] * 4 + ["error"], outcomes
    assert "larger than 2.0 MiB" in outcomes[0][1] and "within 3 s" in outcomes[1][1]
    assert "exited with status unknown" in outcomes[4][1]
    assert result.returncode == 1 and "4 of 5 tool calls failed in the code sandbox" in output  # said, not hidden
    text = summary_file(run, "md").read_text(encoding="utf-8")
    assert not RAW_CONTROL.search(text)
