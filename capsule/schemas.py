"""Writes the JSON Schemas of the data model and of the capsule's ProbeReport into capsule/schema/ (shipped
in the repository and the wheel). A test regenerates them and fails when the shipped files have drifted
from capsule/model.py and capsule/probe_report.py.

    python -m capsule.schemas
"""

from __future__ import annotations

import json
from pathlib import Path

from capsule.job_records import JobManifestV2
from capsule.model import REGISTRY
from capsule.probe_report import ProbeReport
from capsule.typed import json_schema

# the signed records, and the capsule's output
DOCUMENTS: dict[str, type] = {**{k: v.cls for k, v in REGISTRY.items()}, "ProbeReport": ProbeReport,
                              "JobManifest": JobManifestV2}

SCHEMA_DIR = Path(__file__).resolve().parent / "schema"


def rendered() -> dict[str, str]:
    return {f"{kind}.schema.json": json.dumps(json_schema(cls, title=f"ce-bench {kind} v1"), indent=2) + "\n"
            for kind, cls in DOCUMENTS.items()}


def main() -> None:
    SCHEMA_DIR.mkdir(exist_ok=True)
    for name, text in rendered().items():
        (SCHEMA_DIR / name).write_text(text)
        print(f"wrote {SCHEMA_DIR / name}")


if __name__ == "__main__":
    main()
