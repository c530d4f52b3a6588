"""Labs: the reader writes one function in ``labs/<lab>.py``, and real ranks check it.

    python -m workers.labs list
    python -m workers.labs check ring                  # checks labs/ring.py
    python -m workers.labs check ring --file my_ring.py

``check`` runs the reader's function on gloo ranks on this machine, at several world sizes
(one of them a size the chapter's page does not use), compares what every rank holds with
the library or with one process, and audits the algorithm where the algorithm is the
lesson (bytes and messages per rank, waits, every rank returning). It counts every call of
a collective however the solution reached it (``dist.all_reduce``, the same function from
``torch.distributed.distributed_c10d``, a ``functools.partial``, the process group's own
methods) and holds it to what the lab's docstring allows. The inputs are random: which
rank is late, how many batches each rank has, the values; the verdict names the seed, and
``--seed N`` checks with the same inputs again. It prints a short verdict and exits 0
(passed) or 1 (failed); a solution that deadlocks is stopped after a few seconds and
reported as a deadlock, every rank stopped. It exits 2, with one line, when it cannot
check: an unknown lab, a missing file, a file without the function, a stub still raising
NotImplementedError.

In Python: ``check("ring", "labs/ring.py", seed=7)`` returns the ``Verdict``.
"""

from __future__ import annotations

import importlib
import random
import time

from workers.labs.harness import (
    BadInput,
    Finding,
    Verdict,
    calls_summary,
    ended_findings,
    inspect_source,
    list_of,
    not_implemented,
    resolve,
    run_job,
    shown,
)

# The labs, in the book's order.
LABS = ("barrier", "two_collectives", "ring", "pair_groups", "average_gradients",
        "comm_hook", "zero1", "cost_fit", "backend_allreduce", "hogwild", "uneven",
        "hung_rank")


def lab_module(name: str):
    if name not in LABS:
        raise BadInput(f"unknown lab {name!r}: the labs are {', '.join(LABS)}")
    return importlib.import_module(f"workers.labs.{name}")


def check(lab: str, path=None, timeout: float | None = None,
          world_sizes=None, events=None, per_rank: bool = False,
          seed: int | None = None) -> Verdict:
    """Check the reader's solution of ``lab`` (default file ``labs/<lab>.py``).
    ``per_rank``: the verdict also says what each rank sent, received and held.
    ``seed``: the random inputs' (default: a new one, which the verdict names)."""
    begin = time.monotonic()
    try:
        module = lab_module(lab)
        path = resolve(path if path is not None else f"labs/{lab}.py")
        inspect_source(path, module.FUNCTION)
        if seed is None:
            seed = random.SystemRandom().randrange(1, 100_000)
        return checked(module, lab, path, timeout or module.TIMEOUT,
                       world_sizes or module.WORLD_SIZES, events, begin, per_rank, seed)
    except BadInput as error:
        return Verdict(lab, 2, [str(error)], time.monotonic() - begin)


def inputs(module, world_size: int, seed: int):
    """What every rank of the job at ``world_size`` is given: random, from ``seed``
    alone, so that ``--seed`` gives the same inputs at that size whatever the others."""
    return module.setup(world_size, random.Random(f"{module.__name__} {seed} {world_size}"))


def checked(module, lab, path, timeout, world_sizes, events, begin, per_rank,
            seed) -> Verdict:
    sizes = list_of(world_sizes)
    units = getattr(module, "UNITS", "ranks")
    lines = [f"{lab} ({module.CHAPTER}): checking {module.FUNCTION}() of {shown(path)} "
             f"on {sizes} {'gloo ' * (units == 'ranks')}{units}, seed {seed}"]
    outcomes, failed = [], False
    # each size's inputs only once it is checked: a failed size ends the check, and
    # hung_rank's inputs are jobs of their own
    for world_size in world_sizes:
        given = inputs(module, world_size, seed)
        outcome = run_job(module, world_size, path, timeout, given)
        outcomes.append(outcome)
        if any(error["not_implemented"] for error in outcome.raised.values()):
            raise BadInput(not_implemented(path, module.FUNCTION))
        findings = ended_findings(outcome, module.FUNCTION)
        if findings:  # the lab may know which mistake ends a job that way
            explain = getattr(module, "explain", lambda *args: [])
            findings += [Finding(False, text)
                         for text in explain(world_size, outcome, given)]
        else:
            findings = module.judge(world_size, outcome, given)
        failed = not all(finding.held for finding in findings)
        label = f"world size {world_size}" if units == "ranks" else f"{world_size} {units}"
        lines.append(f"{label}{module.describe(world_size, given)}:")
        for finding in findings:
            mark = "ok  " if finding.held else "FAIL"
            first, *rest = finding.text.splitlines()
            lines.append(f"  {mark} {first}")
            lines.extend(f"       {line.strip()}" for line in rest)
        if per_rank:
            extra = getattr(module, "per_rank", lambda rank, result, given: "")
            one = "rank" if units == "ranks" else "process"
            for rank, result in sorted(outcome.results.items()):
                said = "; ".join(filter(None, [calls_summary(result["calls"]),
                                               extra(rank, result, given)]))
                lines.append(f"       {one} {rank}: {said}")
        if events is not None:
            events.emit("main", "lab", lab=lab, world_size=world_size,
                        passed=not failed, seconds=outcome.seconds,
                        findings=[[f.held, f.text] for f in findings])
        if failed:
            from workers.labs.harness import printed_lines

            lines.extend(printed_lines(outcome))
            break
    seconds = time.monotonic() - begin
    if failed:
        lines.append(f"FAILED: {module.FUNCTION}() with {world_size} {units} (seed {seed}: "
                     f"--seed {seed} checks the same inputs again). "
                     f"Reread {module.REREAD}.")
    else:
        lines.append(f"PASSED: {module.FUNCTION}() {module.PASSED}, with {sizes} {units} "
                     f"({seconds:.1f} s)")
    return Verdict(lab, 1 if failed else 0, lines, seconds, outcomes, seed)


def command_line():
    from workers.ranks import Parser, add_common_options

    parser = Parser(prog="python -m workers.labs", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("list", help="name each lab, its chapter and what it asks")
    one = commands.add_parser("check", help="check your solution of a lab on real ranks")
    one.add_argument("lab", help="the lab's name (see list)")
    one.add_argument("--file", metavar="PATH",
                     help="the file with your function (default labs/<lab>.py)")
    one.add_argument("--world-sizes", type=int, nargs="+", metavar="N",
                     help="check at these world sizes only (default: the lab's)")
    one.add_argument("--per-rank", action="store_true",
                     help="also say what each rank sent, received and held")
    one.add_argument("--seed", type=int, metavar="N",
                     help="the random inputs' seed: a verdict names its own, and this "
                          "checks with the same inputs again (default: a new one)")
    add_common_options(one, timeout=0)
    one.set_defaults(timeout=None)
    for action in one._actions:
        if action.dest == "timeout":
            action.help = ("seconds each job may run before it is called a deadlock "
                           "(default: the lab's, a few seconds)")
    return parser


def main(argv=None) -> int:
    import sys

    from workers.ranks import open_events

    def fail(text: str) -> int:
        sys.stderr.write(f"python -m workers.labs: error: {text}\n")
        return 2

    args = command_line().parse_args(argv)
    if args.command == "list":
        for name in LABS:
            module = lab_module(name)
            print(f"{name:<18} {module.CHAPTER:<14} {module.ASKS}")
        return 0
    if args.world_sizes and min(args.world_sizes) < 1:
        return fail("--world-sizes: every world size must be at least 1")
    events = open_events(args.events)
    if args.seed is not None and args.seed < 0:
        return fail("--seed: the seed must be 0 or more")
    verdict = check(args.lab, args.file, args.timeout, args.world_sizes, events,
                    args.per_rank, args.seed)
    if verdict.code == 2:
        return fail(str(verdict))
    print(verdict, flush=True)
    return verdict.code


__all__ = ["LABS", "check", "main", "command_line"]
