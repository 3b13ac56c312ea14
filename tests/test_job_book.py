"""The pure core of dispatched work (web/jobs/book.py, web/jobs/rules.py): placement, quorums, audits, lost nodes,
deadlines, cancels. Time is passed in; every test names the behaviour on both sides of the rule it pins."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from capsule.job_records import JobManifestV2
from capsule.typed import parse
from web.jobs.book import Job, JobBook
from web.jobs.config import JobsConfig
from web.jobs.rules import Candidate, false_accept_odds, majority, rank

SHA = "a" * 64


def manifest(tasks: int = 4, **placement: Any) -> JobManifestV2:
    return parse(JobManifestV2, {"v": 2, "kind": "wasi", "module": {"sha256": SHA},
                                 "tasks": [{"args": [str(i)]} for i in range(tasks)],
                                 "limits": {"memory_mib": 16, "wall_ms": 1000, "output_bytes": 64},
                                 "placement": {"nodes": 10, "redundancy": 1, "audit": 0.0, **placement}})


def job(m: JobManifestV2, name: str = "j", audit: float = 0.0) -> Job:
    job_id = hashlib.sha256(name.encode()).hexdigest()
    return Job(job_id, "submitter", m, {}, 0.0, "seed", "c" * 64, "d" * 64, audit)


def nodes(n: int, **kw: Any) -> list[Candidate]:
    return [Candidate(f"n{i}", f"10.0.0.{i}", kw.get("proven", True), kw.get("slots", 1), **{
        k: v for k, v in kw.items() if k not in ("proven", "slots")}) for i in range(n)]


def seasoned(book: JobBook, candidates: list[Candidate]) -> None:
    """Nodes past the full-audit phase (so an R = 1 task is audited only when drawn)."""
    for c in candidates:
        book.checked[c.node_id] = book.config.audit_all_until_checked


def answer(book: JobBook, j: Job, node: str, out: str, now: float = 1.0, exit_code: int = 0) -> Any:
    for task in j.tasks:
        for a in task.running():
            if a.node_id == node:
                return book.result(j, task, a, exit_code, hashlib.sha256(out.encode()).hexdigest(), None, 1.0, {},
                                   out.encode(), now)
    raise AssertionError(f"{node} runs nothing")


def test_unproven_or_below_min_nodes_are_never_ranked_and_full_ones_last() -> None:
    cands = [Candidate("proven", "a", True, 1, cpu_gflops=50), Candidate("unproven", "b", False, 4, cpu_gflops=99),
             Candidate("full", "c", True, 1, running=1, cpu_gflops=80), Candidate("slow", "d", True, 1, cpu_gflops=5)]
    m = manifest(min={"cpu_gflops": 10}).placement
    assert [r.candidate.node_id for r in rank(cands, m.min, None, None, "s", "x")] == ["proven", "full"]
    m0 = manifest().placement  # without the floor the slow node is eligible too; unproven never
    assert {r.candidate.node_id for r in rank(cands, m0.min, None, None, "s", "x")} == {"proven", "slow", "full"}


def test_near_orders_by_predicted_rtt_and_region_comes_first() -> None:
    cands = nodes(4)
    rtt = {"n0": 40.0, "n1": 5.0, "n2": 20.0, "n3": 1.0}
    m = manifest().placement
    assert [r.candidate.node_id for r in rank(cands, m.min, None, rtt.get, "s", "x")] == ["n3", "n1", "n2", "n0"]
    regional = [Candidate(c.node_id, c.address, True, 1, region="eu" if c.node_id in ("n0", "n2") else "us")
                for c in cands]
    ranked = rank(regional, m.min, "eu", rtt.get, "s", "x")
    assert [r.candidate.node_id for r in ranked][:2] == ["n2", "n0"] and "predicted RTT" in ranked[0].reason


def test_majority_needs_more_than_half() -> None:
    a, b = (0, "x"), (0, "y")
    assert majority([a], 1) == a and majority([a], 2) is None and majority([a, b], 2) is None
    assert majority([a, b, a], 3) == a and majority([a, b], 3) is None


def test_redundancy_places_each_task_on_distinct_nodes_and_addresses() -> None:
    book = JobBook(JobsConfig())
    j = job(manifest(tasks=3, redundancy=2))
    book.add(j, 0.0)
    same_host = [Candidate("x1", "10.9.9.9", True, 4), Candidate("x2", "10.9.9.9", True, 4)]
    out, _ = book.place(same_host, lambda _: None, 0.0)
    assert all(len({d.attempt.address for d in out if d.task is t}) <= 1 for t in j.tasks)  # one per address
    assert all(len(t.running()) == 1 for t in j.tasks)  # the second replica waits for another address
    out, _ = book.place([*same_host, Candidate("y", "10.1.1.1", True, 4)], lambda _: None, 0.0)
    assert all({a.address for a in t.running()} == {"10.9.9.9", "10.1.1.1"} for t in j.tasks)


def test_a_wrong_output_loses_to_the_majority_and_is_named() -> None:
    book = JobBook(JobsConfig())
    j = job(manifest(tasks=1, redundancy=3))
    book.add(j, 0.0)
    book.place(nodes(3), lambda _: None, 0.0)
    answer(book, j, "n0", "right")
    changes = answer(book, j, "n1", "wrong")
    assert j.tasks[0].state == "running" and not changes.verdicts  # 1 of 3 each: undecided
    changes = answer(book, j, "n2", "right")
    assert j.tasks[0].state == "done" and j.tasks[0].stdout == b"right" and j.state == "done"
    assert {(v.node_id, v.agreed) for v in changes.verdicts} == {("n0", True), ("n1", False), ("n2", True)}
    assert book.checked["n0"] == 1 and book.checked["n1"] == 0


def test_novices_are_always_audited_and_seasoned_nodes_only_when_drawn() -> None:
    book = JobBook(JobsConfig(audit_all_until_checked=2))
    j = job(manifest(tasks=4), audit=0.0)
    book.add(j, 0.0)
    out, _ = book.place(nodes(8), lambda _: None, 0.0)
    # every task checked, the second node only once the first answered: nothing tells a node beforehand
    assert all(t.audited and t.replicas == 1 for t in j.tasks) and len(out) == 4
    for d in out:
        answer(book, j, d.attempt.node_id, f"out{d.task.index}")
    again, _ = book.place(nodes(8), lambda _: None, 1.0)
    assert len(again) == 4 and all(t.replicas == 2 for t in j.tasks)
    assert all(d.attempt.address != d.task.attempts[0].address for d in again)
    book2 = JobBook(JobsConfig(audit_all_until_checked=2))
    cands = nodes(12)
    seasoned(book2, cands)
    j2 = job(manifest(tasks=4), "j2", audit=0.0)
    book2.add(j2, 0.0)
    out, _ = book2.place(cands, lambda _: None, 0.0)
    assert not any(t.audited for t in j2.tasks) and len(out) == 4
    j3 = job(manifest(tasks=4), "j3", audit=1.0)  # a share of 1: every task drawn
    book2.add(j3, 0.0)
    book2.place(cands, lambda _: None, 0.0)
    assert all(t.audited for t in j3.tasks)


def test_an_audit_mismatch_goes_to_a_third_node_which_decides() -> None:
    book = JobBook(JobsConfig())
    j = job(manifest(tasks=1))
    book.add(j, 0.0)
    first, _ = book.place(nodes(2), lambda _: None, 0.0)  # novices: audited, the second node after the first
    assert len(first) == 1
    liar = first[0].attempt.node_id
    answer(book, j, liar, "lie")
    second, _ = book.place(nodes(2), lambda _: None, 1.0)
    assert len(second) == 1 and second[0].attempt.node_id != liar
    answer(book, j, second[0].attempt.node_id, "truth")
    assert j.tasks[0].replicas == 3 and j.tasks[0].state == "running"
    out, _ = book.place(nodes(3), lambda _: None, 0.0)
    assert [d.attempt.node_id for d in out] == ["n2"]
    changes = answer(book, j, "n2", "truth")
    assert j.tasks[0].stdout == b"truth" and [v.node_id for v in changes.verdicts if not v.agreed] == [liar]


def test_a_lost_node_requeues_its_tasks_and_its_late_result_is_ignored() -> None:
    book = JobBook(JobsConfig())
    cands = nodes(2)
    seasoned(book, cands)
    j = job(manifest(tasks=2))
    book.add(j, 0.0)
    book.place(cands, lambda _: None, 0.0)
    a0 = j.tasks[0].running()[0]
    book.lost(a0.node_id, 1.0, "the node's session closed")
    assert a0.state == "lost" and j.tasks[0].wanted() == 1
    assert book.attempt_of(j.id, 0, a0.n, a0.node_id) is None  # its result now names no running attempt
    other = [c for c in cands if c.node_id != a0.node_id]
    assert not book.place(other, lambda _: None, 1.0)[0]  # the other node is busy with task 1
    answer(book, j, other[0].node_id, "t1")
    out, _ = book.place(other, lambda _: None, 2.0)
    assert [(d.task.index, d.attempt.n) for d in out] == [(0, 1)]
    answer(book, j, other[0].node_id, "t0")
    assert j.state == "done" and sum(1 for t in j.tasks for a in t.attempts if a.verdict) == 2  # none counted twice


def test_deadlines_and_errors_fail_a_task_once_two_nodes_met_them_not_before() -> None:
    book = JobBook(JobsConfig(max_attempts=4, deadline_grace_s=1.0))
    cands = nodes(3)
    seasoned(book, cands)
    j = job(manifest(tasks=1))  # wall_ms 1000: given up 2 s after placement
    book.add(j, 0.0)
    book.place(cands, lambda _: None, 0.0)
    first = j.tasks[0].running()[0].node_id
    book.expire(1.9)
    assert j.tasks[0].running()  # within wall_ms + grace
    book.expire(2.1)
    assert j.tasks[0].state == "running" and j.tasks[0].wanted() == 1  # one expired attempt: placed again
    book.place(cands, lambda _: None, 2.1)
    t = j.tasks[0]
    a = t.running()[0]
    assert a.node_id != first  # a retry goes to another node
    book.result(j, t, a, None, None, "the module trapped (unreachable)", 1.0, {}, b"", 2.2)
    assert t.state == "failed" and t.error == "the module trapped (unreachable)" and j.state == "failed"


def test_a_busy_pool_node_stays_in_the_pool() -> None:
    """The pool is the `nodes` best nodes for the job: one whose slots are all taken keeps its place (it was
    once dropped as "not eligible" and the job narrowed to one node)."""
    book = JobBook(JobsConfig())
    cands = nodes(3)
    seasoned(book, cands)
    j = job(manifest(tasks=6, nodes=3))
    book.add(j, 0.0)
    book.place(cands, lambda _: None, 0.0)
    assert set(j.pool) == {"n0", "n1", "n2"}
    answer(book, j, "n0", "x")
    book.place(cands, lambda _: None, 1.0)
    assert set(j.pool) == {"n0", "n1", "n2"}


def test_cancel_ends_running_attempts_and_names_their_nodes() -> None:
    book = JobBook(JobsConfig())
    cands = nodes(2)
    seasoned(book, cands)
    j = job(manifest(tasks=3))
    book.add(j, 0.0)
    book.place(cands, lambda _: None, 0.0)
    changes = book.cancel(j.id, 1.0)
    assert j.state == "cancelled" and {n for n, _ in changes.cancel} == {"n0", "n1"}
    # the nodes may still be running them: their slots stay taken until each result (ignored) or the deadline
    assert dict(book.running) == {"n0": 1, "n1": 1}
    j2 = job(manifest(tasks=2), "j2")
    book.add(j2, 1.0)
    assert not book.place(cands, lambda _: None, 1.0)[0]  # no slot free yet
    t = next(t for t in j.tasks if t.attempts)
    a = t.attempts[0]
    assert book.attempt_of(j.id, t.index, a.n, a.node_id) is None  # a late result: ignored, its slot freed
    assert len(book.place(cands, lambda _: None, 1.0)[0]) == 1
    book.expire(100.0)
    assert book.running.get("n0", 0) + book.running.get("n1", 0) <= 1


def test_false_accept_odds_fall_with_redundancy_and_audit() -> None:
    assert false_accept_odds(1, 0.0, 0.1) == 1.0
    assert false_accept_odds(1, 0.05, 0.0) == 0.95
    # a tie adds a third node, which may collude: 1 - (1 - f)^2 at R = 2 and 3, not f
    assert false_accept_odds(2, 0.0, 0.1) == false_accept_odds(3, 0.0, 0.1) == pytest.approx(1 - 0.9 ** 2)
    assert false_accept_odds(5, 0.0, 0.1) < false_accept_odds(3, 0.0, 0.1)


def test_the_published_odds_are_what_the_book_does() -> None:
    """Colluding liars (the same wrong output) among honest nodes, every task through the book until decided: the
    share of lies accepted matches false_accept_odds for the liars' share among the other nodes, and every
    accepted lie that needed a tie-break flagged an honest node (the price published with the odds)."""
    import random

    rng = random.Random(7)
    cands = nodes(20, slots=50)
    liars = {"n0", "n1", "n2", "n3"}
    book = JobBook(JobsConfig())
    seasoned(book, cands)
    j = job(manifest(tasks=1500, redundancy=2, nodes=20))
    book.add(j, 0.0)
    while j.state not in ("done", "failed"):
        out, _ = book.place(cands, lambda _: None, 0.0)
        assert out or any(t.running() for t in j.tasks)
        rng.shuffle(out)
        for d in out:
            answer(book, j, d.attempt.node_id, "lie" if d.attempt.node_id in liars else f"truth{d.task.index}")
    by_liar = [t for t in j.tasks if t.attempts[0].node_id in liars]
    accepted = sum(t.stdout == b"lie" for t in by_liar) / len(by_liar)
    expected = false_accept_odds(2, 0.0, 3 / 19)
    assert len(by_liar) > 200 and abs(accepted - expected) < 0.07, (accepted, expected, len(by_liar))


def test_a_caught_liar_has_its_unchecked_outputs_in_running_jobs_checked_again() -> None:
    book = JobBook(JobsConfig())
    cands = nodes(4, slots=2)
    seasoned(book, cands)
    j = job(manifest(tasks=3))  # audit 0: nothing checked
    book.add(j, 0.0)
    book.place(cands, lambda _: None, 0.0)
    liar = j.tasks[0].running()[0].node_id
    answer(book, j, liar, "lie")
    assert j.tasks[0].state == "done" and j.tasks[0].attempts[0].verdict == "unchecked"
    changes = book.suspect(liar, 1.0)
    assert [t.index for _, t in changes.tasks] == [0] and j.tasks[0].state == "running" and j.tasks[0].wanted() == 1
    out, _ = book.place(cands, lambda _: None, 1.0)
    honest = [d.attempt.node_id for d in out if d.task.index == 0]
    assert honest and liar not in honest
    answer(book, j, honest[0], "truth")
    assert j.tasks[0].state == "running" and j.tasks[0].replicas == 3  # 1:1, a third node decides
    book.place(cands, lambda _: None, 2.0)
    third = [a.node_id for a in j.tasks[0].running()]
    answer(book, j, third[0], "truth")
    assert j.tasks[0].stdout == b"truth" and j.tasks[0].attempts[0].verdict == "wrong"


def test_pace_marks_a_node_that_delivers_far_below_its_proof_and_only_after_enough_tasks() -> None:
    from web.jobs.pace import PACE_MIN_TASKS, PACE_SLOW_FACTOR, Pace

    pace = Pace()
    for _ in range(PACE_MIN_TASKS - 1):  # claims 100 GFLOP/s proven, runs like a 20 GFLOP/s peer's fifth
        pace.add_task([("slow", 1000.0, 100.0), ("peer", 1000.0, 20.0), ("other", 500.0, 40.0)])
    assert not pace.slow("slow")  # not yet enough tasks
    pace.add_task([("slow", 1000.0, 100.0), ("peer", 1000.0, 20.0), ("other", 500.0, 40.0)])
    assert pace.slow("slow") and pace.of("slow")["ratio_to_peers"] == 5.0 > PACE_SLOW_FACTOR
    assert not pace.slow("peer") and not pace.slow("other")
    honest = Pace()  # twice as fast as proven, or a busy machine at a third: never marked
    for _ in range(20):
        honest.add_task([("a", 300.0, 100.0), ("b", 1000.0, 100.0)])
    assert not honest.slow("a") and not honest.slow("b")
    short = Pace()  # tasks under 100 ms say nothing of speed
    for _ in range(20):
        short.add_task([("x", 50.0, 100.0), ("y", 5.0, 20.0)])
    assert short.of("x")["tasks"] == 0


def test_manifest_limits_are_checked_where_a_field_check_cannot_see() -> None:
    """Counts and repeats (a field's own check sees one item of a list at a time): too many arguments, a long
    argument, no task, a probe twice, each named by its path."""
    import pytest

    from capsule.job_records import MAX_ARG_CHARS, MAX_ARGS, check_manifest
    from capsule.typed import ValidationError

    base = {"v": 2, "kind": "wasi", "module": {"sha256": SHA}, "tasks": [{"args": ["1"]}],
            "limits": {"memory_mib": 16, "wall_ms": 1000}}
    check_manifest(parse(JobManifestV2, base))
    with pytest.raises(ValidationError, match=r"\$\.tasks\[0\]\.args: expected at most 64"):
        check_manifest(parse(JobManifestV2, {**base, "tasks": [{"args": ["x"] * (MAX_ARGS + 1)}]}))
    with pytest.raises(ValidationError, match=r"\$\.tasks\[0\]\.args\[0\]"):
        parse(JobManifestV2, {**base, "tasks": [{"args": ["x" * (MAX_ARG_CHARS + 1)]}]})
    with pytest.raises(ValidationError, match=r"\$\.tasks: expected 1 to"):
        check_manifest(parse(JobManifestV2, {**base, "tasks": []}))
    capsule = {**base, "kind": "capsule", "capsule": {"sha256": SHA}, "budget_ms": 300}
    with pytest.raises(ValidationError, match=r"\$\.probes: expected at least one probe, each once"):
        check_manifest(parse(JobManifestV2, {**capsule, "probes": ["sgemm", "sgemm"]}))
    with pytest.raises(ValidationError, match=r"\$\.probes\[0\]"):
        parse(JobManifestV2, {**capsule, "probes": ["gpu"]})


def test_an_expired_cancelled_attempt_frees_its_slot() -> None:
    book = JobBook(JobsConfig())
    cands = nodes(2)
    seasoned(book, cands)
    j = job(manifest(tasks=2))
    book.add(j, 0.0)
    book.place(cands, lambda _: None, 0.0)
    book.cancel(j.id, 1.0)
    assert dict(book.running) == {"n0": 1, "n1": 1}  # held while the nodes may still run them
    book.expire(100.0)
    assert dict(book.running) == {}


def test_a_closed_session_is_not_an_error_of_the_task() -> None:
    """Lost attempts (sessions that closed) never fail a task: two in a row leave it waiting for a third node."""
    book = JobBook(JobsConfig(max_attempts=2))
    cands = nodes(3)
    seasoned(book, cands)
    j = job(manifest(tasks=1))
    book.add(j, 0.0)
    for now in (0.0, 1.0):
        book.place(cands, lambda _: None, now)
        book.lost(j.tasks[0].running()[0].node_id, now, "the node's session closed")
    assert j.tasks[0].state == "running" and j.tasks[0].wanted() == 1


def test_suspect_leaves_ended_jobs_as_they_were() -> None:
    book = JobBook(JobsConfig())
    cands = nodes(1)
    seasoned(book, cands)
    j = job(manifest(tasks=1))
    book.add(j, 0.0)
    book.place(cands, lambda _: None, 0.0)
    answer(book, j, "n0", "lie")
    assert j.state == "done"
    assert not book.suspect("n0", 1.0).tasks and j.tasks[0].stdout == b"lie" and j.state == "done"


def test_checkers_are_drawn_whatever_the_slots_a_node_offers() -> None:
    """A node offering 100x the slots of the others checks about its share of tasks, not all of them."""
    cands = [*nodes(19, slots=50), Candidate("big", "10.9.9.9", True, 5000)]
    book = JobBook(JobsConfig())
    seasoned(book, cands)
    j = job(manifest(tasks=300, redundancy=2, nodes=20))
    book.add(j, 0.0)
    book.place(cands, lambda _: None, 0.0)
    checkers = [t.attempts[1].node_id for t in j.tasks if len(t.attempts) > 1]
    assert len(checkers) == 300 and len(set(checkers)) >= 15
    assert 0.01 < checkers.count("big") / 300 < 0.15, checkers.count("big")


def test_three_different_outputs_with_redundancy_one_end_in_no_majority() -> None:
    book = JobBook(JobsConfig())
    j = job(manifest(tasks=1))  # novices: audited
    book.add(j, 0.0)
    for i, out in enumerate(("a", "b", "c")):
        out_d, _ = book.place(nodes(4), lambda _: None, float(i))
        answer(book, j, out_d[0].attempt.node_id, out)
    t = j.tasks[0]
    assert t.state == "failed" and t.error == "no majority among 3 outputs" and len(t.attempts) == 3


def test_the_pool_holds_as_many_nodes_as_the_job_asks() -> None:
    book = JobBook(JobsConfig())
    cands = nodes(6)
    seasoned(book, cands)
    j = job(manifest(tasks=10, nodes=2))
    book.add(j, 0.0)
    out, _ = book.place(cands, lambda _: None, 0.0)
    assert len(j.pool) == 2 and {d.attempt.node_id for d in out} == set(j.pool)


def test_a_retry_on_a_fresh_identity_is_audited() -> None:
    book = JobBook(JobsConfig())
    seasoned_node, novice = Candidate("old", "10.0.0.1", True, 1), Candidate("new", "10.0.0.2", True, 1)
    seasoned(book, [seasoned_node])
    j = job(manifest(tasks=1), audit=0.0)
    book.add(j, 0.0)
    book.place([seasoned_node], lambda _: None, 0.0)
    assert j.tasks[0].audited is False
    book.lost("old", 1.0, "the node's session closed")
    book.place([seasoned_node, novice], lambda _: None, 1.0)
    assert j.tasks[0].running()[0].node_id == "new" and j.tasks[0].audited is True


def test_slow_nodes_rank_last_and_kinds_filter_the_candidates() -> None:
    m = manifest().placement
    cands = [Candidate("slow", "a", True, 1, slow=True), Candidate("fine", "b", True, 1)]
    assert [r.candidate.node_id for r in rank(cands, m.min, None, None, "s", "x")] == ["fine", "slow"]
    capsule = parse(JobManifestV2, {"v": 2, "kind": "capsule", "capsule": {"sha256": SHA}, "probes": ["sgemm"],
                                    "budget_ms": 300, "tasks": [{"args": []}],
                                    "limits": {"memory_mib": 512, "wall_ms": 1000, "output_bytes": 65536}})
    book = JobBook(JobsConfig())
    j = job(capsule)
    book.add(j, 0.0)
    assert not book.place(nodes(3), lambda _: None, 0.0)[0]  # wasi-only nodes (a join page) take none
    both = [Candidate("srv", "c", True, 1, kinds=frozenset({"wasi", "capsule"}))]
    assert [d.attempt.node_id for d in book.place(both, lambda _: None, 0.0)[0]] == ["srv"]


def test_errors_beside_an_output_do_not_fail_the_task_before_max_attempts() -> None:
    book = JobBook(JobsConfig(max_attempts=4))
    cands = nodes(6)
    seasoned(book, cands)
    j = job(manifest(tasks=1, redundancy=2))
    book.add(j, 0.0)
    book.place(cands, lambda _: None, 0.0)
    t = j.tasks[0]
    first, second = t.running()
    book.result(j, t, first, 0, hashlib.sha256(b"x").hexdigest(), None, 1.0, {}, b"x", 1.0)
    for now in (1.0, 2.0, 3.0, 4.0):  # two nodes met an error, but one produced an output: on to max_attempts
        a = second if now == 1.0 else t.running()[0]
        book.result(j, t, a, None, None, "a fetch failed", 1.0, {}, b"", now)
        assert t.state == ("running" if now < 4.0 else "failed"), (now, t.state)
        book.place(cands, lambda _: None, now)


def test_audit_state_is_hidden_until_the_task_is_decided() -> None:
    from web.jobs.desk import task_json

    book = JobBook(JobsConfig())
    j = job(manifest(tasks=1))  # a novice: audited
    book.add(j, 0.0)
    out, _ = book.place(nodes(2), lambda _: None, 0.0)
    assert j.tasks[0].audited is True
    shown = task_json(j.tasks[0])
    assert shown["audited"] is None and shown["replicas"] is None
    answer(book, j, out[0].attempt.node_id, "x")
    book.place(nodes(2), lambda _: None, 1.0)
    answer(book, j, j.tasks[0].running()[0].node_id, "x")
    assert task_json(j.tasks[0])["audited"] is True and task_json(j.tasks[0])["replicas"] == 2


def test_a_capsule_output_must_be_its_nodes_profile_on_the_round_sent() -> None:
    import json

    from tests.samples import sample_profile
    from web.jobs.desk import capsule_output_problem

    beacon = {"relay": NodeKeyId.other(), "round": 5, "value": "ab" * 32}
    key, profile = sample_profile(beacon=beacon)
    body = json.dumps(profile).encode()
    assert capsule_output_problem(body, key.node_id, beacon) is None
    assert "another node" in (capsule_output_problem(body, NodeKeyId.other(), beacon) or "")
    assert "beacon round" in (capsule_output_problem(body, key.node_id, {**beacon, "value": "cd" * 32}) or "")
    assert "not a signed NodeProfile" in (capsule_output_problem(b"{}", key.node_id, beacon) or "")


class NodeKeyId:
    @staticmethod
    def other() -> str:
        from common.keys import NodeKey

        return NodeKey.generate().node_id


def test_a_task_no_machine_can_check_says_why_it_waits() -> None:
    """Identities of one machine (one address) cannot check each other: the audit of a novice's output waits, and
    the task says so (an event and `waiting`), instead of running for ever in silence."""
    book = JobBook(JobsConfig())
    one_host = [Candidate("a", "10.0.0.1", True, 1), Candidate("b", "10.0.0.1", True, 1)]
    j = job(manifest(tasks=1))
    book.add(j, 0.0)
    out, _ = book.place(one_host, lambda _: None, 0.0)
    answer(book, j, out[0].attempt.node_id, "x")
    assert not book.place(one_host, lambda _: None, 1.0)[0]
    t = j.tasks[0]
    assert t.state == "running" and t.waiting is not None and "another address" in t.waiting
    assert [e for e in j.events if e.get("state") == "waiting"][-1]["reason"] == t.waiting
    out, _ = book.place([*one_host, Candidate("c", "10.0.0.2", True, 1)], lambda _: None, 2.0)
    assert [d.attempt.node_id for d in out] == ["c"] and t.waiting is None
    nowhere = job(manifest(tasks=1, min={"memory_mb": 1}), "j2")  # no node says how much memory it has free
    book.add(nowhere, 3.0)
    assert not book.place(one_host, lambda _: None, 3.0)[0]
    assert nowhere.tasks[0].waiting == "no proven node meets the job's minimums, kind and region"


def test_an_audit_decided_before_a_restart_is_still_placed_after_it(tmp_path: Any) -> None:
    """The second node of an audit, decided when the first output arrived, is stored with the task: a relay
    restarted from its SQLite file before placing it places it then. (Before, the task row kept replicas 1: the
    restarted relay saw one output for one replica, wanted nothing, and the task stayed "running" forever.)"""
    from web.jobs.job_store import JobStore

    store = JobStore(tmp_path / "jobs.sqlite")
    book = JobBook(JobsConfig())
    m = {"v": 2, "kind": "wasi", "module": {"sha256": SHA}, "tasks": [{"args": ["0"]}],
         "limits": {"memory_mib": 16, "wall_ms": 1000, "output_bytes": 64},
         "placement": {"nodes": 10, "redundancy": 1, "audit": 0.0}}
    j = Job(hashlib.sha256(b"r").hexdigest(), "submitter", parse(JobManifestV2, m), {"manifest": m}, 0.0, "seed",
            "c" * 64, "d" * 64, 0.0)
    book.add(j, 0.0)  # makes the tasks, which the store then holds
    store.add_job(j, {})
    first, changes = book.place(nodes(3), lambda _: None, 0.0)  # novices: audited
    store.save(changes.jobs, changes.tasks, changes.attempts, {})
    changes = answer(book, j, first[0].attempt.node_id, "out")
    store.save(changes.jobs, changes.tasks, changes.attempts, {})
    assert j.tasks[0].replicas == 2 and j.tasks[0].state == "running"  # the audit is decided, not yet placed
    # the relay restarts here: a new book from the store
    (loaded,) = store.unfinished()
    book2 = JobBook(JobsConfig())
    book2.add(loaded, 2.0)
    again, _ = book2.place(nodes(3), lambda _: None, 2.0)
    assert len(again) == 1 and again[0].attempt.node_id != first[0].attempt.node_id
    changes = answer(book2, loaded, again[0].attempt.node_id, "out", now=3.0)
    assert loaded.tasks[0].state == "done" and loaded.tasks[0].stdout == b"out"
