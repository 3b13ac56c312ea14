"""`ce-bench status` in one vocabulary (issue 47): counted vs claimed, cores as a claim, unknown as unknown, a
failed roll call with its code once (before: "cores 0 proven", "sgemm passed passed", "null")."""

from __future__ import annotations

from typing import Any

from host_runner.status import render


def status(counted: dict[str, Any], roll_calls: list[dict[str, Any]]) -> dict[str, Any]:
    return {"node_id": "12D3KooWnode", "relay": "http://relay", "online": True,
            "trust": {"status": "verified", "reason": "the claim is within 2x", "counted": counted},
            "claimed": {"cpu_gflops": 64.3, "cpu_cores": 2, "tokens_per_sec": 541.0, "gpus": 1},
            "roll_calls": roll_calls, "links": []}


def test_status_names_counted_and_claimed_and_never_a_proven_core() -> None:
    rc = [{"roll_call": "75-a", "kind": "sgemm", "passed": True, "code": "passed", "observed_gflops": 61.0},
          {"roll_call": "75-a", "kind": "llm", "passed": False, "code": "wrong_tokens",
           "observed_tokens_per_sec": None},
          {"roll_call": "75-a", "kind": "gpu", "passed": True, "code": "passed", "observed_tflops": 0.31}]
    text = render(status({"cpu_gflops": 58.2, "tokens_per_sec": 530.0, "gpus": 1}, rc))
    lines = text.splitlines()
    assert lines[2].split() == ["counted", "claimed"]
    assert lines[4].split() == ["cores", "(claim", "only)", "2"]  # cores are never counted as proven
    assert "counted = what the latest roll call proved" in text and "never proven" in text
    assert "  75-a sgemm passed, observed 61.0 GFLOP/s" in lines
    assert "  75-a llm   FAILED (wrong_tokens), observed unknown" in lines
    assert "  75-a gpu   passed, observed 0.3100 fp32 TFLOP/s" in lines
    assert "passed passed" not in text and "null" not in text


def test_before_any_roll_call_the_counted_figures_are_unknown_not_zero() -> None:
    text = render(status({}, []))
    lines = text.splitlines()
    assert lines[3].split()[:2] == ["CPU", "unknown"] and lines[6].split()[:2] == ["GPUs", "unknown"]
    assert "last roll calls: none answered yet" in lines
