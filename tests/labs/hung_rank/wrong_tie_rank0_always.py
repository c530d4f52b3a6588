"""Wrong (kept from a blind round, passed before): At any tie takes rank 0's call as the
rule, even when rank 0's call is not among the tied calls."""

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
        tied = [call for call, count in counts.items() if count == top]
        lowest = min(present)
        rule = present[lowest] if len(tied) > 1 else tied[0]
        behind = sorted(rank for rank, call in here.items() if call is None)
        if behind:
            return behind, rule
        return sorted(rank for rank, call in present.items() if call != rule), rule
    return [], None
