"""Wrong (kept from a blind round, passed before):
breaks "the first collective number at which the recorders differ" by trusting
`retired`: it skips every number at which all ranks' entries are retired (a finished
collective cannot be where they hang), so a mismatched pair of calls that both completed is
passed over and a later number is reported."""

from collections import defaultdict


def find_rank_behind(dumps: dict) -> tuple:
    """Name the ranks a hung job waits for, and the collective the other ranks wait in."""
    by_seq = {rank: {e["collective_seq_id"]: e for e in dump["entries"]}
              for rank, dump in dumps.items()}
    start = max((min(s) for s in by_seq.values() if s), default=1)
    stop = max((max(s) for s in by_seq.values() if s), default=0)

    def rule(calls):
        ranks_of = defaultdict(list)
        for rank in sorted(calls):
            ranks_of[calls[rank]].append(rank)
        return max(ranks_of, key=lambda c: (len(ranks_of[c]), -min(ranks_of[c])))

    for seq in range(start, stop + 1):
        here = {rank: seqs.get(seq) for rank, seqs in by_seq.items()}
        if all(e is not None and e["retired"] for e in here.values()):
            continue  # everyone finished it: not where the job hangs
        missing = sorted(r for r, e in here.items() if e is None)
        present = {r: e["profiling_name"].split(":", 1)[1] for r, e in here.items() if e}
        if missing:
            return missing, rule(present)
        if len(set(present.values())) > 1:
            call = rule(present)
            return sorted(r for r, c in present.items() if c != call), call
    return [], None
