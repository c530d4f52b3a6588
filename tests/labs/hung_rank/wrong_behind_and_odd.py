"""Wrong (kept from a blind round, passed before): At the first number where the ranks
differ, returns the ranks with no entry together with the ranks whose call differs,
instead of only the ranks behind."""

from collections import Counter


def find_rank_behind(dumps: dict) -> tuple:
    calls = {rank: {e["collective_seq_id"]: e["profiling_name"].split(":", 1)[-1]
                    for e in dumps[rank]["entries"]} for rank in sorted(dumps)}
    held = [by_seq for by_seq in calls.values() if by_seq]
    first = max((min(by_seq) for by_seq in held), default=1)
    last = max((max(by_seq) for by_seq in held), default=0)
    for seq in range(first, last + 1):
        here = {rank: by_seq.get(seq) for rank, by_seq in calls.items()}
        if len(set(here.values())) == 1:
            continue
        present = {rank: call for rank, call in here.items() if call is not None}
        counts = Counter(present.values())
        top = max(counts.values())
        rule = present[min(rank for rank, call in present.items() if counts[call] == top)]
        return sorted(rank for rank, call in here.items() if call != rule), rule
    return [], None
