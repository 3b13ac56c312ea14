"""A measurement step that the node's own challenge answer overlapped runs again (host_runner/step_guard.py)."""

from __future__ import annotations

from host_runner.step_guard import StepGuard


class Session:
    """The two things a step reads of a live session (LiveSession.answering, LiveSession.worked)."""

    def __init__(self, answering: bool = False, polls_until_idle: int | None = None) -> None:
        self.worked = 0
        self._answering = answering
        self._polls = polls_until_idle  # answering turns False after this many reads of it (None: never)

    @property
    def answering(self) -> bool:
        if self._answering and self._polls is not None:
            self._polls -= 1
            self._answering = self._polls > 0
        return self._answering


class Counter:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> int:
        self.calls += 1
        return self.calls


def test_without_a_session_a_step_runs_once() -> None:
    step, guard = Counter(), StepGuard(None)
    assert guard.run(step) == 1 and step.calls == 1 and guard.run_again == 0


def test_a_step_no_answer_overlapped_runs_once() -> None:
    step, guard = Counter(), StepGuard(Session())
    assert guard.run(step) == 1 and step.calls == 1 and guard.run_again == 0


def test_a_step_an_answer_began_in_runs_again() -> None:
    session, results = Session(), iter([10.0, 20.0])

    def step() -> float:
        value = next(results)
        if value == 10.0:
            session.worked += 1  # a roll call's challenge arrived during this step
        return value

    guard = StepGuard(session)
    assert guard.run(step) == 20.0 and guard.run_again == 1


def test_a_step_every_answer_overlaps_is_kept_after_three_runs() -> None:
    session, count = Session(), Counter()

    def step() -> int:
        session.worked += 1
        return count()

    guard = StepGuard(session)
    assert guard.run(step) == 3 and guard.run_again == 2


def test_a_step_waits_for_an_answer_in_progress() -> None:
    session = Session(answering=True, polls_until_idle=3)
    guard = StepGuard(session, poll_s=0.001)
    assert guard.run(lambda: "clean") == "clean" and guard.run_again == 0 and session.answering is False


def test_an_answer_longer_than_the_wait_counts_as_overlapping() -> None:
    session = Session(answering=True)  # it never ends
    guard = StepGuard(session, wait_s=0.01, poll_s=0.001)
    assert guard.run(lambda: "read") == "read" and guard.run_again == 2
