"""The step prompts are the official SciCode prompts, character for character."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stages.benchmark.problems import problems_by_id
from stages.benchmark.protocol import carried_forward
from stages.generate.prompts import build_step_prompt, fill_template, prompt_fingerprint
from stages.storage.paths import DataPaths


@pytest.fixture()
def data_paths(shared_scicode: Path) -> DataPaths:
    # DataPaths(x).scicode_dir is x/scicode: the shared folder is read in place, never written.
    return DataPaths(shared_scicode.parent)


def raw_problem(shared_scicode: Path, file_name: str, problem_id: str) -> dict:
    for line in (shared_scicode / file_name).read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record["problem_id"] == problem_id:
            return record
    raise AssertionError(f"problem {problem_id} not in {file_name}")


def hand_filled(template: str, steps_part: str, next_part: str, dependencies: str) -> str:
    return (
        template.replace("{problem_steps_str}", steps_part)
        .replace("{next_step_str}", next_part)
        .replace("{dependencies}", dependencies)
    )


CARRIED_29 = [
    "def normalize(v):\n    n = v / np.linalg.norm(v)\n    return n",
    "def inner_product(u, v):\n    p = np.dot(u, v)\n    return p",
]


def test_prompt_with_background_matches_the_official_template_filled_by_hand(shared_scicode, data_paths):
    raw = raw_problem(shared_scicode, "problems_dev.jsonl", "29")
    s1, s2, s3 = raw["sub_steps"]
    steps_part = (
        s1["step_description_prompt"]
        + "\n"
        + s1["step_background"]
        + "\n\n"
        + CARRIED_29[0]
        + "\n\n------\n\n"
        + s2["step_description_prompt"]
        + "\n"
        + s2["step_background"]
        + "\n\n"
        + CARRIED_29[1]
    )
    next_part = (
        s3["step_description_prompt"]
        + "\n"
        + s3["step_background"]
        + "\n\n"
        + s3["function_header"]
        + "\n\n"
        + s3["return_line"]
    )
    template = (shared_scicode / "multistep_template.txt").read_text(encoding="utf-8")
    expected = hand_filled(template, steps_part, next_part, raw["required_dependencies"])

    problem = problems_by_id(data_paths)["29"]
    prompt = build_step_prompt(
        problem, 2, CARRIED_29, data_paths=data_paths, with_background=True, generate_settings_fingerprint="f" * 64
    )
    assert prompt.text == expected
    assert prompt.step_id == "29.3"
    assert "    return B" in prompt.text  # the return line keeps its indentation
    assert raw["problem_description_main"][:60] not in prompt.text


def test_prompt_without_background_uses_the_comment_template_and_descriptions_only(shared_scicode, data_paths):
    raw = raw_problem(shared_scicode, "problems_dev.jsonl", "29")
    s1, s2, s3 = raw["sub_steps"]
    steps_part = (
        s1["step_description_prompt"]
        + "\n\n"
        + CARRIED_29[0]
        + "\n\n------\n\n"
        + s2["step_description_prompt"]
        + "\n\n"
        + CARRIED_29[1]
    )
    next_part = s3["step_description_prompt"] + "\n\n" + s3["function_header"] + "\n\n" + s3["return_line"]
    template = (shared_scicode / "background_comment_template.txt").read_text(encoding="utf-8")
    expected = hand_filled(template, steps_part, next_part, raw["required_dependencies"])

    problem = problems_by_id(data_paths)["29"]
    prompt = build_step_prompt(
        problem, 2, CARRIED_29, data_paths=data_paths, with_background=False, generate_settings_fingerprint="f" * 64
    )
    assert prompt.text == expected
    assert s1["step_background"][:40] not in prompt.text


def test_first_step_has_an_empty_steps_section(shared_scicode, data_paths):
    raw = raw_problem(shared_scicode, "problems_dev.jsonl", "29")
    s1 = raw["sub_steps"][0]
    template = (shared_scicode / "multistep_template.txt").read_text(encoding="utf-8")
    next_part = (
        s1["step_description_prompt"]
        + "\n"
        + s1["step_background"]
        + "\n\n"
        + s1["function_header"]
        + "\n\n"
        + s1["return_line"]
    )
    expected = hand_filled(template, "", next_part, raw["required_dependencies"])
    problem = problems_by_id(data_paths)["29"]
    assert fill_template(template, problem, 0, [], True) == expected


def test_prefilled_step_is_carried_verbatim_and_never_prompted(shared_scicode, data_paths):
    problem = problems_by_id(data_paths)["13"]
    official = (shared_scicode / "13.6.txt").read_text(encoding="utf-8")
    step6 = problem.steps[5]
    assert step6.step_id == "13.6" and step6.prefilled
    # whatever the "generated" code says, the official class is carried whole, in either carry mode
    assert carried_forward(step6, "def unrelated(): pass", data_paths, "full") == official
    assert carried_forward(step6, "def unrelated(): pass", data_paths, "definition") == official

    carried = [f"def helper_{i}():\n    return {i}" for i in range(5)] + [official]
    prompt = build_step_prompt(
        problem, 6, carried, data_paths=data_paths, with_background=True, generate_settings_fingerprint="0" * 64
    )
    raw = raw_problem(shared_scicode, "problems_test.jsonl", "13")
    s6, s7 = raw["sub_steps"][5], raw["sub_steps"][6]
    last_earlier = (
        "return 4\n\n------\n\n" + s6["step_description_prompt"] + "\n" + s6["step_background"] + "\n\n" + official
    )
    assert (last_earlier + "\n\nNEXT STEP - PROBLEM STEP AND FUNCTION HEADER:") in prompt.text
    assert prompt.text.split("NEXT STEP")[1].count(s7["function_header"]) == 1
    with pytest.raises(ValueError, match="13.6 is an official prefilled step"):
        build_step_prompt(
            problem, 5, carried[:5], data_paths=data_paths, with_background=True, generate_settings_fingerprint="0" * 64
        )


def test_carry_full_carries_the_whole_code_and_definition_only_the_named_one(data_paths):
    problem = problems_by_id(data_paths)["29"]
    code = "\n\nSCALE = 2\n\ndef helper(x):\n    return x\n\ndef normalize(v):\n    return helper(v) / SCALE\n"
    assert carried_forward(problem.steps[0], code, data_paths, "full") == code
    assert (
        carried_forward(problem.steps[0], code, data_paths, "definition")
        == "def normalize(v):\n    return helper(v) / SCALE"
    )
    assert carried_forward(problem.steps[0], None, data_paths, "full") == ""
    assert carried_forward(problem.steps[0], None, data_paths, "definition") == ""


def test_step_prompt_names_what_the_header_defines(data_paths):
    problem = problems_by_id(data_paths)["29"]
    prompt = build_step_prompt(
        problem, 0, [], data_paths=data_paths, with_background=True, generate_settings_fingerprint="0" * 64
    )
    assert prompt.defines == "normalize"


def test_prompt_fingerprint_depends_on_text_and_settings():
    a = prompt_fingerprint("prompt", "1" * 64)
    assert a == prompt_fingerprint("prompt", "1" * 64)
    assert a != prompt_fingerprint("prompt ", "1" * 64)
    assert a != prompt_fingerprint("prompt", "2" * 64)
