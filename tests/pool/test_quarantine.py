"""The quarantine child with real processes (issue #37, item 1): a task that kills whatever
process runs it kills only its child, and the live parent sees how (the signal, the exit code).

Every outcome the agent can give comes back over the pipe as it would from the worker's own
process; a death while the child runs the task is a ``QuarantineDeath`` naming the signal or
code; the memory limit stops a hog in its child; a cancelled run kills its child; and a child
outlives neither its parent (``PR_SET_PDEATHSIG``) nor the parent's end of the pipe.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import attrs
import pytest
import trio

from support.waiting import wait_until
from tether.bridge import CustodyState, Permanent, Reply, Retry, Task
from tether.bridge.custody._children import ChildView, child_id
from tether.bridge.custody._conversation import Conversation, Turn
from tether.bridge.custody._limits import Granted, NoPermit
from tether.bridge.custody._records import StepRecord
from tether.bridge.custody._versions import fingerprint
from tether.bridge.pool._quarantine import (
    ChildSteps,
    Quarantine,
    QuarantineDeath,
    QuarantineFailure,
    QuarantineSpec,
    QuarantineStartError,
    run_in_quarantine,
)
from tether.bridge.pool._quarantine_limits import ChildLimits
from tether.bridge.pool._quarantine_wire import EXIT_OUT_OF_MEMORY
from tether.bridge.runs import Parked

SPEC = QuarantineSpec("support.agents.quarantine:factory")
START_WITHIN = 60.0  # a child start takes a second or more on a busy 2-core machine


pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("tests_importable")]


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1].startswith("Z")  # a zombie is dead
    except FileNotFoundError:
        return True


async def test_every_outcome_of_a_quarantined_run_reaches_its_live_parent() -> None:
    bodies = ["hello", "print", "progress", "retry", "permanent", "boom", "sigkill"]
    bodies += ["segfault", "exit3"]
    outcomes: dict[str, object] = {}
    shown: list[tuple[str | None, str | None]] = []

    async def one(body: str) -> None:
        try:
            outcomes[body] = await run_in_quarantine(
                SPEC, Task(body, body), on_progress=lambda s, p: shown.append((s, p))
            )
        except Exception as exc:
            outcomes[body] = exc

    with trio.fail_after(START_WITHIN):
        async with trio.open_nursery() as nursery:
            for body in bodies:
                nursery.start_soon(one, body)
    assert outcomes["hello"] == Reply("echo: hello")
    assert outcomes["print"] == Reply("echo: print")  # its prints went to stderr, not the pipe
    assert outcomes["progress"] == Reply("final answer")
    assert ("thinking", "partial ans") in shown
    retry = outcomes["retry"]
    assert isinstance(retry, Retry)
    assert (str(retry), retry.after) == ("provider busy", 7.0)
    assert isinstance(outcomes["permanent"], Permanent)
    assert str(outcomes["permanent"]) == "cannot ever work"
    assert isinstance(outcomes["boom"], QuarantineFailure)
    assert str(outcomes["boom"]) == "KeyError: 'boom'"
    deaths = {b: outcomes[b] for b in ("sigkill", "segfault", "exit3")}
    for death in deaths.values():
        assert isinstance(death, QuarantineDeath)
    assert str(deaths["sigkill"]) == "its quarantine process was killed by SIGKILL"
    assert str(deaths["segfault"]) == "its quarantine process was killed by SIGSEGV"
    assert str(deaths["exit3"]) == "its quarantine process exited with code 3"
    assert [getattr(d, "signal", None) for d in deaths.values()] == [
        signal.SIGKILL,
        signal.SIGSEGV,
        None,
    ]


async def test_a_quarantined_run_replays_and_records_its_steps_and_keeps_its_conversation() -> None:
    """The child holds nothing of the store: recorded steps come with the task, a new step is
    recorded by the parent (under its fence), a long durable sleep parks in the parent, and the
    room's conversation is asked of the parent once, by the run that reads it (issue #49), and
    the new state comes back (issues #34, #35 with #37)."""
    recorded: list[tuple[str, str]] = []
    parked: list[tuple[float, str]] = []
    reads: list[str] = []

    async def record(
        name: str, value: str, fingerprint: str | None = None, call: str | None = None
    ) -> StepRecord:
        recorded.append((name, value))
        return StepRecord(name, value, 5.0, 2, len(value))

    before = Conversation((Turn("user", "hi", "m1", 1.0, "delivered"),), {"seen": 4}, 4)

    def steps(*known: StepRecord, body: str) -> ChildSteps:
        async def conversation() -> Conversation:
            reads.append(body)
            return before

        return ChildSteps(
            known,
            record,
            lambda until, why: parked.append((until, why)),
            30.0,
            conversation=conversation,
        )

    outcomes: dict[str, object] = {}

    async def one(body: str, child_steps: ChildSteps) -> None:
        try:
            outcomes[body] = await run_in_quarantine(SPEC, Task(body, body), steps=child_steps)
        except Exception as exc:
            outcomes[body] = exc

    with trio.fail_after(START_WITHIN):
        async with trio.open_nursery() as nursery:
            recorded_a = StepRecord("a", '"recorded-a"', 1.0, 1, 12)
            nursery.start_soon(one, "steps", steps(recorded_a, body="steps"))
            nursery.start_soon(one, "nap", steps(body="nap"))
            nursery.start_soon(one, "chat", steps(body="chat"))
    assert outcomes["steps"] == Reply("recorded-a+fresh-b")  # a replayed, b run and recorded
    assert ("b", '"fresh-b"') in recorded
    assert ("a", '"fresh-a"') not in recorded
    assert isinstance(outcomes["nap"], Parked)
    [(until, why)] = parked
    assert until > 3000
    assert "sleeping until" in why
    assert [name for name, _ in recorded if "sleep" in name] == ["~sleep:1"]  # its wake-up time
    assert outcomes["chat"] == Reply("history 1", state={"seen": 5})
    assert reads == ["chat"]  # read once, by the run that awaited it; the others asked nothing


async def test_a_quarantined_parent_spawns_and_joins_through_its_parent() -> None:
    """Issue #51: a suspect parent's spawns are made by the worker under its own fence, its
    join reads the children through it, and a join that must wait parks in the worker naming
    the children; once they are done, the next run's join returns their replies."""
    spawned: list[tuple[str, Task]] = []
    parked: list[tuple[float, str, object, list[str]]] = []
    done: dict[str, str] = {}

    async def spawn(name: str, child: Task) -> StepRecord:
        spawned.append((name, child))
        return StepRecord(f"~spawn:{name}", json.dumps(child.id), 1.0, 1, 44)

    async def children(ids: Sequence[str]) -> list[ChildView | None]:
        return [
            ChildView(id, CustodyState.RESULT, done[id], None)
            if id in done
            else ChildView(id, CustodyState.CLAIMED, None, None)
            for id in ids
        ]

    async def record(
        name: str, value: str, fingerprint: str | None = None, call: str | None = None
    ) -> StepRecord:
        return StepRecord(name, value, 5.0, 1, len(value))

    def parked_at(*args: object) -> None:
        until, why, _, join = args
        parked.append((float(until), str(why), None, list(join)))  # type: ignore[arg-type, call-overload]

    steps = ChildSteps((), record, parked_at, 30.0, spawn=spawn, children=children)
    family = Task("p", "family")
    with trio.fail_after(START_WITHIN):
        with pytest.raises(Parked):
            await run_in_quarantine(SPEC, family, steps=steps)
    assert [(n, c.id, c.headers["parent"]) for n, c in spawned] == [
        ("a", child_id("p", "a"), "p"),
        ("b", child_id("p", "b"), "p"),
    ]
    [(_, why, _, join)] = parked
    assert join == [child_id("p", "a"), child_id("p", "b")]
    assert "2 of 2 children (a, b)" in why
    done.update({child_id("p", n): f"notes {n}" for n in ("a", "b")})
    kept = [StepRecord(f"~spawn:{n}", json.dumps(child_id("p", n)), 1.0, 1, 44) for n in "ab"]
    again = attrs.evolve(steps, recorded=kept)
    spawned.clear()
    with trio.fail_after(START_WITHIN):
        reply = await run_in_quarantine(SPEC, family, steps=again)
    assert reply == Reply("notes a + notes b")
    assert spawned == []  # the resumed parent spawns nothing again


async def test_a_quarantined_run_takes_its_permits_through_its_parent() -> None:
    """The child holds nothing of the store: a permit is asked of the parent, which takes it
    under its claim and answers after a wait; the release and the pause are told to it
    (issue #38)."""
    asked: list[tuple[str, object]] = []
    answers: list[Granted | NoPermit] = [NoPermit(0.01, "rate"), Granted(41, 2.0)]

    async def acquire(key: str, weight: float) -> Granted | NoPermit:
        asked.append(("acquire", (key, weight)))
        return answers.pop(0)

    async def release(permit: int) -> None:
        asked.append(("release", permit))

    async def pause(key: str, until: float) -> None:
        asked.append(("pause", (key, round(until - time.time()))))

    steps = ChildSteps((), _never_record, lambda until, why: None, 30.0)
    steps = attrs.evolve(steps, limits=ChildLimits(acquire, release, pause))
    with trio.fail_after(START_WITHIN):
        reply = await run_in_quarantine(SPEC, Task("limited", "limited"), steps=steps)
    assert reply == Reply("permit 41")
    assert asked == [
        ("acquire", ("openai", 3.0)),
        ("acquire", ("openai", 3.0)),  # asked again after the wait the parent said
        ("pause", ("openai", 7)),
        ("release", 41),
    ]


async def _never_record(
    name: str, value: str, fingerprint: str | None = None, call: str | None = None
) -> StepRecord:
    raise AssertionError("no step here")


async def test_a_memory_hog_is_stopped_in_its_child_by_the_quarantine_memory_limit() -> None:
    limit = 600 * 2**20
    with trio.fail_after(START_WITHIN), pytest.raises(QuarantineDeath) as death:
        await run_in_quarantine(QuarantineSpec(SPEC.agent, memory=limit), Task("h", "hog"))
    assert death.value.returncode == EXIT_OUT_OF_MEMORY
    assert "ran out of memory (limit 600 MiB, --quarantine-memory)" in str(death.value)
    # the same limit leaves an ordinary run alone
    with trio.fail_after(START_WITHIN):
        reply = await run_in_quarantine(QuarantineSpec(SPEC.agent, memory=limit), Task("e", "x"))
    assert reply == Reply("echo: x")


async def test_an_agent_the_child_cannot_start_is_not_a_death_of_the_task() -> None:
    with trio.fail_after(START_WITHIN), pytest.raises(QuarantineStartError, match=r"no\.such"):
        await run_in_quarantine(QuarantineSpec("no.such.module:factory"), Task("t", "x"))


async def test_a_cancelled_run_kills_its_child_and_raises_no_death() -> None:
    pids: list[int] = []
    with trio.move_on_after(START_WITHIN) as scope:
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                await run_in_quarantine(SPEC, Task("s", "sleep"), on_started=pids.append)

            nursery.start_soon(run)
            await wait_until(_started(pids), within=START_WITHIN)
            await trio.sleep(0.5)
            nursery.cancel_scope.cancel()
    assert not scope.cancelled_caught
    [pid] = pids
    assert _gone(pid)


def _started(pids: list[int]) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return bool(pids)

    return check


PARENT = """
import sys, trio
from tether.bridge import Task
from tether.bridge.pool._quarantine import QuarantineSpec, run_in_quarantine
async def main():
    await run_in_quarantine(QuarantineSpec(sys.argv[1]), Task("s", "sleep"),
                            on_started=lambda pid: print(pid, flush=True))
trio.run(main)
"""


async def test_a_child_dies_with_its_parent(tmp_path: Path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    parent = await trio.lowlevel.open_process(
        [sys.executable, str(script), SPEC.agent], stdout=subprocess.PIPE
    )
    assert parent.stdout is not None
    try:
        with trio.fail_after(START_WITHIN):
            line = b""
            while not line.endswith(b"\n"):
                line += await parent.stdout.receive_some(100)
        child = int(line)
        assert not _gone(child)
        parent.send_signal(signal.SIGKILL)
        await parent.wait()

        async def child_gone() -> bool:
            return _gone(child)

        await wait_until(child_gone, within=10)
    finally:
        if parent.returncode is None:
            parent.kill()
            await parent.wait()


def test_a_process_runs_at_most_its_quarantine_processes_at_once() -> None:
    q = Quarantine(SPEC, processes=2, max_deaths=3)
    assert q.reserve(5) == 2  # a claim of five may take two suspects
    assert q.reserve(1) == 0  # none while both places are taken
    q.give_back(1)  # a suspect's run ended
    assert q.reserve(3) == 1
    with pytest.raises(ValueError, match="quarantine processes must be an int >= 1"):
        Quarantine(SPEC, processes=0)
    with pytest.raises(ValueError, match="max_quarantine_deaths must be an int >= 1"):
        Quarantine(SPEC, max_deaths=0)


async def test_children_that_cannot_start_close_the_quarantine_for_a_doubling_while() -> None:
    now = [100.0]
    q = Quarantine(QuarantineSpec("no.such.module:factory"), processes=2, clock=lambda: now[0])

    async def fail_to_start(n: int, longest: float) -> None:
        assert q.reserve(1) == 1
        with trio.fail_after(START_WITHIN), pytest.raises(QuarantineStartError) as failed:
            await q.run(Task(f"t{n}", "x"))
        q.give_back(1)
        assert "no quarantine child starts here for the next" in str(failed.value)
        assert q.start_failures == n
        assert q.reserve(1) == 0  # closed: the suspect stays in the store
        now[0] += longest * 0.79  # the backoff's jitter shortens a wait by at most 20 %
        assert q.reserve(1) == 0
        now[0] += longest * 0.21 + 0.01
        assert q.reserve(1) == 1  # open again once the wait is over
        q.give_back(1)

    await fail_to_start(1, longest=1.0)
    await fail_to_start(2, longest=2.0)  # doubled
    assert (q.runs, q.deaths) == (2, 0)  # a start failure is nobody's death

    q.spec = SPEC  # the operator fixed the agent: a child that starts resets the backoff
    with trio.fail_after(START_WITHIN):
        assert await q.run(Task("ok", "x")) == Reply("echo: x")
    q.spec = QuarantineSpec("no.such.module:factory")
    await fail_to_start(3, longest=1.0)  # the first wait again, not the third


async def test_a_quarantined_run_checks_its_records_against_the_parents_version() -> None:
    """Issue #53: the child's run is checked against the records as the parent's would be (the
    version comes with the task), a mismatch comes back as the parent's ``Permanent``, and a
    new step is recorded by the parent with its arguments' fingerprint."""
    recorded: list[tuple[str, str | None]] = []

    async def record(
        name: str, value: str, fingerprint: str | None = None, call: str | None = None
    ) -> StepRecord:
        recorded.append((name, fingerprint))
        return StepRecord(name, value, 5.0, 1, len(value), "2", fingerprint)

    asked = fingerprint((), {})
    same = StepRecord("a", '"kept-a"', 1.0, 1, 8, "1", asked)
    steps = ChildSteps((same,), record, lambda *args: None, 30.0, version="2")
    with trio.fail_after(START_WITHIN):
        reply = await run_in_quarantine(SPEC, Task("steps", "steps"), steps=steps)
    assert reply == Reply("kept-a+fresh-b")
    assert recorded == [("b", asked)]
    other = attrs.evolve(same, fingerprint="0" * 16)
    with trio.fail_after(START_WITHIN), pytest.raises(Permanent) as caught:
        await run_in_quarantine(
            SPEC, Task("steps", "steps"), steps=attrs.evolve(steps, recorded=(other,))
        )
    assert "step 'a' was recorded by version '1' with other arguments" in caught.value.reason
    assert "than version '2' asks" in caught.value.reason
    assert recorded == [("b", asked)]  # nothing more ran
