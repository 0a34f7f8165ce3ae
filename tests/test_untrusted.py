"""Untrusted text always becomes text that every writer accepts."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from stages.untrusted import REPLACEMENT, valid_text


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
