"""The fingerprint an artifact carries and what it covers, the two keys every fingerprinted artifact shares
(`schemas/common.schema.json`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from stages.records.declared import Declared, key
from stages.records.schema_of import ref
from stages.storage.json_values import FrozenObject, freeze_object

if TYPE_CHECKING:
    from stages.config.fingerprints import FingerprintParts


@dataclass(frozen=True)
class Stamp(Declared):
    """`fingerprint` (decides staleness) and `fingerprint_parts` (None: written before parts were stored)."""

    fingerprint: str = field(metadata=key(schema=ref("sha256")))
    parts: FrozenObject | None = field(
        default=None, metadata=key("fingerprint_parts", omit="if_none", schema=ref("fingerprint_parts"))
    )

    @classmethod
    def of(cls, parts: FingerprintParts) -> Stamp:
        return cls(parts.value, freeze_object(parts.parts()))
