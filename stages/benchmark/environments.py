"""The grading environments a published protocol names (environments.json): each one's name and package pins."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

ENVIRONMENTS_FILE = Path(__file__).with_name("environments.json")


@dataclass(frozen=True)
class EnvironmentPins:
    """One protocol environment: its name (the `environments=` name it is given) and its pinned packages."""

    name: str
    packages: tuple[tuple[str, str], ...]  # (distribution, version), in the file's order

    @property
    def requirements(self) -> tuple[str, ...]:
        """`name==version` for pip."""
        return tuple(f"{package}=={version}" for package, version in self.packages)


@lru_cache(maxsize=1)
def protocol_environments() -> tuple[EnvironmentPins, ...]:
    """SciCode-Verified's grading environments, in the order its protocol tries them (this package's own file)."""
    table = json.loads(ENVIRONMENTS_FILE.read_text(encoding="utf-8"))
    return tuple(
        EnvironmentPins(str(entry["name"]), tuple((str(k), str(v)) for k, v in entry["packages"].items()))
        for entry in table["environments"]
    )
