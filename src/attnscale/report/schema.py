"""JSON Schema of report.json: the contract the report, the tests and other tools read."""

from ..claims import PENDING, ROLES, STATES, VERDICTS

PART = {
    "type": "object",
    "required": ["key", "text", "role", "lab", "state", "measured", "threshold"],
    "properties": {
        "key": {"type": "string"}, "text": {"type": "string", "minLength": 1}, "role": {"enum": list(ROLES)},
        "lab": {"type": "string"}, "setting": {"type": "string"}, "state": {"enum": list(STATES)},
        "measured": {"type": "string"}, "threshold": {"type": "string"},
        "settings": {"type": "array", "items": {"type": "object", "required": ["where", "state"],
                                                "properties": {"state": {"enum": list(STATES)}}}},
        "moved": {"type": "object", "additionalProperties": {"enum": list(STATES)}},
        "decide": {"type": "string"}, "note": {"type": "string"}, "direction": {"type": "string"},
    },
}

CLAIM = {
    "type": "object",
    "required": ["id", "claim", "verdict", "evidence", "experiments", "figures", "numbers", "parts"],
    "properties": {
        "id": {"type": "string", "pattern": "^C[0-9]{2}$"},
        "claim": {"type": "string", "minLength": 1},
        "source": {"type": "string"},  # the interview answer's own sentence
        "verdict": {"enum": [*VERDICTS, PENDING]},
        "verdict_line": {"type": "string", "minLength": 1},
        "evidence": {"type": "string"},
        "experiments": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "figures": {"type": "array", "items": {"type": "string", "pattern": "^figures/"}},
        "numbers": {"type": "object", "additionalProperties": {"type": ["number", "string", "null", "boolean"]}},
        "commands": {"type": "array", "items": {"type": "string", "pattern": "^attnscale "}},
        "parts": {"type": "array", "items": PART, "minItems": 1},
        "margins": {"type": "array", "items": {"type": "object", "required": ["part", "move", "state", "verdict"]}},
        "margin_text": {"type": "string"},
    },
}

STATEMENT = {**CLAIM, "properties": {**CLAIM["properties"], "id": {"type": "string", "pattern": "^L[0-9]+$"}}}

REPORT_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["attnscale_version", "preset", "seed", "device", "started", "seconds", "claims", "experiments"],
    "properties": {
        "attnscale_version": {"type": "string"},
        "preset": {"enum": ["quick", "full"]},
        "seed": {"type": "integer"},
        "device": {"enum": ["cpu", "cuda"]},
        "started": {"type": "string", "format": "date-time"},
        "seconds": {"type": "number", "minimum": 0},
        "claims": {"type": "array", "items": CLAIM, "minItems": 18, "maxItems": 18},
        "statements": {"type": "array", "items": STATEMENT},
        "machine": {"type": "string"},
        "experiments": {"type": "object", "additionalProperties": {"type": "object"}},
        "labs": {"type": "object", "additionalProperties": {
            "type": "object", "required": ["seconds", "cached"],
            "properties": {"seconds": {"type": "number"}, "cached": {"type": "boolean"}}}},
    },
}
