"""`ce-bench` end to end, as a server operator runs it: real wasmtime-py, real lavapipe WebGPU adapter,
real files and sockets."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from capsule.signing import verify_record
from host_runner import facts
from host_runner.facts import thp_mode
from host_runner.wasm import HugePageAdvice
from tests.cli_runs import assert_user_error, ce_bench
from tests.conftest import Artifacts
from tests.relay_process import RelayProcess, free_port
from tests.standin_relay import StandinRelay

CLI = str(Path(sys.executable).parent / "ce-bench")
FAST = ["--no-jitter", "--no-gpu", "--budget-ms", "500"]


def test_run_end_to_end_with_gpu(tmp_path: Path, artifacts: Artifacts) -> None:
    """The issue's Done-when: `ce-bench run --out profile.json && ce-bench verify profile.json`, GPU included."""
    home = tmp_path / "home"
    out = tmp_path / "profile.json"
    result = ce_bench(home, "run", "--out", str(out), "--no-jitter", "--budget-ms", "1500", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    verified = ce_bench(home, "verify", str(out))
    assert verified.returncode == 0 and "valid NodeProfile" in verified.stdout
    profile: dict[str, Any] = json.loads(out.read_text())
    verify_record("NodeProfile", profile)
    cpu, ev = profile["cpu"], profile["evidence"]
    assert cpu["gflops_fp32"] > 0 and cpu["mem_bw_gbps"] > 0
    assert ev["cpu"]["instances"] == cpu["cores"] == len(ev["cpu"]["gflops_fp32"]["instances"])
    assert [step["instances"] for step in ev["cpu"]["scaling"]][:2] == [1, 2]  # the count was measured
    assert ev["cpu"]["gflops_fp32"]["single_core"] > 0
    assert_pages_note(ev["cpu"]["mem_bw_gbps"]["pages"], refused=False)  # paging decides the figure (issue 9)
    assert profile["llm"]["tokens_per_sec"] > 0 and profile["llm"]["ref_model"] == "ce-ref-15m-f32"
    assert profile["storage"]["write_mbps"] > 0 and profile["storage"]["read_mbps"] > 0
    assert profile["capsule"]["sha256"] == hashlib.sha256(artifacts.capsule.read_bytes()).hexdigest()
    assert profile["runtime"]["kind"] == "server" and profile["runtime"]["wasm"] is True
    assert ev["plan"]["beacon_source"] == "local"
    # GPU: lavapipe (installed by scripts/setup) through wgpu, each product checked against numpy
    assert profile["gpus"], f"no GPU measured: {ev['gpu_notes']}"
    gpu, gev = profile["gpus"][0], ev["gpus"][0]
    assert gpu["fp32_tflops"] > 0 and gev["fp32_matmul"]["verified"] is True
    assert gev["fp32_matmul"]["max_rel_error"] < 1e-4
    assert gev["fp16_matmul"]["verified"] is True and gpu["fp16_tflops"] > 0  # lavapipe has shader-f16
    assert gev["copy_bandwidth"]["verified"] is True
    assert gpu["vram_mb"] is None and "no dedicated VRAM" in gev["vram_null_reason"]
    # the key lives 0600 under the config dir; no scratch file is left behind
    assert stat.S_IMODE((home / "node.key").stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "profile.json"]
    for words in ("CPU fp32", "GFLOP/s", "tokens/s", "signed NodeProfile written"):
        assert words in result.stderr


def assert_pages_note(pages: str, refused: bool) -> None:
    """evidence.cpu.mem_bw_gbps.pages says "transparent huge pages" only when every madvise(MADV_HUGEPAGE) was
    accepted and the THP mode allows them; a refusal is named with its errno."""
    mode = thp_mode()
    if mode in ("", "never"):
        assert pages.startswith("4 KiB pages ("), (mode, pages)
    elif not refused:
        assert pages.startswith("transparent huge pages (MADV_HUGEPAGE accepted for all "), (mode, pages)
        assert f"THP mode {mode})" in pages, pages
    else:
        assert pages.startswith("not known: " if mode == "always" else "4 KiB pages: "), (mode, pages)
        assert "the kernel refused MADV_HUGEPAGE for " in pages and "(EINVAL x" in pages, pages


# Failure injection, test-only (nothing in the product looks for it): an LD_PRELOAD library whose madvise
# refuses MADV_HUGEPAGE with EINVAL, as a kernel built without THP or a seccomp filter would, and passes
# every other advice to the kernel. host_runner/wasm.py reaches madvise through libc (ctypes), so it gets
# this one; wasmtime's own memory calls are direct syscalls and are untouched.
REFUSE_HUGEPAGE_C = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
int madvise(void *addr, size_t len, int advice) {
    if (advice == MADV_HUGEPAGE) { errno = EINVAL; return -1; }
    return (int)syscall(SYS_madvise, addr, len, advice);
}
"""


def test_evidence_names_a_refused_huge_page_advice(tmp_path: Path) -> None:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    assert cc, "a C compiler builds the madvise failure injection"
    (tmp_path / "refuse.c").write_text(REFUSE_HUGEPAGE_C)
    shim = tmp_path / "refuse.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(shim), str(tmp_path / "refuse.c")], check=True)
    out = tmp_path / "profile.json"
    result = ce_bench(tmp_path / "home", "run", "--out", str(out), *FAST, cwd=tmp_path,
                      env_extra={"LD_PRELOAD": str(shim)})
    assert result.returncode == 0, result.stderr
    assert_pages_note(json.loads(out.read_text())["evidence"]["cpu"]["mem_bw_gbps"]["pages"], refused=True)


@pytest.mark.parametrize("mode", ["always", "madvise", "never", ""])
def test_pages_note_follows_the_kernels_answers(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The note from each THP mode and each mix of answers (a partial refusal is no huge-page claim)."""
    monkeypatch.setattr(facts, "thp_mode", lambda: mode)
    notes = {}
    for accepted, refused in ((3, 0), (2, 1), (0, 3), (0, 0)):
        advice = HugePageAdvice()
        for _ in range(accepted):
            advice.record(True)
        for _ in range(refused):
            advice.record(False, "EPERM")
        notes[accepted, refused] = facts.huge_pages_note(advice)
    if mode in ("", "never"):
        assert all(note.startswith("4 KiB pages (") for note in notes.values()), notes
        return
    assert notes[3, 0] == f"transparent huge pages (MADV_HUGEPAGE accepted for all 3 capsule memories; THP mode {mode})"
    refusal = "not known: " if mode == "always" else "4 KiB pages: "
    assert notes[2, 1].startswith(refusal + "the kernel refused MADV_HUGEPAGE for 1 of 3 capsule memories (EPERM x1)")
    assert notes[0, 3].startswith(refusal + "the kernel refused MADV_HUGEPAGE for 3 of 3 capsule memories (EPERM x3)")
    assert notes[0, 0].startswith("not known: no capsule memory was advised"), notes


def test_same_node_id_across_runs_and_rotate(tmp_path: Path) -> None:
    first = ce_bench(tmp_path, "keys", "show").stdout.split()[1]
    assert first == ce_bench(tmp_path, "keys", "show").stdout.split()[1]
    rotated = ce_bench(tmp_path, "keys", "rotate")
    new = rotated.stdout.split()[2]
    assert new != first and new.startswith("12D3KooW") and "previous key kept at" in rotated.stdout


def test_a_name_that_is_no_label_is_refused_before_anything_runs(tmp_path: Path) -> None:
    """--name (issue 47): 1-64 characters a page and a terminal show as text; anything else is one line, exit 2."""
    for bad in (" padded", "x" * 65, "two\nlines", "right\u202eto left", "bell\x07"):
        result = ce_bench(tmp_path, "run", "--out", str(tmp_path / "p.json"), "--name", bad, cwd=tmp_path)
        assert result.returncode == 2 and "expected 1-64 characters, no control characters" in result.stderr, bad
        assert "Traceback" not in result.stderr and not (tmp_path / "p.json").exists()
    from_env = ce_bench(tmp_path, "run", "--out", str(tmp_path / "p.json"), cwd=tmp_path,
                        env_extra={"CE_NODE_NAME": "tab\there"})  # CE_NODE_NAME is checked the same way
    assert from_env.returncode == 2 and "expected 1-64 characters" in from_env.stderr, from_env.stderr


def test_relay_beacon_and_report(tmp_path: Path) -> None:
    """Against the real relay: the beacon comes from it, the profile is verified and stored by it."""
    with RelayProcess(tmp_path / "relay") as relay:
        result = ce_bench(tmp_path, "run", "--out", str(tmp_path / "p.json"), "--relay", relay.url, *FAST,
                          "--name", "rack 7", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert "reported to" in result.stderr and "(201)" in result.stderr
        profile = json.loads((tmp_path / "p.json").read_text())
        assert profile["name"] == "rack 7"  # the operator's name, signed with the rest (issue 47)
        status, node, _ = relay.get(f"/v1/nodes/{profile['node_id']}")
        assert status == 200 and node["profile"] == profile
        _, beacon, _ = relay.get("/beacon")
        assert profile["beacon"]["relay"] == beacon["relay"]
        assert profile["evidence"]["plan"]["beacon_source"] == f"relay {relay.url}"
        assert profile["gpus"] == [] and "disabled" in profile["evidence"]["gpu_notes"][0]


def test_unreachable_relay_keeps_the_profile_and_the_next_run_is_accepted(tmp_path: Path) -> None:
    """Against the real relay (issue 11): down -> run (local beacon, profile kept) -> up -> next run. The kept
    profile cannot be accepted (its beacon is not the relay's): it is kept as .superseded and said so, and
    the next run's profile, measured against the relay's beacon, is accepted."""
    port = free_port()
    result = ce_bench(tmp_path, "run", "--out", str(tmp_path / "p.json"), "--relay", f"http://127.0.0.1:{port}",
                      *FAST, cwd=tmp_path)
    assert_user_error(result, "unreachable", "the profile is kept in", "resends it")
    waiting = list((tmp_path / "outbox").glob("*.json"))
    assert len(waiting) == 1
    kept = json.loads(waiting[0].read_text())
    assert kept == json.loads((tmp_path / "p.json").read_text())
    with RelayProcess(tmp_path / "relay-data", port=port) as relay:
        again = ce_bench(tmp_path, "run", "--out", str(tmp_path / "p2.json"), "--relay", relay.url, *FAST,
                         cwd=tmp_path)
        assert again.returncode == 0, again.stderr
        said = " ".join(again.stderr.split())  # the console wraps long lines
        assert f"{waiting[0].name}: the relay cannot accept its beacon (unknown_beacon)" in said
        assert "this run measures again against the relay's current beacon" in said
        fresh = json.loads((tmp_path / "p2.json").read_text())
        status, node, _ = relay.get(f"/v1/nodes/{fresh['node_id']}")
        assert status == 200 and node["profile"] == fresh
        assert fresh["beacon"]["relay"] == relay.get("/beacon")[1]["relay"]
    assert not list((tmp_path / "outbox").glob("*.json"))
    # superseded by the accepted one, it had nothing left to deliver: removed, and said so (issue 17; the
    # journey in full: tests/test_promises_cli.py)
    assert not waiting[0].with_suffix(".superseded").exists() and "removed; the relay accepted a newer" in said


def test_profile_kept_after_a_relay_failure_is_resent(tmp_path: Path) -> None:
    """Failure injection the real relay cannot do on demand (a 503 after serving the beacon): the stand-in.
    The kept profile cites a beacon the relay still honours, so the next run resends it as it is."""
    with StandinRelay() as relay:
        relay.mode = "down"
        failed = ce_bench(tmp_path, "run", "--out", str(tmp_path / "p.json"), "--relay", relay.url, *FAST,
                          cwd=tmp_path)
        assert_user_error(failed, "refused the profile (503)")
        kept = json.loads(next((tmp_path / "outbox").glob("*.json")).read_text())
        relay.mode = "ok"
        again = ce_bench(tmp_path, "run", "--out", str(tmp_path / "p2.json"), "--relay", relay.url, *FAST,
                         cwd=tmp_path)
        assert again.returncode == 0, again.stderr
        assert "resent 1 waiting profile" in again.stderr
        assert relay.received[-2]["measured_at"] == kept["measured_at"]
    assert not list((tmp_path / "outbox").glob("*"))


@pytest.mark.parametrize(("mode", "message"), [
    ("refuse", "refused the profile (422): stale_beacon - beacon round too old - round 0 is not a round"),
    ("down", "refused the profile (503): unavailable - relay overloaded"),
])
def test_relay_refusal_is_shown_and_nothing_lost(tmp_path: Path, mode: str, message: str) -> None:
    with StandinRelay() as relay:
        relay.mode = mode
        result = ce_bench(tmp_path, "run", "--out", str(tmp_path / "p.json"), "--relay", relay.url, *FAST,
                          cwd=tmp_path)
    assert_user_error(result, message)
    assert len(list((tmp_path / "outbox").glob("*.json"))) == 1


def test_verify_refuses_tampered_and_bad_files(tmp_path: Path) -> None:
    from tests.samples import sample_profile

    _, profile = sample_profile()
    good = tmp_path / "good.json"
    good.write_text(json.dumps(profile))
    assert ce_bench(tmp_path, "verify", str(good)).returncode == 0
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps({**profile, "cpu": {**profile["cpu"], "gflops_fp32": 9999.0}}))
    assert_user_error(ce_bench(tmp_path, "verify", str(tampered)), "invalid NodeProfile: $.sig: signature does not")
    bad_field = tmp_path / "bad.json"
    bad_field.write_text(json.dumps({**profile, "cpu": {**profile["cpu"], "cores": "two"}}))
    assert_user_error(ce_bench(tmp_path, "verify", str(bad_field)), "$.cpu.cores: expected an integer")
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    assert_user_error(ce_bench(tmp_path, "verify", str(junk)), "is not JSON")
    assert_user_error(ce_bench(tmp_path, "verify", str(tmp_path / "missing.json")), "cannot read")


def test_corrupt_or_exposed_key_is_refused(tmp_path: Path) -> None:
    (tmp_path / "node.key").write_text("garbage")
    os.chmod(tmp_path / "node.key", 0o600)
    assert_user_error(ce_bench(tmp_path, "keys", "show"), "is corrupt (not JSON)", "ce-bench keys rotate")
    relay_dir = tmp_path / "relay"
    relay_dir.mkdir()
    (relay_dir / "relay.key").write_text("garbage")
    os.chmod(relay_dir / "relay.key", 0o600)
    assert_user_error(ce_bench(tmp_path, "relay", "--data-dir", str(relay_dir), "--port", str(free_port()),
                               timeout=60), "relay key:", "is corrupt (not JSON)", "restart to make a new one")
    (tmp_path / "node.key").write_text(json.dumps({"v": 1, "type": "ed25519", "seed": "AAAA"}))
    assert_user_error(ce_bench(tmp_path, "keys", "show"), "'seed' must be 32 bytes")
    ce_bench(tmp_path, "keys", "rotate")
    os.chmod(tmp_path / "node.key", 0o644)
    assert_user_error(ce_bench(tmp_path, "keys", "show"), "readable by others (mode 644)", "chmod 600")


def test_tampered_or_unloadable_capsule_is_refused(tmp_path: Path, artifacts: Artifacts) -> None:
    wasm = bytearray(artifacts.capsule.read_bytes())
    wasm[len(wasm) // 2] ^= 0xFF
    (tmp_path / "capsule.wasm").write_bytes(wasm)
    (tmp_path / "capsule.sha256").write_text((artifacts.capsule.parent / "capsule.sha256").read_text())
    result = ce_bench(tmp_path, "run", "--capsule", str(tmp_path / "capsule.wasm"), *FAST, cwd=tmp_path)
    assert_user_error(result, "tampered or stale", "python build.py --force")
    (tmp_path / "capsule.sha256").unlink()
    (tmp_path / "capsule.wasm").write_bytes(b"\0asm\x01\0\0\0garbage")
    result = ce_bench(tmp_path, "run", "--capsule", str(tmp_path / "capsule.wasm"), *FAST, cwd=tmp_path)
    assert_user_error(result, "cannot load")
    result = ce_bench(tmp_path, "run", "--capsule", str(tmp_path / "nothere.wasm"), *FAST, cwd=tmp_path)
    assert_user_error(result, "cannot read the capsule", "python build.py")
