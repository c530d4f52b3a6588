"""Wrong (kept from a blind round, passed before): Picks the majority call with
collections.Counter.most_common(1), which at a tie returns the call it met first in the
dict's iteration order, not rank 0's: right only while ``dumps`` happens to be ordered
by rank."""

from collections import Counter


def find_rank_behind(dumps: dict) -> tuple:
    calls = {rank: {e["collective_seq_id"]:
                    e["profiling_name"].partition(":")[2] or e["profiling_name"]
                    for e in dump.get("entries", [])}
             for rank, dump in dumps.items()}
    held = [by_seq for by_seq in calls.values() if by_seq]
    if not held:
        return [], None
    first = max(min(by_seq) for by_seq in held)  # below it some recorder dropped its entries
    last = max(max(by_seq) for by_seq in held)

    for seq in range(first, last + 1):
        here = {rank: by_seq.get(seq) for rank, by_seq in calls.items()}
        if len(set(here.values())) == 1:
            continue
        missing = sorted(rank for rank, call in here.items() if call is None)
        rule = Counter(c for c in here.values() if c is not None).most_common(1)[0][0]
        if missing:
            return missing, rule
        return sorted(rank for rank, call in here.items() if call != rule), rule
    return [], None

