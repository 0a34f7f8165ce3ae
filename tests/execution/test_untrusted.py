"""Untrusted text always becomes text that every writer accepts."""

from __future__ import annotations

import html as htmllib
import json
import unicodedata
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from stages.execution.untrusted import (
    MAX_DATA_DEPTH,
    REPLACEMENT,
    TOO_DEEP,
    UntrustedJSONError,
    parse_json,
    shown,
    valid_data,
    valid_text,
)
from tests.support.hostile import ESCAPES, FAKE_TABLE, hostile_text


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


def test_valid_data_cuts_structures_nested_too_deeply_for_the_json_writers() -> None:
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    cleaned = valid_data({"output_items": deep})
    json.dumps(cleaned, indent=2)  # the artifact writer's encoder recurses in Python
    level = cleaned["output_items"]  # depth 1 (the dict is depth 0)
    for _ in range(MAX_DATA_DEPTH - 1):
        level = level[0]
    assert level == TOO_DEEP  # what stood at depth MAX_DATA_DEPTH


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


# -- shown: what a reader of summary.md, compare.md or the terminal sees -------------------------------------

HIDDEN_CATEGORIES = {"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"}


def hidden_characters(text: str, allowed: str = "") -> list[str]:
    return [char for char in text if char not in allowed and unicodedata.category(char) in HIDDEN_CATEGORIES]


def rendered(markdown_text: str) -> str:
    """The HTML a CommonMark viewer with GitHub's tables and raw HTML on renders."""
    return MarkdownIt("commonmark", {"html": True}).enable("table").render(markdown_text)


def test_escape_sequences_are_shown_as_visible_escapes() -> None:
    text = shown(ESCAPES)
    assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text
    assert text.startswith("\\x1b[1A\\x1b[2K- 78.2 (pass)\\x1b]52;c;") and "\\x07" in text and "\\x9b31m" in text


def test_markdown_reasons_are_code_spans_whatever_they_hold() -> None:
    assert shown(FAKE_TABLE, markdown=True) == f"`{FAKE_TABLE}`"
    assert shown("a `` b", markdown=True) == "```a `` b```"
    assert shown("`x` ", markdown=True) == "`` `x` ``"
    assert shown("line one\n## Scores\n| 15/15 |", markdown=True) == "`line one ## Scores | 15/15 |`"
    html = rendered(f"- 78.2 (fail): {shown(FAKE_TABLE + ESCAPES, markdown=True)}\n")
    assert "<table" not in html and "&lt;table&gt;" in html and html.count("<code>") == 1


def test_shown_text_is_bounded() -> None:
    assert shown("x" * 1000) == "x" * 297 + "..."
    assert (
        shown("\x1b" * 1000, limit=11) == "\\x1b\\x1b..." and shown("\x1b" * 9, limit=10) == "\\x1b..."
    )  # an escape is never cut in half
    tail = shown("a" * 30_000 + "\nValueError: boom", lines=True)
    assert len(tail) == 20_000 and tail.startswith("...") and tail.endswith("\nValueError: boom")


@given(hostile_text())
def test_shown_is_one_visible_bounded_line(text: str) -> None:
    line = shown(text)
    assert "\n" not in line and not hidden_characters(line) and len(line) <= 300
    kept = shown(text, lines=True)
    assert not hidden_characters(kept, allowed="\n\t") and len(kept) <= 20_000


@given(hostile_text())
def test_a_markdown_reason_renders_as_one_code_span_of_its_text(text: str) -> None:
    span = shown(text, markdown=True)
    html = rendered(f"- 1.1 (fail): {span}\n")
    if shown(text) == "":
        assert "<code>" not in html
        return
    inner = html.removeprefix("<ul>\n<li>1.1 (fail): <code>").removesuffix("</code></li>\n</ul>\n")
    assert inner != html and "<code>" not in inner and "<" not in inner.replace("&lt;", "")
    assert htmllib.unescape(inner) == shown(text)
