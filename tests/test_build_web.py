"""build/web is rebuilt only when what it is made from changed (build.py): two test workers each build at
their start, and a rebuild under the other worker's running relay once took a join's files away."""

from __future__ import annotations

import zipfile

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
    wheels = [p for p in (web / "wheels").iterdir() if p.name.startswith("ce_capsule-")]
    assert len(wheels) == 1, wheels
    with zipfile.ZipFile(wheels[0]) as wheel:  # every module the browser imports comes from a named source
        packed = {n for n in wheel.namelist() if not n.split("/")[0].endswith(".dist-info")}
    stamped = {p.relative_to(build.ROOT).as_posix() for p in build.web_sources()}
    assert packed and packed <= stamped, sorted(packed - stamped)
