"""The reference: compare the recorders collective number by collective number."""

from collections import Counter


def find_rank_behind(dumps: dict) -> tuple:
    calls = {rank: {e["collective_seq_id"]: e["profiling_name"].split(":")[-1]
                    for e in dump["entries"]} for rank, dump in dumps.items()}
    first = max(min(by_seq) for by_seq in calls.values() if by_seq)
    last = max(max(by_seq) for by_seq in calls.values() if by_seq)
    for seq in range(first, last + 1):
        here = {rank: by_seq.get(seq) for rank, by_seq in calls.items()}
        if len(set(here.values())) == 1:
            continue
        missing = sorted(rank for rank, op in here.items() if op is None)
        if missing:
            present = [op for op in here.values() if op is not None]
            return missing, Counter(present).most_common(1)[0][0]
        counts = Counter(here.values())
        top = max(counts.values())
        rule = here[min(rank for rank, op in here.items() if counts[op] == top)]
        return sorted(rank for rank, op in here.items() if op != rule), rule
    raise ValueError("the recorders agree: no rank is behind")
