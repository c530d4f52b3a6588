"""What the hangs page says about what PyTorch's own tools answered while a job hung: the
debug handlers every rank served (its health check, its py-spy page), the debug server's
flight-recorder page, and the rank fr_trace blamed. Each answer depends on this build's
torch and on the machine (py-spy on the ranks' PATH or not, the order in which a folder
lists its files), so the page words what it got, never what it expected."""

from __future__ import annotations

import json

from workers.verdicts import Verdict, ranks_named, verdict


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
    no_handler=dict(answers={"0": "Handler pyspy_dump not found: Failed to find handler "
                                  "pyspy_dump"}),
    failed=dict(answers={"0": None}),
)
def pyspy_page(answers: dict[str, str | None]) -> Verdict:
    """What the ``pyspy_dump`` handler answered: it runs ``py-spy`` from the rank's PATH."""
    texts = list(answers.values())
    if texts and all(text and "Thread" in text for text in texts):
        return Verdict("worked", "its pyspy_dump handler returned each rank's stacks: "
                                 "py-spy was on the ranks' PATH in this build")
    if any(text and text.startswith("Handler pyspy_dump not found") for text in texts):
        return Verdict("no_handler", "its worker server has no pyspy_dump handler in this "
                                     "release of PyTorch")
    if any(text and "py-spy: not found" in text for text in texts):
        return Verdict("missing", "its pyspy_dump handler answered \"py-spy: not found\": "
                                  "it runs py-spy from the rank's PATH, and the virtual "
                                  "environment's bin folder was not on it in this build")
    return Verdict("failed", "its pyspy_dump handler returned no stacks in this build")


@verdict(
    keyerror=dict(answer="KeyError: ('0', 0)", job="the skip job's"),
    built=dict(answer="built", job="the skip job's"),
    failed=dict(answer="ValueError: not enough values to unpack", job="the skip job's"),
    unloadable=dict(answer="unloadable: No module named 'jinja2'", job="the skip job's"),
)
def trace_page(answer: str, job: str) -> Verdict:
    """What the debug server's FlightRecorder page code made of the ranks' JSON dumps, those
    of ``job`` (its name, possessive); fr_trace above read another job's pickled ones."""
    if answer.startswith("KeyError"):
        return Verdict("keyerror", f"the code that builds its FlightRecorder page, fed "
                                   f"{job} JSON dumps, fails as fr_trace did: `{answer}`")
    if answer.startswith("unloadable: "):
        why = answer.removeprefix("unloadable: ")
        return Verdict("unloadable", f"the code that builds its FlightRecorder page could "
                                     f"not be imported here (`{why}`), so it never read "
                                     f"{job} JSON dumps")
    if answer == "built":
        return Verdict("built", f"the code that builds its FlightRecorder page built its "
                                f"tables from {job} JSON dumps")
    return Verdict("failed", f"the code that builds its FlightRecorder page failed on "
                             f"{job} JSON dumps: `{answer}`")


@verdict(
    same=dict(blamed=[2], culprits=[2], waiting=[0, 1]),
    majority=dict(blamed=[0, 1], culprits=[2], waiting=[0, 1]),
    other=dict(blamed=[1], culprits=[2], waiting=[0, 1]),
    unnamed=dict(blamed=[], culprits=[2], waiting=[0, 1]),
)
def fr_trace_blame(blamed: list[int], culprits: list[int], waiting: list[int]) -> Verdict:
    """Whom fr_trace called "Culprit rank" in a mismatch (none, where it printed no such
    line), against the diagnosis's culprits (the minority) and the ranks it found waiting
    (the majority)."""
    if not blamed:
        return Verdict("unnamed", f"fr_trace named no culprit rank; the diagnosis blamed "
                                  f"{ranks_named(culprits)}")
    named = ranks_named(blamed)
    if sorted(blamed) == sorted(culprits):
        return Verdict("same", f"fr_trace blamed {named}, as the diagnosis did")
    if sorted(blamed) == sorted(waiting):
        return Verdict("majority", f"fr_trace blamed {named}, the majority: it takes the "
                                   f"first dump it reads as the rule, here "
                                   f"{ranks_named(culprits)}'s, and the order it reads a "
                                   f"folder in is the file system's")
    return Verdict("other", f"fr_trace blamed {named}, and the diagnosis blamed "
                            f"{ranks_named(culprits)}")


_BOOK_RANKS = dict(  # the book's ranks py-spy read no stacks of, by why and how many
    failed_every=dict(ranks=["failed"]),
    mixed_every=dict(ranks=["refused", "failed"]),
    refused_some=dict(ranks=["refused"], every=False),
    failed=dict(ranks=["failed"], every=False),
    mixed_some=dict(ranks=["refused", "failed"], every=False),
)


@verdict(
    read=dict(plain="read", ranks=[]),
    plain_refused=dict(plain="refused", ranks=[]),
    refused=dict(plain="refused", ranks=["refused"]),
    refused_ranks=dict(plain="read", ranks=["refused"]),
    free_threaded=dict(plain="free-threaded", ranks=["free-threaded"]),
    **{name: dict(plain="read", **example) for name, example in _BOOK_RANKS.items()},
    **{f"{name}_plain_refused": dict(plain="refused", **example)
       for name, example in _BOOK_RANKS.items()},
)
def stacks_here(plain: str, ranks: list[str], every: bool = True) -> Verdict:
    """Whether py-spy read the stacks in this build: ``plain``, what it did with the plain
    program ("read", "refused" or "free-threaded"); ``ranks``, why it read no stacks of
    some of the book's ranks in the five hangs (a key of ``workers.hangs.UNREAD`` each;
    empty when it read them all); ``every``, whether it read no rank of any hang. A
    sentence."""
    if "free-threaded" in (plain, *ranks):
        return Verdict("free_threaded", "This build's Python is free-threaded, whose "
                                        "stacks py-spy 0.4 cannot read: the diagnoses "
                                        "below read the flight recorders alone, and the "
                                        "plain program, which serves none, could not be "
                                        "diagnosed.")
    refused, failed = "refused" in ranks, "failed" in ranks
    if refused and not failed and every:
        if plain == "refused":
            return Verdict("refused", "Here the kernel refused py-spy every rank, the "
                                      "book's too (another user's processes, Yama's "
                                      "ptrace_scope at 2 or 3, or a container without "
                                      "SYS_PTRACE): the diagnoses below read the flight "
                                      "recorders alone, and the plain program, which "
                                      "serves none, could not be diagnosed.")
        return Verdict("refused_ranks", "Here the kernel let py-spy read the plain "
                                        "program's ranks and refused it every one of the "
                                        "book's (a security module or a container that "
                                        "treats them otherwise): the diagnoses below read "
                                        "the flight recorders alone.")
    if not ranks:
        if plain == "refused":
            return Verdict("plain_refused", "Here the kernel refused py-spy the plain "
                                            "program's ranks (under Yama's ptrace_scope=1 "
                                            "only a process's ancestors may read it) and "
                                            "let it read the book's, which allow it as "
                                            "they start.")
        return Verdict("read", "Here py-spy read every rank's stacks.")
    if every:
        name = "mixed_every" if refused else "failed_every"
        book = ("read none of the book's ranks' stacks (the kernel refused it some, and "
                "the others answered without stacks)" if refused else
                "read none of the book's ranks' stacks (they answered, without stacks)")
        book += ": the diagnoses below read the flight recorders alone."
    else:
        name = ("mixed_some" if failed else "refused_some") if refused else "failed"
        book = {"mixed_some": "was refused some of the book's ranks by the kernel and "
                              "read no stacks of others",
                "refused_some": "was refused some of the book's ranks by the kernel "
                                "(another user's processes, or a container without "
                                "SYS_PTRACE)",
                "failed": "read the stacks of only some of the book's ranks"}[name]
        book += ": for the ranks it could not read, the diagnosis used their flight " \
                "recorders alone."
    if plain == "refused":
        return Verdict(f"{name}_plain_refused",
                       "Here the kernel refused py-spy the plain program's ranks (under "
                       "Yama's ptrace_scope=1 only a process's ancestors may read it), "
                       f"and py-spy {book}")
    return Verdict(name, f"Here py-spy {book}")


_PLAIN = dict(spied="main (hang.py:29)", reduce_line=29, sleep_line=27,
              diagnosis="rank 1 is behind: rank 0 waits in all_reduce",
              stopped="4 processes, 0 left")


@verdict(
    read=dict(stacks="read", **_PLAIN),
    refused=dict(stacks="refused", **{**_PLAIN, "spied": None, "diagnosis": None}),
    free_threaded=dict(stacks="free-threaded",
                       **{**_PLAIN, "spied": None, "diagnosis": None}),
)
def plain_program_seen(stacks: str, spied: str | None, reduce_line: int, sleep_line: int,
                       diagnosis: str | None, stopped: str) -> Verdict:
    """What the second-terminal run showed of the plain program: ``stacks``, whether
    py-spy read it ("read", "refused", "free-threaded"); ``spied``, the frame py-spy showed
    for rank 0; the lines faulthandler showed; the diagnosis's verdict; what stopping the
    job left. Markdown, a paragraph."""
    handler = (f"`faulthandler` printed rank 0 at line {reduce_line}, its `all_reduce`, "
               f"and rank 1 at line {sleep_line}, its `time.sleep`")
    if stacks == "read":
        return Verdict("read", f"`py-spy dump` showed rank 0 in `all_reduce`, called from "
                               f"{spied}, the line of the program that waits. {handler}. "
                               f"Neither needed the job's help beyond the one `register` "
                               f"line, and py-spy needed none at all. With only the "
                               f"stacks, the diagnosis reasons that the rank in no "
                               f"collective is the one the others wait for: "
                               f"\"{diagnosis}\". Then it stopped every process under "
                               f"the program's pid, its ranks, the program itself and "
                               f"the resource tracker that spawn starts beside them "
                               f"({stopped}).")
    tail = (f"{handler}: it runs inside the rank, and needs nothing beyond the one "
            f"`register` line. Without py-spy the diagnosis reads flight recorders alone, "
            f"and the plain program serves none: it had nothing to read, and the worker "
            f"stopped the job itself ({stopped}).")
    if stacks == "refused":
        return Verdict("refused", f"`py-spy dump` was refused here: the kernel did not let "
                                  f"it read rank 0 (What goes wrong, below, says why). "
                                  f"{tail}")
    return Verdict("free_threaded", f"`py-spy dump` was not run here: this build's Python "
                                    f"is free-threaded, and py-spy 0.4 cannot read its "
                                    f"stacks. {tail}")
