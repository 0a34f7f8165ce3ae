"""run_generate: artifacts after every step, resume by prompt fingerprint, errors kept per problem,
the run-level breaker, and end-to-end runs of the built-in gold model."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest

from stages.benchmark.problems import load_problems, problems_by_id
from stages.benchmark.protocol import remove_top_level_imports
from stages.config.settings import load_settings
from stages.generate.builtin import BuiltinModelService, responder_identity
from stages.generate.server import ErrorReply, ModelReply, ModelServer, StallReply
from stages.generate.stage import (
    BREAKER,
    KeyRefused,
    RunAborted,
    generation_current,
    generation_fingerprint,
    generation_path,
    run_generate,
)
from stages.storage.artifacts import read_artifact
from tests.generate.scripted import FakeTime, InFlightCounter
from tests.support.run_artifacts import json_at, json_object, json_objects, json_str, read_record, steps_of

NEXT_FUNCTION = re.compile(r"NEXT STEP.*?^(?:def|class) (\w+)", re.DOTALL | re.MULTILINE)


def asked_function(request) -> str:
    """The name the next step defines, read from the prompt (real models get no step header)."""
    match = NEXT_FUNCTION.search(request.messages[0]["content"])
    assert match, "the prompt names the next step's function"
    return match.group(1)


def answer_defining(name: str) -> ModelReply:
    return ModelReply(
        text=f"```python\nimport numpy as np\n\ndef {name}(*args):\n    return '{name}'\n```",
        prompt_tokens=3,
        completion_tokens=2,
    )


class StepResponder:
    """Answers each step with a small definition of its function; `failing` maps names to an error reply."""

    def __init__(self, failing: dict | None = None):
        self.failing = dict(failing or {})
        self.asked: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, request):
        name = asked_function(request)
        with self.lock:
            self.asked.append(name)
        return self.failing.get(name) or answer_defining(name)


@pytest.fixture(autouse=True)
def fresh_breaker_and_instant_backoff(monkeypatch):
    BREAKER.reset()
    FakeTime().install(monkeypatch)
    yield
    BREAKER.reset()


@pytest.fixture()
def make_settings(tmp_path: Path, staged_data_dir: Path):
    def build(**values):
        base = {
            "data_dir": str(staged_data_dir),
            "results_dir": str(tmp_path / "results"),
            "code_workdir": str(tmp_path / "interpreter"),
            "max_retries": "2",
            "mode": "naive",
        }
        base.update({name: str(value) for name, value in values.items()})
        return load_settings(base, cwd=tmp_path)

    return build


def test_complete_generation_is_schema_valid_and_current(make_settings):
    responder = StepResponder()
    with ModelServer(responder) as server:
        settings = make_settings(model="m1", base_url=server.base_url)
        assert not generation_current(settings, "29")
        record = run_generate(settings, "29")
    assert record["status"] == "complete" and record["error"] is None
    assert [step["step_id"] for step in steps_of(record)] == ["29.1", "29.2", "29.3"]
    assert [step["status"] for step in steps_of(record)] == ["ok", "ok", "ok"]
    # the import line is left empty and takes the fence line's break with it, as officially
    assert steps_of(record)[1]["code"] == "\n\ndef inner_product(*args):\n    return 'inner_product'\n"
    assert record["carry"] == "full"
    assert record["usage"] == {"input_tokens": 9, "output_tokens": 6, "total_tokens": 15, "calls": 3}
    assert read_artifact(generation_path(settings, "29"), "generation") == record
    assert generation_current(settings, "29")
    assert record["fingerprint"] == generation_fingerprint(settings, "29")
    # the later prompt carries the earlier step's whole code forward
    assert "\n\n\n\ndef normalize(*args):\n    return 'normalize'\n\n\n------" in json_str(
        server.requests[2].messages[0]["content"]
    )
    # another generate setting, another fingerprint: no longer current
    changed = make_settings(model="m1", base_url=settings.base_url, model_params='{"temperature": 0.5}')
    assert generation_path(changed, "29") == generation_path(settings, "29")
    assert not generation_current(changed, "29")
    # base_url is where the model lives, not what it is
    assert generation_current(make_settings(model="m1", base_url="http://127.0.0.1:9/v1"), "29")


def test_exhausted_5xx_stops_the_problem_with_an_error_and_others_go_on(make_settings, capsys):
    responder = StepResponder({"inner_product": ErrorReply(500, "backend exploded")})
    with ModelServer(responder) as server:
        settings = make_settings(model="m2", base_url=server.base_url)
        record = run_generate(settings, "29")
        assert record["status"] == "error"
        assert json_str(record["error"]).startswith("step 29.2: gave up after 3 attempts: HTTP 500")
        assert [step["status"] for step in steps_of(record)] == ["ok", "error"]
        assert responder.asked == ["normalize"] + ["inner_product"] * 3
        assert "generate 29: failed at step 29.2" in capsys.readouterr().err
        assert not generation_current(settings, "29")
        assert read_record(generation_path(settings, "29"), "generation")["status"] == "error"
        other = run_generate(settings, "1")  # a transient failure never trips the breaker
        assert other["status"] == "complete"


def test_resume_after_a_failure_asks_only_the_missing_steps(make_settings):
    failing = StepResponder({"inner_product": ErrorReply(503, "down")})
    with ModelServer(failing) as server:
        first = run_generate(make_settings(model="m3", base_url=server.base_url), "29")
    assert first["status"] == "error"
    step1 = steps_of(first)[0]

    healthy = StepResponder()
    with ModelServer(healthy) as server:
        settings = make_settings(model="m3", base_url=server.base_url)
        second = run_generate(settings, "29")
        assert healthy.asked == ["inner_product", "orthogonalize"]
        assert second["status"] == "complete"
        assert steps_of(second)[0] == step1  # reused verbatim, same response id
        assert run_generate(settings, "29") == second
        assert healthy.asked == ["inner_product", "orthogonalize"]  # nothing asked again


def test_resume_after_a_crash_between_steps(make_settings, monkeypatch):
    """A crash (not an API error) after step 3's answer arrived, before it was recorded, leaves an artifact that
    resumes at step 3, whose answer is read back from the reply journal: it is not bought again."""
    from stages.generate import stage as stage_module
    from stages.storage.artifacts import write_artifact as real_write

    responder = StepResponder()
    writes = {"count": 0}

    def crash_on_third_write(path, kind, record):
        writes["count"] += 1
        if writes["count"] == 3:
            raise KeyboardInterrupt("simulated crash")
        return real_write(path, kind, record)

    with ModelServer(responder) as server:
        settings = make_settings(model="m4", base_url=server.base_url)
        monkeypatch.setattr(stage_module, "write_artifact", crash_on_third_write)
        with pytest.raises(KeyboardInterrupt):
            run_generate(settings, "29")
        interim = read_record(generation_path(settings, "29"), "generation")
        assert interim["status"] == "error" and interim["error"] == "incomplete: stopped before step 29.3"
        assert len(interim["steps"]) == 2
        monkeypatch.setattr(stage_module, "write_artifact", real_write)
        record = run_generate(settings, "29")
    assert record["status"] == "complete"
    assert responder.asked == ["normalize", "inner_product", "orthogonalize"]
    [call] = json_objects(json_at(record, "steps", 2, "trajectory", "calls"))
    assert call["replayed"] is True
    assert not settings.run_paths.replies("29").exists()  # the journal goes once the step is recorded


def test_changed_earlier_code_changes_later_prompts(make_settings):
    """When step 1 is regenerated with different code, step 2's prompt differs and it is asked again."""
    with ModelServer(StepResponder()) as server:
        settings = make_settings(model="m5", base_url=server.base_url)
        record = run_generate(settings, "19")
    path = generation_path(settings, "19")
    tampered = json.loads(path.read_text())
    tampered["steps"][0]["status"] = "error"  # as if step 1 had failed: it must be asked again
    tampered["status"], tampered["error"] = "error", "step 19.1: failed"
    path.write_text(json.dumps(tampered))

    def other_code(request):
        name = asked_function(request)
        return ModelReply(text=f"```python\ndef {name}(*args):\n    return 'v2'\n```")

    with ModelServer(other_code) as server:
        again = run_generate(make_settings(model="m5", base_url=server.base_url), "19")
        assert len(server.requests) == 2
    assert steps_of(again)[0]["prompt_fingerprint"] == steps_of(record)[0]["prompt_fingerprint"]
    assert steps_of(again)[1]["prompt_fingerprint"] != steps_of(record)[1]["prompt_fingerprint"]


@pytest.mark.parametrize("carry", ["full", "definition"])
def test_carry_decides_what_later_prompts_carry(make_settings, carry):
    def with_helper(request):
        name = asked_function(request)
        return ModelReply(
            text=f"```python\nimport numpy as np\n\ndef _helper_{name}():\n    return 1\n\n"
            f"def {name}(*args):\n    return _helper_{name}()\n```"
        )

    with ModelServer(with_helper) as server:
        settings = make_settings(model="m13", base_url=server.base_url, carry=carry)
        record = run_generate(settings, "29")
        last_prompt = json_str(server.requests[2].messages[0]["content"])
    assert record["carry"] == carry and settings.run_paths.run_dir.name.endswith("-carrydef") == (carry == "definition")
    whole = "\n\ndef _helper_normalize():\n    return 1\n\ndef normalize(*args):\n    return _helper_normalize()\n"
    assert steps_of(record)[0]["code"] == whole
    if carry == "full":
        assert whole + "\n\n------" in last_prompt
    else:
        assert "_helper_normalize():" not in last_prompt
        assert "\n\ndef normalize(*args):\n    return _helper_normalize()\n\n------" in last_prompt
    assert generation_current(settings, "29")
    other = make_settings(model="m13", base_url=settings.base_url, carry="definition" if carry == "full" else "full")
    assert generation_fingerprint(other, "29") != record["fingerprint"]


def test_404_trips_the_breaker_for_the_rest_of_the_run(make_settings):
    with ModelServer(
        lambda request: ErrorReply(404, "The model `nope` does not exist", code="model_not_found")
    ) as server:
        settings = make_settings(model="nope", base_url=server.base_url)
        # The first failure already aborts (its doit task fails: no summary claims 0/N), after writing the error.
        with pytest.raises(
            RunAborted,
            match=r"model call failed the same way for the one problem that called the model so far \(model=nope\): "
            r"HTTP 404 .*does not exist; check model= and base_url=",
        ):
            run_generate(settings, "1")
        record = read_record(generation_path(settings, "1"), "generation")
        assert record["status"] == "error" and "HTTP 404" in record["error"]
        assert len(server.requests) == 1  # permanent: not retried
        with pytest.raises(
            RunAborted, match=r"for the one problem that called the model so far \(model=nope\): HTTP 404"
        ):
            run_generate(settings, "3")
        assert len(server.requests) == 1  # the API was not called again
        assert not generation_path(settings, "3").exists()


def test_breaker_does_not_trip_once_a_problem_succeeded(make_settings):
    state = {"healthy": True}

    def responder(request):
        if state["healthy"]:
            return answer_defining(asked_function(request))
        return ErrorReply(404, "The model `m6` does not exist", code="model_not_found")

    with ModelServer(responder) as server:
        settings = make_settings(model="m6", base_url=server.base_url)
        assert run_generate(settings, "1")["status"] == "complete"
        state["healthy"] = False
        assert run_generate(settings, "3")["status"] == "error"
        assert run_generate(settings, "4")["status"] == "error"  # no RunAborted: problem 1 succeeded
        assert len(server.requests) == 3


def test_missing_api_key_trips_the_breaker(make_settings, monkeypatch):
    monkeypatch.delenv("SCICODE_NO_SUCH_KEY", raising=False)
    settings = make_settings(model="gpt-x", api_key_env="SCICODE_NO_SUCH_KEY")
    with pytest.raises(RunAborted, match="SCICODE_NO_SUCH_KEY"):
        run_generate(settings, "1")
    record = read_record(generation_path(settings, "1"), "generation")
    assert record["status"] == "error" and "SCICODE_NO_SUCH_KEY" in record["error"]
    with pytest.raises(RunAborted, match="SCICODE_NO_SUCH_KEY"):
        run_generate(settings, "3")


def test_problems_failing_404_at_once_in_threads_all_abort(make_settings):
    """With enough concurrency every problem calls the model before any failure is recorded: each still aborts."""
    arrived = threading.Barrier(3, timeout=10)

    def responder(request):
        arrived.wait()  # all three problems are in flight before any answer
        return ErrorReply(404, "The model `ghost` does not exist", code="model_not_found")

    with ModelServer(responder) as server:
        settings = make_settings(model="ghost", base_url=server.base_url)
        outcomes: dict[str, BaseException | None] = {}

        def generate(problem_id: str) -> None:
            try:
                run_generate(settings, problem_id)
                outcomes[problem_id] = None
            except BaseException as error:  # noqa: BLE001 - recorded for the assertion
                outcomes[problem_id] = error

        threads = [threading.Thread(target=generate, args=(pid,)) for pid in ("1", "3", "4")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert all(isinstance(outcomes.get(pid), RunAborted) for pid in ("1", "3", "4")), outcomes
        assert len(server.requests) == 3


def test_client_timeouts_end_in_a_step_error(make_settings):
    with ModelServer(lambda request: StallReply(1.0, answer_defining(asked_function(request)))) as server:
        settings = make_settings(model="m7", base_url=server.base_url, request_timeout_seconds="0.2", max_retries="1")
        record = run_generate(settings, "1")
    assert record["status"] == "error"
    error = json_str(record["error"])
    assert "gave up after 2 attempts" in error and "timed out after 0.2 s" in error
    assert json_at(record, "steps", 0, "trajectory", "calls", 0, "retries") == 1


def test_429_then_success_records_the_retry(make_settings, monkeypatch):
    delays = FakeTime().install(monkeypatch).sleeps
    replies = [ErrorReply(429, "slow", {"Retry-After": "3"})]

    def responder(request):
        return replies.pop() if replies else answer_defining(asked_function(request))

    with ModelServer(responder) as server:
        record = run_generate(make_settings(model="m8", base_url=server.base_url), "1")
    assert record["status"] == "complete" and delays == [3.0]
    call = json_object(json_at(record, "steps", 0, "trajectory", "calls", 0))
    assert call["retries"] == 1 and json_at(call, "retry_log", 0, "delay_s") == 3.0


def test_prefilled_step_is_injected_and_never_asked(make_settings, staged_data_dir):
    responder = StepResponder()
    with ModelServer(responder) as server:
        settings = make_settings(model="m9", base_url=server.base_url, split="test")
        record = run_generate(settings, "13")
    official = (staged_data_dir / "scicode" / "13.6.txt").read_text(encoding="utf-8")
    step6 = steps_of(record)[5]
    assert step6["step_id"] == "13.6" and step6["status"] == "prefilled" and step6["prefilled"] is True
    assert step6["code"] == official and step6["prompt_fingerprint"] is None and json_at(step6, "usage", "calls") == 0
    assert len(server.requests) == 14
    problem = problems_by_id(settings.data_paths)["13"]
    assert "Maxwell" not in responder.asked
    assert official in json_str(server.requests[5].messages[0]["content"])  # the 13.7 prompt carries the class whole
    assert record["status"] == "complete" and len(steps_of(record)) == len(problem.steps)


def test_later_attempts_use_their_own_file(make_settings):
    with ModelServer(StepResponder()) as server:
        settings = make_settings(model="m10", base_url=server.base_url)
        first = run_generate(settings, "1")
        second = run_generate(settings, "1", attempt=1)
        assert len(server.requests) == 2
    assert generation_path(settings, "1", 1).name == "1@1.json"
    assert second["attempt"] == 1 and first["fingerprint"] != second["fingerprint"]
    assert generation_current(settings, "1", 1) and generation_current(settings, "1", 0)


def test_unknown_problem_id_is_a_clear_error(make_settings):
    settings = make_settings(model="m11", base_url="http://127.0.0.1:9/v1")
    assert not generation_current(settings, "999")
    with pytest.raises(ValueError, match="unknown problem id '999'"):
        run_generate(settings, "999")


def builtin_server(settings):
    return BuiltinModelService._servers[responder_identity(settings)]


@pytest.mark.slow
@pytest.mark.parametrize("mode,protocol", [("tool_use", "openai-chat"), ("naive", "openai-responses")])
def test_gold_end_to_end_writes_the_reference_codes_and_never_asks_twice(make_settings, mode, protocol):
    settings = make_settings(model="gold", split="validation", mode=mode, api_protocol=protocol)
    problems = load_problems(settings.data_paths, "validation")
    assert len(problems) == 15
    for problem in problems:
        record = run_generate(settings, problem.problem_id)
        assert record["status"] == "complete", record["error"]
        assert read_artifact(generation_path(settings, problem.problem_id), "generation") == record
        for step, generated in zip(problem.steps, steps_of(record)):
            assert generated["status"] == "ok"
            assert step.ground_truth_code is not None
            assert json_str(generated["code"]).strip() == remove_top_level_imports(step.ground_truth_code).strip()
            if mode == "tool_use":
                assert [r["status"] for r in json_objects(json_at(generated, "trajectory", "tool_results"))] == ["ok"]
    server = builtin_server(settings)
    assert all(request.headers.get("x-scicode-step") for request in server.requests)
    asked = len(server.requests)
    assert asked == 50 * (2 if mode == "tool_use" else 1)
    for problem in problems:
        assert generation_current(settings, problem.problem_id)
        run_generate(settings, problem.problem_id)
    assert len(server.requests) == asked  # a second run makes zero model calls


def test_replay_model_answers_and_a_changed_replay_file_regenerates(make_settings, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # replay:<file> is resolved against the working directory
    replay = tmp_path / "answers.json"
    replay.write_text(json.dumps({"19.1": "```python\ndef wigner_3j(*a):\n    return 1\n```"}))
    settings = make_settings(model="replay:answers.json", split="validation")
    record = run_generate(settings, "19")
    assert [step["status"] for step in steps_of(record)] == ["ok", "no_code"]
    assert record["status"] == "complete" and generation_current(settings, "19")
    assert json_at(record, "steps", 1, "trajectory", "calls", 0, "retries") == 0

    replay.write_text(json.dumps({"19.1": "```python\ndef wigner_3j(*a):\n    return 20\n```"}))
    assert not generation_current(settings, "19")  # the replay file is the model
    again = run_generate(settings, "19")
    assert "return 20" in json_str(steps_of(again)[0]["code"])


def test_problems_generated_in_threads_share_the_concurrency_limit(make_settings):
    from concurrent.futures import ThreadPoolExecutor

    responder = InFlightCounter(lambda request: answer_defining(asked_function(request)), hold_seconds=0.05)
    with ModelServer(responder) as server:
        settings = make_settings(model="m12", base_url=server.base_url, concurrency="3")
        ids = ["1", "3", "4", "6", "7", "19", "29", "38"]
        with ThreadPoolExecutor(max_workers=8) as pool:
            records = list(pool.map(lambda pid: run_generate(settings, pid), ids))
    assert all(record["status"] == "complete" for record in records)
    assert len(server.requests) == sum(len(steps_of(record)) for record in records) == 13
    assert responder.peak == 3


def test_a_key_refused_at_the_first_real_call_is_the_key_s_stop_not_the_breaker_s(make_settings):
    """After a passing preflight, the very first step's 401 is the documented key line and exit 22 (it was the
    breaker's "model call failed for every problem ... check model= and base_url=")."""
    refused = ErrorReply(401, "Incorrect API key provided", code="invalid_api_key")
    with ModelServer(lambda request: refused) as server:
        settings = make_settings(model="m21", base_url=server.base_url)
        for problem_id in ("1", "3"):  # the second problem too: the refusal trips no breaker
            with pytest.raises(KeyRefused, match="HTTP 401 .*the key was refused mid-run") as raised:
                run_generate(settings, problem_id)
            assert raised.value.exit_code == 22 and "every problem" not in str(raised.value)
        assert len(server.requests) == 2


def test_a_tripped_breaker_speaks_of_the_problems_that_called_the_model_so_far(make_settings):
    """Problems may still be in flight when it trips: it counts those that called the model, never "every problem"."""
    from stages.generate.client import ModelCallError

    settings = make_settings(model="ghost", base_url="http://127.0.0.1:9/v1")
    for _ in range(2):
        BREAKER.record(settings, ModelCallError("HTTP 404 no such model", kind="not_found", status=404))
    with pytest.raises(RunAborted) as raised:
        BREAKER.check(settings)
    assert "each of the 2 problems that called the model so far (model=ghost): HTTP 404" in str(raised.value)
    assert "every problem" not in str(raised.value)


def test_a_key_refused_mid_run_stops_the_run_after_saving_the_problem(make_settings):
    state = {"healthy": True}

    def responder(request):
        if state["healthy"]:
            return answer_defining(asked_function(request))
        return ErrorReply(401, "Incorrect API key provided", code="invalid_api_key")

    with ModelServer(responder) as server:
        settings = make_settings(model="m20", base_url=server.base_url)
        assert run_generate(settings, "1")["status"] == "complete"
        state["healthy"] = False
        with pytest.raises(
            KeyRefused, match="HTTP 401 .*Incorrect API key provided.*the key was refused mid-run"
        ) as raised:
            run_generate(settings, "29")
        assert raised.value.exit_code == 22
        assert len(server.requests) == 2  # one attempt
    record = read_record(generation_path(settings, "29"), "generation")
    assert record["status"] == "error" and "HTTP 401" in record["error"]


CONTEXT_ERROR = ErrorReply(
    400,
    "This model's maximum context length is 8192 tokens. However, you requested 9026 tokens "
    "(9010 in the messages, 16 in the completion).",
    code="context_length_exceeded",
)


def test_a_prompt_too_long_for_the_context_is_final_and_never_asked_again(make_settings):
    responder = StepResponder({"inner_product": CONTEXT_ERROR})
    with ModelServer(responder) as server:
        settings = make_settings(model="m21", base_url=server.base_url)
        record = run_generate(settings, "29")
        assert [step["status"] for step in steps_of(record)] == ["ok", "context_exceeded", "not_generated"]
        assert record["status"] == "complete" and record["error"] is None
        exceeded, later = steps_of(record)[1], steps_of(record)[2]
        exceeded_error = json_str(exceeded["error"])
        assert "maximum context length is 8192 tokens" in exceeded_error
        assert "larger context" in exceeded_error and "`doit clean generate:29 model=m21 run=" in exceeded_error
        later_error = json_str(later["error"])
        assert later["code"] is None and later_error.startswith("not generated:") and "29.2" in later_error
        assert responder.asked == ["normalize", "inner_product"]  # one attempt, later steps never asked
        assert generation_current(settings, "29")
        assert run_generate(settings, "29") == record
        assert len(server.requests) == 2  # a rerun does not ask again
