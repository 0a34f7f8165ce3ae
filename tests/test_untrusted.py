"""Untrusted text always becomes text that every writer accepts."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stages.untrusted import REPLACEMENT, UntrustedJSONError, parse_json, valid_data, valid_text
from tests.hostile import hostile_text


def test_a_lone_surrogate_becomes_the_replacement_character() -> None:
    assert valid_text("a\ud800b\udfff") == f"a{REPLACEMENT}b{REPLACEMENT}"


def test_valid_text_is_returned_unchanged() -> None:
    text = "naïve 𝜋 \ufffd\ufffd\ufffd\x00"
    assert valid_text(text) is text


def test_objects_become_their_str_and_a_failing_str_a_placeholder() -> None:
    class Unprintable:
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert valid_text(12) == "12"
    assert valid_text(Unprintable()) == "<unprintable Unprintable>"


@given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=())))
def test_any_str_encodes_after_valid_text(text: str) -> None:
    cleaned = valid_text(text)
    cleaned.encode("utf-8")
    assert len(cleaned) == len(text)
    assert json.loads(json.dumps(cleaned, ensure_ascii=False)) == cleaned


@dataclass(frozen=True)
class Call:
    name: str
    arguments: tuple[str, ...]


def test_valid_data_cleans_every_string_of_a_record_and_keeps_clean_records_as_they_are() -> None:
    record = {"a\ud800": [Call("x\udfff", ("ok", "\ud801"))], "n": 3}
    cleaned = valid_data(record)
    assert cleaned == {f"a{REPLACEMENT}": [Call(f"x{REPLACEMENT}", ("ok", REPLACEMENT))], "n": 3}
    clean = {"a": [Call("x", ("ok",))], "n": 3}
    assert valid_data(clean) is clean


def test_valid_data_of_a_structure_deeper_than_the_recursion_limit_comes_back_unchanged() -> None:
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    assert valid_data(deep) is deep


@pytest.mark.parametrize(
    ("text", "message"),
    [("[" * 100_000, "nested too deeply"), ("{", "not valid JSON"), ('"' + "x" * 20 + '"', "more than the 10")],
)
def test_parse_json_refuses_with_one_error_class(text: str, message: str) -> None:
    with pytest.raises(UntrustedJSONError, match=message):
        parse_json(text, 10 if len(text) < 100 else 10**6)


@given(hostile_text())
def test_parse_json_is_total(text: str) -> None:
    try:
        parse_json(text, 200_000)
    except UntrustedJSONError:
        pass
