"""Lab comm_hook (ddp_internals): a DDP communication hook that sends float16.

Every rank trains the same small tower twice, from the same weights, on its own data:
once under DDP with the reader's hook registered (buckets kept small, so there are
several), once under DDP's default averaging. After the first backward the hook's
gradients must be the default's, to float16's precision; every all_reduce the hook makes
must be asynchronous (its future returned to DDP, never waited for inside the hook: no
work.wait(), future.wait(), or is_completed() in a loop) and send float16, 2 bytes per
gradient value (bfloat16 is 2 bytes too, and fails); after four steps every rank's
weights must be identical, and close to the default's. The initial weights and the data
come from the job's seed. PyTorch's own fp16_compress_hook would pass all that: a hook
that hands the bucket to it is told to write its own.

The contract (labs/comm_hook.py), clause by clause, and what checks each:

- The future's value is the mean over the ranks of their buffers: gradients after the
  first backward against DDP's default averaging, and weights after four steps.
- A float32 tensor shaped like bucket.buffer(): the value of every future the hook
  returns, seen when it is done.
- Sent as float16: the dtype and the bytes of every all_reduce (bfloat16 fails).
- Divided before it is sent: a last backward with the same inputs on every rank and
  gradients up to three quarters of float16's largest, whose sum overflows and mean fits.
- Any bucket, zeros included: one step where one rank's inputs are zeros and its loss
  weighs 0, so every bucket of that rank is all zeros (and still averaged with the
  others': a hook that skips a bucket of zeros leaves the ranks in different calls).
- Every bucket's all_reduce has a buffer of its own while it is in flight: two buckets of
  the same size in every backward after the first; a buffer reused before DDP waited for
  the future it was handed on through is seen by its addresses.
- Asynchronous, never waited for inside the hook: work.wait(), future.wait(),
  is_completed() in the hook are seen; a blocking all_reduce fails.
- Written here, not PyTorch's fp16_compress_hook: who made the all_reduce.
"""

from __future__ import annotations

import contextlib
import functools

from workers.labs.harness import Finding, forbidden_finding, wait_findings

CHAPTER = "ddp_internals"
FUNCTION = "fp16_average_hook"
ASKS = "a DDP comm hook that averages in float16: half the bytes, ranks identical"
REREAD = '"Hooks that change the traffic" in the Inside DDP chapter'
PASSED = "averages each bucket in float16"
WORLD_SIZES = (2, 3)  # the page runs 2 ranks
GROUP = True
PRELOAD = ("torch._dynamo",)
TIMEOUT = 10.0
STEPS = 4
BUCKET_MB = 0.002  # about 500 float32 gradients per bucket: the tower fills several
LOUD = 0.75 * 65504  # the largest gradient of the last backward: its sum over ranks is inf


def setup(world_size: int, rng) -> dict:
    # one step where one rank's inputs are zeros and its loss weighs 0: every bucket of
    # that rank is all zeros
    return {"seed": rng.randrange(1_000_000), "zeros": (rng.randrange(STEPS),
                                                         rng.randrange(world_size))}


def describe(world_size: int, given: dict) -> str:
    return f", {STEPS} steps"


def tower(seed: int):
    import torch
    from torch import nn

    torch.manual_seed(seed)
    # after DDP's first backward, buckets of 596, 544, 528 and 544 gradients: two of the
    # same size, each of them in flight while the other is written
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU(),
                         nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU(),
                         nn.Linear(16, 4))


def inputs(seed: int, rank: int, step: int, zeros=(None, None)):
    import torch

    if (step, rank) == tuple(zeros):
        return torch.zeros(8, 16)
    generator = torch.Generator().manual_seed(seed + 1000 * step + rank)
    return torch.randn(8, 16, generator=generator)


def on_rank(rank: int, world_size: int, solution, calls, given: dict) -> dict:
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    returned = []  # (dtype, shape) of each future's value, and the bucket's buffer's

    @functools.wraps(solution)  # DDP reads the reader's signature through it
    def hook(state, bucket):
        with calls.hook():
            future = solution(state, bucket)
        buffer = bucket.buffer()
        wanted = (str(buffer.dtype).removeprefix("torch."), list(buffer.shape))

        def seen(done):  # beside DDP's own use of the future, never instead of it
            try:
                value = done.value()
                returned.append((str(value.dtype).removeprefix("torch."),
                                 list(value.shape), *wanted))
            except Exception:  # noqa: BLE001 (DDP itself says what is wrong with it)
                pass

        if isinstance(future, torch._C.Future):  # then() gives a torch._C.Future
            future.add_done_callback(seen)
        return future

    seed = given["seed"]
    hooked = DDP(tower(seed), bucket_cap_mb=BUCKET_MB)
    hooked.register_comm_hook(None, hook)
    default = DDP(tower(seed), bucket_cap_mb=BUCKET_MB)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (hooked, default)]
    first = {}
    sent = []
    for step in range(STEPS):
        for model, optimizer in zip((hooked, default), optimizers):
            optimizer.zero_grad()
            loss = model(inputs(seed, rank, step, given["zeros"])).pow(2).mean()
            if (step, rank) == tuple(given["zeros"]):
                loss = loss * 0.0  # every gradient of this rank all zeros
            if model is hooked:
                before = len(calls.records)
                with calls.reader():
                    loss.backward()
                sent.append(sum(c["sent"] for c in calls.records[before:]))
            else:
                loss.backward()
            if step == 0:
                first[model is hooked] = [p.grad.clone() for p in model.parameters()]
            optimizer.step()
    values = sum(p.numel() for p in hooked.parameters())
    # A last backward, no step: the same inputs on every rank, the loss scaled so that the
    # largest gradient is LOUD. Its mean fits in float16; its sum over the ranks does not.
    same = inputs(seed, world_size, STEPS)
    default.zero_grad()
    default(same).pow(2).mean().backward()
    scale = LOUD / max(p.grad.abs().max().item() for p in default.parameters())
    loud = {}
    for model in (hooked, default):
        model.zero_grad()
        with calls.reader() if model is hooked else contextlib.nullcontext():
            (model(same).pow(2).mean() * scale).backward()
        loud[model is hooked] = [p.grad.clone() for p in model.parameters()]
    return {"loud": loud[True], "loud_default": loud[False], "returned": returned,
            "hooked": first[True], "default": first[False], "values": values,
            "sent": sent, "weights": [p.detach().clone() for p in hooked.parameters()],
            "default_weights": [p.detach().clone() for p in default.parameters()]}


def ranks_apart(outcome) -> str:
    """Where the ranks' gradients differ from each other: what the hook returned was
    not the all-reduced tensor, which is the same on every rank."""
    first = outcome.results[0]["hooked"]
    apart = max((h - f).abs().max().item() for result in outcome.results.values()
                for h, f in zip(result["hooked"], first))
    if apart == 0:
        return ""
    return (f", and the ranks' gradients differ from each other by up to {apart:.1e}: "
            f"the hook's future gave DDP a tensor the all_reduce did not write (.to() and "
            f".half() make a copy); return the all-reduced tensor, cast back, from then()")


def judge(world_size: int, outcome, given: dict) -> list:
    import torch

    n = world_size
    forbidden = forbidden_finding(outcome, ("all_reduce",), "the hook averages each "
                                  "bucket with one asynchronous all_reduce")
    if forbidden:
        return [forbidden]
    reduces = [c for c in outcome.all_calls() if c["name"] == "all_reduce"]
    library = next((c for c in reduces if c["by"].startswith("torch ")), None)
    if library:
        return [Finding(False, f"the hook's all_reduce was made by PyTorch's "
                               f"{library['by'].removeprefix('torch ')} (its "
                               f"fp16_compress_hook or a helper of it): this lab asks you "
                               f"to write the hook, cast, all_reduce and then() yourself")]
    for rank, result in sorted(outcome.results.items()):
        if result["hook_waits"]:
            return [Finding(False, f"rank {rank}'s hook waited inside itself "
                                   f"({result['hook_waits'][0]}): backward stalls on every "
                                   f"bucket; return the Work's future, "
                                   f"work.get_future().then(...), and let DDP wait for it")]
    if any(not c.get("async") for c in reduces):
        return [Finding(False, "the hook's all_reduce ran synchronously: backward waits "
                               "for every bucket; pass async_op=True and return the Work's "
                               "future (get_future())")]
    odd = next((c for c in reduces if c["dtype"] != "float16"), None)
    if odd:
        return [Finding(False, f"the hook all-reduced {odd['dtype']}, not float16: cast "
                               f"the bucket with .to(torch.float16) (this lab asks for "
                               f"float16; bfloat16 is as small, with fewer digits)")]
    waits = [finding for finding in wait_findings(outcome) if not finding.held]
    if waits:
        if waits[0].text.startswith("forgotten wait()"):
            waits[0].text += ("; a hook hands the Work on instead: return "
                              "work.get_future().then(...), not a future of its own set "
                              "before the all_reduce is done")
        return waits
    for rank, result in sorted(outcome.results.items()):
        odd = next(((dtype, shape, want_dtype, want_shape)
                    for dtype, shape, want_dtype, want_shape in result["returned"]
                    if (dtype, shape) != (want_dtype, want_shape)), None)
        if odd:
            return [Finding(False, f"rank {rank}'s hook returned a future whose value is "
                                   f"{odd[0]} of shape {odd[1]}, where the bucket's buffer "
                                   f"is {odd[2]} of shape {odd[3]}: cast the result back "
                                   f"to the buffer's dtype in the then() callback (DDP "
                                   f"may copy it into .grad anyway, but the contract is "
                                   f"a tensor like bucket.buffer())")]
    findings = []
    for rank, result in sorted(outcome.results.items()):
        pairs = list(zip(result["hooked"], result["default"]))
        if all(torch.allclose(h, d, rtol=1e-2, atol=1e-4) for h, d in pairs):
            continue
        if all(torch.allclose(h, d * n, rtol=1e-2, atol=1e-4) for h, d in pairs):
            findings.append(Finding(False, f"rank {rank}'s gradients are the sum over the "
                                           f"{n} ranks, not the mean: divide by the world "
                                           f"size"))
        else:
            worst = max((h - d).abs().max().item() for h, d in pairs)
            hooked = torch.cat([h.flatten() for h, _ in pairs]).double()
            default = torch.cat([d.flatten() for _, d in pairs]).double()
            norm = (default * default).sum().item()
            times = (hooked * default).sum().item() / norm if norm else 0.0
            if times and torch.allclose(hooked, default * times, rtol=1e-2, atol=1e-4):
                findings.append(Finding(False, f"rank {rank}'s gradients are DDP's average "
                                               f"times {times:.3g}: divide by the world "
                                               f"size, {n} here, not by a number written "
                                               f"in"))
            else:
                findings.append(Finding(False, f"rank {rank}'s gradients differ from "
                                               f"DDP's average by up to {worst:.1e}"
                                               f"{ranks_apart(outcome)}"))
        break
    else:
        findings.append(Finding(True, "after backward, the gradients are DDP's average, to "
                                      "float16's precision"))
    result = outcome.results[0]
    if findings[-1].held and not all(torch.isfinite(g).all() for g in result["loud"]):
        findings.append(Finding(False, f"with a gradient of {LOUD:.0f} on every rank, "
                                       f"the hook's average was inf: the sum over the "
                                       f"ranks overflowed float16 (largest 65504) where "
                                       f"the mean fits; divide by the world size before "
                                       f"the all_reduce"))
    elif findings[-1].held and not all(
            torch.allclose(h, d, rtol=1e-2, atol=1.0)
            for h, d in zip(result["loud"], result["loud_default"])):
        findings.append(Finding(False, f"with gradients up to {LOUD:.0f}, the hook's "
                                       f"average differs from DDP's"))
    elif findings[-1].held:
        findings.append(Finding(True, f"with gradients up to {LOUD:.0f}, whose sum over "
                                      f"the ranks overflows float16, the average is still "
                                      f"right: divided before it is sent"))
    if not reduces:
        return findings + [Finding(False, "the hook called no all_reduce")]
    result = outcome.results[0]
    per_value = result["sent"][0] / result["values"]
    if abs(per_value - 2) > 1e-9:
        findings.append(Finding(False, f"the hook sent {per_value:g} bytes per gradient "
                                       f"value where float16 takes 2: cast the bucket to "
                                       f"float16 before the all_reduce"))
    else:
        findings.append(Finding(True, f"each step sent {result['sent'][0]} bytes per rank "
                                      f"for {result['values']} gradient values: 2 each, "
                                      f"half of float32's"))
    weights = {rank: result["weights"] for rank, result in outcome.results.items()}
    apart = max((a - b).abs().max().item() for rank in weights
                for a, b in zip(weights[rank], weights[0]))
    if apart > 0:
        findings.append(Finding(False, f"after {STEPS} steps the ranks' weights differ by "
                                       f"up to {apart:.1e}: every rank must apply the same "
                                       f"averaged gradient"))
    else:
        drift = max((a - b).abs().max().item() for a, b in
                    zip(result["weights"], result["default_weights"]))
        findings.append(Finding(True, f"after {STEPS} steps every rank's weights are "
                                      f"identical, {drift:.0e} from DDP's default"))
    return findings
