"""Lab: the rank a hung job waits for (chapter: A job that hangs).

Check it with:  python -m workers.labs check hung_rank
"""


def find_rank_behind(dumps: dict) -> tuple:
    """Name the ranks a hung job waits for, and the collective the other ranks wait in.

    Arguments: ``dumps``, every rank's flight recorder, dumped while the job hung, as a dict
    rank -> what ``pickle.loads(torch._C._distributed_c10d._dump_fr_trace())`` returned on
    that rank. A dump's ``"entries"`` list holds one dict per collective the rank started,
    oldest first, with among others ``"collective_seq_id"`` (the collective's number in
    its group: 1, 2, 3, ...), ``"profiling_name"`` (``"gloo:all_reduce"``,
    ``"gloo:barrier"``, ...), ``"process_group"`` (``("0", "default_pg")``: every
    collective here ran in the default group), ``"state"`` and ``"retired"``. A recorder
    keeps only its last collectives: the oldest may be gone, and not as many on every rank;
    a rank that reached no collective has an empty list.

    Returns: ``(ranks, collective)``. Look for the first collective number at which the
    ranks' recorders differ, among the numbers every rank still holds or has not reached
    yet. ``ranks``: the sorted list of the ranks (one or more) the others wait for there:
    the ranks with no entry of that number (they are behind), or, when every rank has one,
    the ranks whose call differs from the call most ranks made (they are out of step; at a
    tie, the call of the lowest rank among the tied calls is the rule: rank 0's, with as
    many ranks each way). ``collective``: the call the other ranks made at that number,
    without the backend's prefix, such as ``"all_reduce"``.

    May use: the Python standard library. Not the book's workers.hangs, nor PyTorch's
    torch.distributed.flight_recorder (that would be the answer, not yours).
    """
    raise NotImplementedError("write find_rank_behind, then run: "
                              "python -m workers.labs check hung_rank")
