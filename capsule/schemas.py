"""Writes the JSON Schemas of the data model into capsule/schema/ (shipped in the repository and the
wheel). A test regenerates them and fails when the shipped files have drifted from capsule/model.py.

    python -m capsule.schemas
"""

from __future__ import annotations

import json
from pathlib import Path

from capsule.model import RECORDS
from capsule.typed import json_schema

SCHEMA_DIR = Path(__file__).resolve().parent / "schema"


def rendered() -> dict[str, str]:
    return {f"{kind}.schema.json": json.dumps(json_schema(cls, title=f"ce-bench {kind} v1"), indent=2) + "\n"
            for kind, cls in RECORDS.items()}


def main() -> None:
    SCHEMA_DIR.mkdir(exist_ok=True)
    for name, text in rendered().items():
        (SCHEMA_DIR / name).write_text(text)
        print(f"wrote {SCHEMA_DIR / name}")


if __name__ == "__main__":
    main()
