"""The definitions every artifact schema shares (`schemas/common.schema.json`, referenced as
`common.schema.json#/$defs/<name>`): what no single record declares (the format's version, a digest's shape, what a
fingerprint covers) is stated here once, as data; a shared record's definition is its declaration's schema (an
endpoint: `EndpointUse`, whose `steps` only a summary's endpoints carry)."""

from __future__ import annotations

from stages.config.fingerprints import PART_NAMES
from stages.records.endpoint import EndpointUse
from stages.records.schema_of import DRAFT, schema_of
from stages.storage.artifacts import SCHEMA_VERSION
from stages.storage.json_values import JSONObject

SHA256: JSONObject = {"type": "string", "pattern": "^[0-9a-f]{64}$"}

FINGERPRINT_PARTS: JSONObject = {
    "type": "object",
    "description": "what the fingerprint covers, by named part (stages/config/fingerprints.py); absent in artifacts written "
    "before parts were stored",
    "required": list(PART_NAMES),
    "additionalProperties": False,
    "properties": {
        "settings": {"type": "object", "description": "the stage's settings slice by name, secrets redacted"},
        "inputs": {
            "type": "object",
            "additionalProperties": {"type": ["string", "null"]},
            "description": "a digest per input (null: absent)",
        },
        "code": {"type": "object", "additionalProperties": {"type": "string"}},
        "libraries": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}


def common_schema() -> JSONObject:
    """`schemas/common.schema.json`."""
    return {
        "$schema": DRAFT,
        "title": "common: the parts every artifact schema shares (referenced as common.schema.json#/$defs/<name>)",
        "$defs": {
            "schema_version": {
                "const": SCHEMA_VERSION,
                "description": "the artifact format (stages.storage.artifacts.SCHEMA_VERSION)",
            },
            "sha256": SHA256,
            "endpoint": schema_of(EndpointUse),
            "fingerprint_parts": FINGERPRINT_PARTS,
        },
    }
