"""Lab backend_allreduce (backend): the all-reduce of the chapter's backend, written again.

The reader's ``allreduce(self, tensors, opts)`` becomes the method of a subclass of the
chapter's ``StoreBackend``, registered as a backend of its own; a group of it beside the
job's gloo group runs every case on both, from the same inputs.

The contract (labs/backend_allreduce.py), clause by clause, and what checks each:

- Each tensor holds the reduction over every rank: compared with gloo's all_reduce of the
  same inputs; integers, MIN and MAX exactly, floating-point SUM and PRODUCT within the
  bound two orders of the same roundings allow (2(N - 1) u times the sum of magnitudes, u
  the dtype's unit roundoff, or of the product's magnitude).
- SUM, PRODUCT, MIN and MAX, as ``opts.reduceOp`` says: a case of each; the sum where
  another was asked is named.
- In its own dtype: float16, bfloat16, float32, float64, uint8, int32 and int64; an int64
  sum near 2**60 (wrong when summed in float32 or float64) and a float64 sum whose parts
  differ by 1e8 in magnitude (wrong when summed in float32).
- Any shape, 0 elements included, and views that are not contiguous: a tensor of 0
  elements, one of 1, and the transpose of a slice of a larger tensor, whose result is
  read through the larger one (a result that never reached the caller's memory shows).
- Several tensors in one call: the backend's ``allreduce`` called with four tensors of
  different dtypes and shapes, one empty and one an int64 near 2**60 (each must be reduced,
  in its own dtype, under its own keys).
- Every rank the same bits: a float32 and a float64 sum whose roundings depend on the
  order, at 3 ranks, every rank's bits compared.
- The communication on the backend's thread: one rank calls a second late; the others'
  ``async_op=True`` calls must return at once (under half of the delay), and ``wait()``
  must not return before the result is there (it is read at once after ``wait()``, and
  again later, to name a Work that was done too early).
- Two calls in a row on the same tensor: the second reduces the first's result.
- A reduction it lacks (BAND, AVG) raises on every rank, at the call or at ``wait()``, and
  the job does not hang.
- Integers exactly: a uint8 sum past 255, which wraps round as gloo's does.
- The collective numbered once, in the call (``self.next_seq()`` on the caller's thread:
  each call's count of numbers taken is noted), and
  every put, get and finish on the backend's thread: each method's caller is noted.
- The Work's future holds the list of the caller's tensors, as DDP's hooks need.
- No torch.distributed call of the reader's own: every call the reader's code makes is
  counted.
- World sizes 2 and 3.
"""

from __future__ import annotations

import threading
import time

from workers.labs.harness import Finding, list_of

THREADS: dict[str, set] = {}  # this rank: its methods, and where the reader called them
NUMBERS: list[int] = []  # this rank: how many numbers each call took, in the call

CHAPTER = "backend"
FUNCTION = "allreduce"
ASKS = "the all-reduce of your own backend: any dtype, shape and reduction, on its thread"
REREAD = '"The book\'s backend" and "A thread of its own" in the backend chapter'
PASSED = "is this backend's all-reduce"
WORLD_SIZES = (2, 3)
GROUP = True  # the job's gloo group gives the answers
PRELOAD = ("workers.backend",)
TIMEOUT = 20.0
LATE = 1.0  # seconds the last rank waits before a call, in the asynchronous case

# (name, dtype, shape, reduction, kind of values)
CASES = (
    ("float32 SUM", "float32", (5, 7), "SUM", "ordinary"),
    ("float64 SUM of parts 1e8 apart", "float64", (6,), "SUM", "spread"),
    ("float32 SUM whose rounding depends on the order", "float32", (16,), "SUM", "order"),
    ("int64 SUM near 2**60", "int64", (4,), "SUM", "huge"),
    ("int32 MIN", "int32", (3, 3), "MIN", "ordinary"),
    ("float64 PRODUCT", "float64", (4,), "PRODUCT", "near one"),
    ("bfloat16 MAX", "bfloat16", (8,), "MAX", "ordinary"),
    ("float16 SUM", "float16", (8,), "SUM", "ordinary"),
    ("uint8 MAX", "uint8", (5,), "MAX", "bytes"),
    ("uint8 SUM past 255, which wraps round as gloo's does", "uint8", (12,), "SUM",
     "bytes"),
    ("0 elements", "float32", (0,), "SUM", "ordinary"),
    ("1 element", "float64", (1,), "SUM", "ordinary"),
)


def setup(world_size: int, rng) -> dict:
    return {"seed": rng.randrange(1_000_000), "late": world_size - 1}


def describe(world_size: int, given: dict) -> str:
    return f", rank {given['late']} late in the asynchronous case"


def values(rank: int, dtype: str, shape, kind: str, seed: int):
    """Rank ``rank``'s input of one case: every rank can make every rank's."""
    import torch

    generator = torch.Generator().manual_seed(seed * 100 + rank)
    numel = 1
    for size in shape:
        numel *= size
    if kind == "huge":  # exact in int64, not in a float's 53 bits
        return (2**60 + torch.randint(0, 1000, shape, generator=generator)).to(torch.int64)
    if kind == "bytes":
        return torch.randint(0, 256, shape, generator=generator).to(torch.uint8)
    if dtype.startswith("int"):
        whole = torch.randint(-1000, 1000, shape, generator=generator)
        return whole.to(getattr(torch, dtype))
    noise = torch.rand(shape, generator=generator, dtype=torch.float64)
    if kind == "spread":  # rank 0's parts are 1e8 times the others': float32 loses them
        return (noise + 1) * (1e8 if rank == 0 else 1.0) + noise * 1e-6
    if kind == "order":  # magnitudes 1, 1e-7 and -1: each order rounds its own way
        return ((noise - 0.5) * [1.0, 3e-8, 1.0, 7e-8][rank % 4]).to(torch.float32)
    if kind == "near one":
        return 1 + (noise - 0.5) / 8
    return ((noise - 0.5) * 100).to(getattr(torch, dtype))


def bound(parts, op: str):
    """How far two orders of the same reduction can be apart (exact for the rest)."""
    import torch

    if not parts[0].is_floating_point() or op in ("MIN", "MAX"):
        return torch.zeros(parts[0].shape, dtype=torch.float64)
    unit = torch.finfo(parts[0].dtype).eps / 2
    if op == "SUM":
        scale = sum(p.double().abs() for p in parts)
    else:
        scale = torch.stack([p.double() for p in parts]).prod(0).abs()
    return 2 * (len(parts) - 1) * unit * scale * 1.01


def digest(tensor) -> str:
    import hashlib

    import torch

    flat = tensor.detach().contiguous().view(-1).view(torch.uint8)
    return hashlib.sha256(flat.numpy().tobytes()).hexdigest()


def lab_backend(solution, raised: list):
    """A group whose backend is the chapter's, with the reader's ``allreduce``; and the
    backend object itself (for a call with several tensors)."""
    import torch.distributed as dist

    from workers.backend import BACKEND_CLASS, KEEP
    from workers.labs.hung_rank import raised_at

    class Lab(BACKEND_CLASS):
        """The chapter's backend with the reader's allreduce, noting which thread called
        each of its methods (the backend's own thread is named "mine")."""

        def submit(self, run, result):
            def reported():
                try:
                    run()
                except Exception as error:
                    raised.append(raised_at(error, solution))
                    raise
            return super().submit(reported, result)

        def noted(self, method: str) -> None:
            thread = threading.current_thread()
            where = ("thread" if thread.name == "mine" else
                     "call" if thread is threading.main_thread() else "another thread")
            THREADS.setdefault(method, set()).add(where)

        def put(self, *args):
            self.noted("put")
            return super().put(*args)

        def get(self, *args):
            self.noted("get")
            return super().get(*args)

        def finish(self, *args):
            self.noted("finish")
            return super().finish(*args)

        def next_seq(self):
            self.noted("next_seq")
            return super().next_seq()

    def allreduce(self, tensors, opts):
        """The reader's allreduce, counting the numbers it takes in the call."""
        before = self.seq
        work = solution(self, tensors, opts)  # a call that raises took none that count
        NUMBERS.append(self.seq - before)
        return work

    Lab.allreduce = allreduce
    dist.Backend.register_backend("lab", lambda *a: KEEP.append(Lab(*a)) or KEEP[-1],
                                  devices=["cpu"])
    group = dist.new_group(backend="lab")
    return group, KEEP[-1]


def on_rank(rank: int, world_size: int, solution, calls, given: dict) -> dict:
    import torch
    import torch.distributed as dist

    from workers.labs.hung_rank import raised_at

    raised: list[str] = []
    group, backend = lab_backend(solution, raised)
    seed, results = given["seed"], {}

    def attempt(name, call):
        try:
            with calls.reader():
                call()
            return None
        except NotImplementedError:
            raise
        except Exception as error:  # the reader's mistake, said per case
            return raised[-1] if raised else raised_at(error, solution)

    for index, (name, dtype, shape, op, kind) in enumerate(CASES):
        everyone = [values(r, dtype, shape, kind, seed + index) for r in range(world_size)]
        base = everyone[rank].clone()
        mine = base.clone()
        error = attempt(name, lambda mine=mine, op=op: dist.all_reduce(
            mine, op=getattr(dist.ReduceOp, op), group=group, async_op=True).wait())
        expected = everyone[rank].clone()
        dist.all_reduce(expected, op=getattr(dist.ReduceOp, op))
        results[name] = {"got": mine, "expected": expected, "start": base, "error": error,
                         "bound": bound(everyone, op), "digest": digest(mine), "op": op}
    # a view that is not contiguous: the transpose of a slice, read through the whole
    whole = torch.full((5, 4), 7.0)
    whole[1:4] = values(rank, "float32", (3, 4), "ordinary", seed + 50)
    view = whole[1:4].t()
    error = attempt("view", lambda: dist.all_reduce(view, group=group,
                                                    async_op=True).wait())
    expected = values(rank, "float32", (3, 4), "ordinary", seed + 50)
    dist.all_reduce(expected)
    results["a view that is not contiguous"] = {
        "got": whole[1:4].clone(), "expected": expected, "error": error, "op": "SUM",
        "start": values(rank, "float32", (3, 4), "ordinary", seed + 50),
        "bound": bound([values(r, "float32", (3, 4), "ordinary", seed + 50)
                        for r in range(world_size)], "SUM"),
        "digest": digest(whole[1:4]), "around": [whole[0].tolist(), whole[4].tolist()]}
    # several tensors in one call, as the backend is called by coalesced collectives
    # mixed dtypes, one of them empty, one an int64 near 2**60 (one buffer of them all, in a
    # dtype torch.cat promotes to, rounds it)
    kinds = (("float32", (3,), "ordinary"), ("float32", (0,), "ordinary"),
             ("int64", (2, 2), "huge"), ("float64", (5,), "ordinary"))
    several = [values(rank, dtype, shape, kind, seed + 60 + i)
               for i, (dtype, shape, kind) in enumerate(kinds)]
    given_several = [t.clone() for t in several]
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.SUM
    error = attempt("several", lambda: backend.allreduce(several, opts).wait())
    for i, (got, start) in enumerate(zip(several, given_several)):
        expected = start.clone()
        dist.all_reduce(expected)
        results[f"tensor {i + 1} of four in one call"] = {
            "got": got, "expected": expected, "start": start, "error": error, "op": "SUM",
            "bound": bound([values(r, *kinds[i], seed + 60 + i)
                            for r in range(world_size)], "SUM"), "digest": digest(got)}
    # two calls in a row on the same tensor
    twice = values(rank, "float64", (4,), "ordinary", seed + 70)
    start = twice.clone()
    error = attempt("twice", lambda: [dist.all_reduce(twice, group=group)
                                      for _ in range(2)])
    expected = start.clone()
    dist.all_reduce(expected)
    dist.all_reduce(expected)
    results["the second of two calls in a row"] = {
        "got": twice, "expected": expected, "start": start, "error": error, "op": "SUM",
        "bound": expected.abs() * 1e-12, "digest": digest(twice)}
    # the asynchronous case: the last rank calls late
    late = given["late"]
    start = values(rank, "float64", (6,), "ordinary", seed + 80)
    tensor, timing = start.clone(), {}
    dist.barrier()
    if rank == late:
        time.sleep(LATE)

    def asynchronous():
        begin = time.monotonic()
        work = dist.all_reduce(tensor, group=group, async_op=True)
        timing["call"] = time.monotonic() - begin
        work.wait()
        timing["waited"] = time.monotonic() - begin
        timing["after_wait"] = tensor.clone()
        value = work.get_future().wait()  # what DDP's hooks chain on: the tensors
        timing["future_holds_tensor"] = isinstance(value, list) and len(value) == 1 and \
            isinstance(value[0], torch.Tensor) and value[0].data_ptr() == tensor.data_ptr()
        timing["future_value"] = type(value).__name__

    error = attempt("asynchronous", asynchronous)
    time.sleep(LATE * 1.5)  # long enough for a Work done too early to finish after all
    expected = start.clone()
    dist.all_reduce(expected)
    results["asynchronous"] = {"error": error, "timing": timing, "later": tensor.clone(),
                               "expected": expected}
    # reductions the backend lacks
    for lacking in ("BAND", "AVG"):
        def lacks(lacking=lacking):
            dist.all_reduce(torch.ones(2, dtype=torch.int64),
                            op=getattr(dist.ReduceOp, lacking), group=group)

        results[lacking] = {"error": attempt(lacking, lacks)}
    return {"results": results, "threads": {k: sorted(v) for k, v in THREADS.items()},
            "numbers": sorted(set(NUMBERS))}


def judge(world_size: int, outcome, given: dict) -> list:
    for rank, result in sorted(outcome.results.items()):
        calls = [c for c in result["calls"] if c.get("by", "you") == "you"]
        if calls:
            return [Finding(False, f"rank {rank} called torch.distributed's "
                                   f"{calls[0]['name']} from your allreduce: the lab "
                                   f"writes the backend's all-reduce, from put and get; "
                                   f"no collective may do the work")]
    findings = []
    for finding in (errors_finding, asynchronous_finding, threads_finding, values_finding,
                    same_bits_finding, future_finding, refused_finding):
        said = finding(world_size, outcome, given)
        findings.append(said)
        if not said.held:
            return [said]
    return findings


def explain(world_size: int, outcome, given: dict) -> list:
    """A job that hung after every rank had returned: its results still say what went
    wrong. Calls of one rank's store client are answered one at a time, so threads of the
    reader's own, each blocked in a get while its peer's put waits behind another, can hold
    the store until the group's timeout; destroy_process_group() then waits behind them."""
    if len(outcome.results) < world_size:
        return []
    wrong = [finding.text for finding in judge(world_size, outcome, given)
             if not finding.held]
    return wrong or ["every rank returned from allreduce(), and then the backend's "
                     "shutdown waited: some communication of yours was still blocked "
                     "in the store"]


def errors_finding(world_size: int, outcome, given: dict) -> Finding:
    for rank, result in sorted(outcome.results.items()):
        for name, case in result["results"].items():
            if name not in ("BAND", "AVG") and case["error"]:
                return Finding(False, f"rank {rank}, {name}: your allreduce raised "
                                      f"{case['error']}")
    return Finding(True, "no case raised")


def values_finding(world_size: int, outcome, given: dict) -> Finding:
    import torch

    for rank, result in sorted(outcome.results.items()):
        for name, case in result["results"].items():
            if name in ("asynchronous", "BAND", "AVG"):
                continue
            got, expected = case["got"], case["expected"]
            if got.dtype != expected.dtype:
                return Finding(False, f"rank {rank}, {name}: the tensor became "
                                      f"{got.dtype}, not {expected.dtype}")
            if case.get("around") not in (None, [[7.0] * 4, [7.0] * 4]):
                return Finding(False, f"rank {rank}, {name}: values beside the tensor (it "
                                      f"is a view into a larger one) changed: write only "
                                      f"into the tensor given")
            difference = (got.double() - expected.double()).abs()
            if got.numel() == 0 or bool((difference <= case["bound"]).all()):
                continue
            unchanged = torch.equal(got, case["start"]) and not torch.equal(got, expected)
            if unchanged and "one call" in name:
                return Finding(False, f"rank {rank}, {name}: the tensor is unchanged: "
                                      f"reduce every tensor of the list, each under keys "
                                      f"of its own (a tag per tensor)")
            if unchanged:
                return Finding(False, f"rank {rank}, {name}: the tensor is unchanged, "
                                      f"seen by the caller: write the result into the "
                                      f"tensor given (tensor.copy_(...)); rebinding a "
                                      f"name, a list's item or tensor.data gives the "
                                      f"result storage that nobody else sees")
            said = mistaken(name, case, world_size)
            return Finding(False, f"rank {rank}, {name}: {said}")
    return Finding(True, f"every case holds gloo's result (integers, MIN and MAX exactly, "
                         f"floating-point sums and products within rounding), in place, "
                         f"at {world_size} ranks")


def mistaken(name: str, case: dict, world_size: int) -> str:
    """What a wrong value says about how it was computed."""
    got, expected, op = case["got"], case["expected"], case["op"]
    largest = (got.double() - expected.double()).abs().max().item()
    said = f"differs from gloo's by up to {largest:.4g}"
    if op != "SUM":
        return (f"{said}: the reduction is {op}; read it from opts.reduceOp "
                f"(self.reduction(opts, 'allreduce') gives the function)")
    if "2**60" in name:
        return (f"{said}: an int64 sum rounded through a float (float32 keeps 24 bits, "
                f"float64 53): reduce in the tensor's own dtype")
    if "wraps" in name:
        return (f"{said}: an integer sum past its dtype's range wraps round, as gloo's and "
                f"torch's add_ do: reduce in the tensor's own dtype, without widening and "
                f"clamping")
    if "1e8 apart" in name:
        return (f"{said}: that is float32's rounding of a float64 sum: reduce in the "
                f"tensor's own dtype, or wider, never narrower")
    if "one call" in name:
        return (f"{said}: each tensor of the list is reduced in its own dtype, under keys "
                f"of its own (one buffer of them all, as torch.cat makes of mixed dtypes, "
                f"is promoted to a float that rounds this int64 near 2**60; another "
                f"tensor's bytes under its tag give other values)")
    if "second of two" in name:
        return (f"{said}: the second call read the first call's bytes: number every "
                f"collective (self.next_seq()) and put it in its keys")
    return f"{said}, beyond rounding: check which parts are combined, and how"


def same_bits_finding(world_size: int, outcome, given: dict) -> Finding:
    for name, _, _, _, _ in CASES:
        digests = {rank: result["results"][name]["digest"]
                   for rank, result in outcome.results.items()}
        if len(set(digests.values())) > 1:
            groups: dict[str, list] = {}
            for rank, value in sorted(digests.items()):
                groups.setdefault(value, []).append(rank)
            held = "; ".join(f"rank{'s' * (len(g) > 1)} {list_of(g)} one result"
                             if i == 0 else f"rank{'s' * (len(g) > 1)} {list_of(g)} another"
                             for i, g in enumerate(groups.values()))
            return Finding(False, f"{name}: the ranks hold different bits of the same "
                                  f"all-reduce ({held}): the order in which the parts are "
                                  f"combined depends on the rank (combine rank 0's, then "
                                  f"rank 1's, ... on every rank)")
    return Finding(True, "every rank holds the same bits of every all-reduce")


def threads_finding(world_size: int, outcome, given: dict) -> Finding:
    """The numbering in the call, the communication on the backend's thread."""
    for rank, result in sorted(outcome.results.items()):
        threads = result["threads"]
        if "thread" in threads.get("next_seq", []):
            return Finding(False, f"rank {rank} called self.next_seq() inside run, on the "
                                  f"backend's thread: number the collective in the call, "
                                  f"where the program's order is, so that every rank "
                                  f"gives the same collective the same number whatever "
                                  f"runs first")
        numbers = [n for n in result["numbers"] if n != 1]
        if numbers and "thread" not in threads.get("next_seq", []):
            return Finding(False, f"rank {rank}'s allreduce took {numbers[0]} numbers "
                                  f"(self.next_seq()) in one call: take one per "
                                  f"collective, however many tensors it has (a tag per "
                                  f"tensor tells them apart)")
        for method in ("put", "get", "finish"):
            if "another thread" in threads.get(method, []):
                return Finding(False, f"rank {rank} called self.{method}() on a thread of "
                                      f"your own: hand run to self.submit, whose thread "
                                      f"runs it and whose Work's wait() waits for it")
            if "call" in threads.get(method, []):
                return Finding(False, f"rank {rank} called self.{method}() in the call "
                                      f"itself: all of the communication (put, get, "
                                      f"finish) belongs in run, which the backend's thread "
                                      f"runs; the call only checks, numbers and hands it "
                                      f"over")
    return Finding(True, "the collective numbered in the call, its communication on the "
                         "backend's thread")


def asynchronous_finding(world_size: int, outcome, given: dict) -> Finding:
    import torch

    late = given["late"]
    for rank, result in sorted(outcome.results.items()):
        case = result["results"]["asynchronous"]
        timing = case["timing"]
        if rank != late and timing["call"] > LATE / 2:
            return Finding(False, f"rank {rank}'s dist.all_reduce(..., async_op=True) took "
                                  f"{timing['call']:.2f} s to return, waiting for rank "
                                  f"{late}, which came {LATE:g} s late: do the "
                                  f"communication inside run, which the backend's thread "
                                  f"runs; the call itself only prepares it")
        if not torch.allclose(timing["after_wait"], case["expected"], rtol=1e-12) and \
                torch.allclose(case["later"], case["expected"], rtol=1e-12):
            return Finding(False, f"rank {rank}: wait() returned before the result was "
                                  f"there (it came later): return the Work that "
                                  f"self.submit(run, tensors) gives, whose wait() blocks "
                                  f"until run has finished")
        # a result wrong even later: the cases' values say how
    return Finding(True, f"async_op=True returned at once while rank {late} was late, and "
                         f"wait() returned with the result there")


def future_finding(world_size: int, outcome, given: dict) -> Finding:
    """The Work's future holds the caller's tensors (after their values are checked: a
    result written elsewhere is said as such first)."""
    for rank, result in sorted(outcome.results.items()):
        timing = result["results"]["asynchronous"]["timing"]
        if timing.get("future_holds_tensor") is False:
            return Finding(False, f"rank {rank}: the Work's future holds "
                                  f"{timing['future_value']}, not the list of the "
                                  f"caller's tensors: pass the tensors to "
                                  f"self.submit(run, tensors), whose future is what DDP's "
                                  f"communication hooks chain on")
    return Finding(True, "the Work's future holds the caller's tensors")


def refused_finding(world_size: int, outcome, given: dict) -> Finding:
    for rank, result in sorted(outcome.results.items()):
        for lacking in ("BAND", "AVG"):
            if not result["results"][lacking]["error"]:
                return Finding(False, f"rank {rank}: all_reduce with ReduceOp.{lacking} "
                                      f"returned without an error: refuse a reduction the "
                                      f"backend lacks (self.reduction(opts, 'allreduce') "
                                      f"raises for it)")
    return Finding(True, "reductions the backend lacks (BAND, AVG) raised on every rank")
