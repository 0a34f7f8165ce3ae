"""Installed package versions, read from package metadata (no import, so cheap in up-to-date checks)."""

from __future__ import annotations

from collections.abc import Iterable
from importlib import metadata


def package_versions(names: Iterable[str]) -> dict[str, str]:
    """name -> installed version, or "absent"."""
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions
