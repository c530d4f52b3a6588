"""Lab: the all-reduce of a backend of your own (chapter: A backend of your own).

Check it with:  python -m workers.labs check backend_allreduce
"""

import torch


def allreduce(self, tensors, opts):
    """The ``allreduce`` method of the chapter's backend (``workers.backend.StoreBackend``),
    written again: ``dist.all_reduce(t, op=..., group=...)`` on a group of this backend
    calls it as ``self.allreduce([t], opts)``.

    Arguments: ``self``, the backend; ``tensors``, a list of one or more CPU tensors, each
    of any shape (0 elements included), any of the dtypes float16, bfloat16, float32,
    float64, uint8, int32, int64, and possibly a view that is not contiguous; every rank
    passes tensors of the same shapes and dtypes, in the same order. ``opts.reduceOp``,
    the reduction: a ``dist.ReduceOp`` whose ``.op`` is ``dist.ReduceOp.SUM``, ``PRODUCT``,
    ``MIN`` or ``MAX`` (or one the backend lacks).

    Return the ``Work`` that ``self.submit(run, tensors)`` gives, where ``run`` (a function
    of no arguments) does all of the communication. It runs on the backend's thread: the
    call must return without waiting for the other ranks, and ``wait()`` on the Work is what
    blocks until the result is there.

    Afterwards (once ``wait()`` has returned): each tensor holds the reduction of that
    tensor over every rank, written into it (the caller's tensor, and any view of it taken
    before the call, sees it). In its own dtype: integers exactly, MIN and MAX exactly,
    floating-point SUM and PRODUCT as gloo's up to rounding (accumulating in a wider dtype
    and rounding once is allowed; a narrower one is not). Every rank holds the same bits:
    combine the ranks' parts in an order that does not depend on which rank is combining.
    A reduction the backend lacks (``ReduceOp.BAND``, ...) raises, on every rank, without
    hanging.

    May use the backend's own methods (see the chapter): ``self.my_rank``,
    ``self.world_size``, ``self.next_seq()`` (once per collective, in the call),
    ``self.put(seq, tag, tensor)``, ``self.get(seq, tag, like, ranks)``,
    ``self.finish(seq, tags)``, ``self.reduction(opts, "allreduce")`` (a function that
    combines its second argument into its first, in place), ``self.submit(run, result)``;
    and torch tensor operations. May not call torch.distributed: no other group's
    collective does the work for you.
    """
    raise NotImplementedError("write allreduce, then run: "
                              "python -m workers.labs check backend_allreduce")
