"""Wrong: rank 0's call is always the rule, as fr_trace takes the first dump it reads
(right whenever rank 0 is not the culprit)."""


def find_rank_behind(dumps: dict) -> tuple:
    calls = {rank: {e["collective_seq_id"]: e["profiling_name"].split(":")[-1]
                    for e in dump["entries"]} for rank, dump in dumps.items()}
    first = max(min(by_seq) for by_seq in calls.values() if by_seq)
    last = max(max(by_seq) for by_seq in calls.values() if by_seq)
    for seq in range(first, last + 1):
        here = {rank: by_seq.get(seq) for rank, by_seq in calls.items()}
        if len(set(here.values())) == 1:
            continue
        rule = here[0] or next(op for op in here.values() if op)
        return sorted(rank for rank, op in here.items() if op != rule), rule
    raise ValueError("no rank is behind")
