"""The fingerprint an artifact carries and what it covers, the two keys every fingerprinted artifact shares
(`schemas/common.schema.json`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from stages.storage.json_values import FrozenObject, JSONObject, freeze_object, text, thaw_object

if TYPE_CHECKING:
    from stages.config.fingerprints import FingerprintParts


@dataclass(frozen=True)
class Stamp:
    """`fingerprint` (decides staleness) and `fingerprint_parts` (None: written before parts were stored)."""

    fingerprint: str
    parts: FrozenObject | None = None

    @classmethod
    def of(cls, parts: FingerprintParts) -> Stamp:
        return cls(parts.value, freeze_object(parts.parts()))

    @classmethod
    def from_record(cls, record: FrozenObject) -> Stamp:
        parts = record.get("fingerprint_parts")
        return cls(text(record.get("fingerprint")), parts if isinstance(parts, Mapping) else None)

    def to_record(self) -> JSONObject:
        record: JSONObject = {"fingerprint": self.fingerprint}
        if self.parts is not None:
            record["fingerprint_parts"] = thaw_object(self.parts)
        return record
