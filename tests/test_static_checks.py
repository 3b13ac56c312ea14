"""ruff and mypy (strict) over the Python sources, through the same script developers run; the import
directions between our packages."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

from tests.conftest import ROOT


def test_scripts_check_passes() -> None:
    result = subprocess.run([str(ROOT / "scripts" / "check")], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr


# Who may import whom among our packages (ARCHITECTURE.md, "Layout"): the capsule's Python is pure and shared
# with browsers (Pyodide) so it imports nothing of ours; the SDK only the data model; node and relay meet only
# in the composition root (cebench), so each can be deployed, tested and changed without the other.
ALLOWED_IMPORTS: dict[str, set[str]] = {
    "capsule": set(),
    "common": {"capsule"},
    "fabric": {"capsule"},
    "web": {"capsule", "common", "fabric"},
    "host_runner": {"capsule", "common"},
    "cebench": {"capsule", "common", "fabric", "web", "host_runner"},
}


def imported_packages(path: Path) -> set[str]:
    """Top-level names of every import in a file, function-level imports included."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_import_directions() -> None:
    ours = set(ALLOWED_IMPORTS)
    wrong = []
    for package, allowed in ALLOWED_IMPORTS.items():
        for path in sorted((ROOT / package).rglob("*.py")):
            for name in sorted((imported_packages(path) & ours) - allowed - {package}):
                wrong.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not wrong, "\n".join(wrong)
