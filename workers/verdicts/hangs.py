"""What the hangs page says about what PyTorch's own tools answered while a job hung: the
debug handlers every rank served (its health check, its py-spy page), the debug server's
flight-recorder page, and the rank fr_trace blamed. Each answer depends on this build's
torch and on the machine (py-spy on the ranks' PATH or not, the order in which a folder
lists its files), so the page words what it got, never what it expected."""

from __future__ import annotations

import json

from workers.verdicts import Verdict, verdict


def _healthy(answer: str | None) -> bool | None:
    try:
        return bool(json.loads(answer)["healthy"])
    except (TypeError, ValueError, KeyError):
        return None


@verdict(
    healthy=dict(answers={"0": '{"healthy":true,"unhealthy_backends":[]}',
                          "1": '{"healthy":true,"unhealthy_backends":[]}'}),
    unhealthy=dict(answers={"0": '{"healthy":true,"unhealthy_backends":[]}',
                            "1": '{"healthy":false,"unhealthy_backends":["gloo"]}'}),
    unhealthy_several=dict(answers={
        "0": '{"healthy":true,"unhealthy_backends":[]}',
        "1": '{"healthy":false,"unhealthy_backends":["gloo"]}',
        "2": '{"healthy":false,"unhealthy_backends":["gloo"]}'}),
    unanswered=dict(answers={"0": None, "1": "Handler c10d_health_check not found"}),
)
def health_check(answers: dict[str, str | None]) -> Verdict:
    """What every rank's ``c10d_health_check`` handler answered during the hang."""
    said = {rank: _healthy(answer) for rank, answer in answers.items()}
    if all(value is True for value in said.values()):
        return Verdict("healthy", f"every rank's c10d_health_check answered "
                                  f"`\"healthy\":true` while the job hung, all "
                                  f"{len(said)} ranks of it: a rank that waits for a "
                                  f"peer is healthy by that check")
    if any(value is False for value in said.values()):
        sick = sorted((rank for rank, value in said.items() if value is False), key=int)
        if len(sick) == 1:
            return Verdict("unhealthy", f"c10d_health_check called rank {sick[0]} "
                                        f"unhealthy while the job hung")
        return Verdict("unhealthy_several", f"c10d_health_check called ranks "
                                            f"{', '.join(sick[:-1])} and {sick[-1]} "
                                            f"unhealthy while the job hung")
    return Verdict("unanswered", "c10d_health_check gave no answer that says healthy or "
                                 "not on at least one rank")


@verdict(
    worked=dict(answers={"0": "Process 12: python\nThread 12 (idle): \"MainThread\""}),
    missing=dict(answers={"0": "sh: 1: py-spy: not found\n"}),
    failed=dict(answers={"0": None}),
)
def pyspy_page(answers: dict[str, str | None]) -> Verdict:
    """What the ``pyspy_dump`` handler answered: it runs ``py-spy`` from the rank's PATH."""
    texts = list(answers.values())
    if texts and all(text and "Thread" in text for text in texts):
        return Verdict("worked", "its pyspy_dump handler returned each rank's stacks: "
                                 "py-spy was on the ranks' PATH in this build")
    if any(text and "not found" in text for text in texts):
        return Verdict("missing", "its pyspy_dump handler answered \"py-spy: not found\": "
                                  "it runs py-spy from the rank's PATH, and the virtual "
                                  "environment's bin folder was not on it in this build")
    return Verdict("failed", "its pyspy_dump handler returned no stacks in this build")


@verdict(
    keyerror=dict(answer="KeyError: ('0', 0)"),
    built=dict(answer="built"),
    failed=dict(answer="ImportError: no module named jinja2"),
)
def trace_page(answer: str) -> Verdict:
    """What the debug server's FlightRecorder page code made of the ranks' JSON dumps."""
    if answer.startswith("KeyError"):
        return Verdict("keyerror", f"its FlightRecorder page, fed the same dumps, fails "
                                   f"the same way: {answer}")
    if answer == "built":
        return Verdict("built", "its FlightRecorder page built its tables from the dumps")
    return Verdict("failed", f"its FlightRecorder page failed: {answer}")


@verdict(
    same=dict(blamed=[2], culprits=[2], waiting=[0, 1]),
    majority=dict(blamed=[0, 1], culprits=[2], waiting=[0, 1]),
    other=dict(blamed=[1], culprits=[2], waiting=[0, 1]),
)
def fr_trace_blame(blamed: list[int], culprits: list[int], waiting: list[int]) -> Verdict:
    """Whom fr_trace called "Culprit rank" in a mismatch, against the diagnosis's culprits
    (the minority) and the ranks it found waiting (the majority)."""
    named = ", ".join(map(str, sorted(blamed)))
    if sorted(blamed) == sorted(culprits):
        return Verdict("same", f"fr_trace blamed rank {named}, as the diagnosis did")
    if sorted(blamed) == sorted(waiting):
        return Verdict("majority", f"fr_trace blamed ranks {named}, the majority: it "
                                   f"takes the first dump it reads as the rule, here "
                                   f"rank {', '.join(map(str, culprits))}'s, and the "
                                   f"order it reads a folder in is the file system's")
    return Verdict("other", f"fr_trace blamed rank {named}, and the diagnosis rank "
                            f"{', '.join(map(str, culprits))}")
