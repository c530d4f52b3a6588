"""Wrong: entries compared by their place in the list, not by their collective number
(right while every recorder still holds every collective)."""

from collections import Counter


def find_rank_behind(dumps: dict) -> tuple:
    lists = {rank: [e["profiling_name"].split(":")[-1] for e in dump["entries"]]
             for rank, dump in dumps.items()}
    for index in range(max(len(ops) for ops in lists.values())):
        here = {rank: ops[index] if index < len(ops) else None
                for rank, ops in lists.items()}
        if len(set(here.values())) == 1:
            continue
        missing = sorted(rank for rank, op in here.items() if op is None)
        if missing:
            return missing, Counter(op for op in here.values() if op).most_common(1)[0][0]
        counts = Counter(here.values())
        top = max(counts.values())
        rule = here[min(rank for rank, op in here.items() if counts[op] == top)]
        return sorted(rank for rank, op in here.items() if op != rule), rule
    return [], ""
