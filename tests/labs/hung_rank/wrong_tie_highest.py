"""Wrong: on a tie (two ranks, one call each way), the highest rank's call is the rule
(right from three ranks up, where there is a majority)."""

from collections import Counter


def find_rank_behind(dumps: dict) -> tuple:
    calls = {rank: {e["collective_seq_id"]: e["profiling_name"].split(":")[-1]
                    for e in dump["entries"]} for rank, dump in dumps.items()}
    first = max(min(by_seq) for by_seq in calls.values())
    last = max(max(by_seq) for by_seq in calls.values())
    for seq in range(first, last + 1):
        here = {rank: by_seq.get(seq) for rank, by_seq in calls.items()}
        if len(set(here.values())) == 1:
            continue
        missing = sorted(rank for rank, op in here.items() if op is None)
        if missing:
            return missing, Counter(op for op in here.values() if op).most_common(1)[0][0]
        counts = Counter(here.values())
        top = max(counts.values())
        rule = here[max(rank for rank, op in here.items() if counts[op] == top)]
        return sorted(rank for rank, op in here.items() if op != rule), rule
    raise ValueError("no rank is behind")
