"""Write `docs/configuration.md`, the configuration page, from the settings' declarations.

    python -m scripts.configuration_page [--check] [--page FILE]

Every row comes from one `Settings` field and its `Declared` record (`stages.config.settings`): the name, the
default, what it accepts, which stages' fingerprints cover it, whether summary.md records it, whether its value is
kept out of config.json, and its doc line. `--check` writes nothing and exits 1 when the committed page differs.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import MISSING, Field, fields
from pathlib import Path
from typing import Any

from scripts.generated_page import page_main
from stages.config.declaration import Declared
from stages.config.settings import DECLARED, GROUPS, MAX_SECONDS, PARAM_BLOCKS, Settings
from stages.config.values import PLAIN_VALUE, NumberCoercer

PAGE = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"

# How each field type reads on the page, where the setting has no fixed list of values.
TYPE_WORDS: dict[str, str] = {
    "str": "text",
    "float": "number",
    "int": "whole number",
    "bool": "true / false",
    "int | None": "whole number, or empty",
    "float | None": "number, or empty",
    "tuple[str, ...]": "comma or JSON list",
    "Mapping[str, JSONValue]": "JSON object",
}
SECRECY_NOTES: dict[str, str] = {
    "url credentials": "credentials in the URL are redacted in config.json",
    "secret-named keys": "values of secret-looking keys are redacted in config.json",
}

INTRODUCTION = f"""# Configuration

This page is generated from the settings' declarations (`stages/config/settings.py`) by
`python -m scripts.configuration_page`; a test fails when it is out of date. Do not edit it by hand.

Variables are `name=value` words on the doit command line, over an optional TOML file (`config=path.toml`,
default `scicode.toml` if present), over built-in defaults. JSON blocks {" and ".join(f"`{b}='{{...}}'`" for b in PARAM_BLOCKS)}
hold any of the variables below; `model_params='{{...}}'` holds request parameters passed to the API (temperature,
max_tokens, top_p, seed, reasoning_effort ...; `temperature=0` on its own is an unknown variable whose error shows
that form). Blocks are deep-merged; the command line wins. `protocol=` sets the settings a published protocol fixes
beneath everything given (given values win; its request parameters are merged under `model_params`). Unknown names
and invalid values stop the run before any work with one line naming the variable, the bad value and what is
allowed, the closest known names or values first ("did you mean ...") (exit 3). Every value, in a file, a block or
a word, is plain data a run can write and send: {PLAIN_VALUE}; every number within its bounds below (a deadline at
most {MAX_SECONDS:g} s, one day, which every socket and process timer accepts).

Columns: **accepts** is the type or the allowed values; **fingerprint** names the stages whose output the setting
changes (a change makes those stages' artifacts stale; "when set" means only while it applies and differs from its
default, so artifacts written before the setting existed stay current); **summary** marks the settings summary.md
records among those that shape the scores. Settings no fingerprint covers change how a run goes, never what it
produces. The API key itself is never a setting: it is read from the environment variable `api_key_env` names.
"""


def default_text(item: Field[Any], record: Declared) -> str:
    if record.shown_default:
        return record.shown_default
    if item.default is not MISSING:
        value = item.default
    elif callable(item.default_factory):
        value = item.default_factory()
    else:
        raise ValueError(f"the setting {item.name} has no default")
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(value) or '""'
    return '""' if value == "" else str(value)


def accepts_text(item: Field[Any], record: Declared) -> str:
    if record.allowed:
        return ", ".join(f"`{value}`" for value in record.allowed)
    if isinstance(record.coerce, NumberCoercer):
        return record.coerce.accepts.removeprefix("a ") + (", or empty" if "None" in str(item.type) else "")
    return TYPE_WORDS.get(str(item.type), str(item.type))


def fingerprint_text(record: Declared) -> str:
    always = list(record.stages)
    when_set = [f"{stage} (when set)" for stage in record.stages_when]
    return ", ".join(always + when_set) or "-"


def meaning_text(record: Declared) -> str:
    note = SECRECY_NOTES.get(record.secrecy)
    return record.doc + (f" ({note})" if note else "")


def group_rows(group: str) -> Iterator[str]:
    for item in fields(Settings):
        record = DECLARED[item.name]
        if record.group != group:
            continue
        cells = (
            f"`{item.name}`",
            default_text(item, record),
            accepts_text(item, record),
            fingerprint_text(record),
            "yes" if record.recorded else "",
            meaning_text(record),
        )
        yield "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def configuration_page() -> str:
    """The whole page, as the declarations say it."""
    sections = [INTRODUCTION]
    for group in GROUPS:
        sections.append(f"## {group}\n")
        sections.append("| variable | default | accepts | fingerprint | summary | meaning |\n|---|---|---|---|---|---|")
        sections.append("\n".join(group_rows(group)) + "\n")
    return "\n".join(sections)


def main(argv: list[str] | None = None) -> int:
    return page_main(
        argv,
        description="Write docs/configuration.md from the settings' declarations.",
        default=PAGE,
        build=configuration_page,
        module="scripts.configuration_page",
    )


if __name__ == "__main__":
    sys.exit(main())
