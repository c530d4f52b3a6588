"""Wrong (kept from a blind round, passed before): When ranks are behind, reports the call
of the lowest rank that has an entry instead of the most common one, wrong when that
rank is itself out of step there."""

from collections import Counter


def find_rank_behind(dumps: dict) -> tuple:
    calls = {rank: {e["collective_seq_id"]: e["profiling_name"].split(":", 1)[-1]
                    for e in dump.get("entries", [])}
             for rank, dump in dumps.items()}
    first = max((min(by_seq) for by_seq in calls.values() if by_seq), default=1)
    last = max((max(by_seq) for by_seq in calls.values() if by_seq), default=0)
    for seq in range(first, last + 1):
        here = {rank: by_seq.get(seq) for rank, by_seq in calls.items()}
        if len(set(here.values())) == 1:
            continue
        made = {rank: call for rank, call in here.items() if call is not None}
        counts = Counter(made.values())
        top = max(counts.values())
        rule = made[min(rank for rank, call in made.items() if counts[call] == top)]
        behind = sorted(rank for rank, call in here.items() if call is None)
        if behind:
            return behind, made[min(made)]
        return sorted(rank for rank, call in made.items() if call != rule), rule
    return [], None
