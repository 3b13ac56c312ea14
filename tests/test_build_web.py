"""build/web is rebuilt only when what it is made from changed (build.py): two test workers each build at
their start, and a rebuild under the other worker's running relay once took a join's files away."""

from __future__ import annotations

import build
from tests.conftest import Artifacts


def test_an_unchanged_build_leaves_the_served_files_alone(artifacts: Artifacts) -> None:
    page = build.BUILD / "web" / "index.html"
    before = page.stat()
    build.build()  # under the build lock, as the `artifacts` fixture builds
    after = page.stat()
    # the change time, which copy2 cannot carry over (it keeps the source's mtime) and a rebuild sets anew
    assert after.st_ctime_ns == before.st_ctime_ns


def test_every_served_file_is_made_from_a_source_the_stamp_names(artifacts: Artifacts) -> None:
    """A file copied into build/web from outside web_sources() would go stale unseen by the stamp."""
    web = build.BUILD / "web"
    served = [p for p in web.rglob("*") if p.is_file() and p.relative_to(web).parts[0] not in
              ("pyodide", "vendor", "wheels")]  # pinned packages (by version) and the wheel (from wheel_sources)
    names = {p.name for p in build.web_sources()}
    assert served and {p.name for p in served} <= names, sorted({p.name for p in served} - names)
    wheel = build.BUILD / "web" / "wheels"
    assert any(p.name.startswith("ce_capsule-") for p in wheel.iterdir())
    assert set(build.wheel_sources()) <= set(build.web_sources())
