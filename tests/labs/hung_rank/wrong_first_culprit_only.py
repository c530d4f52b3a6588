"""Wrong (kept from a blind round, passed before): Finds the first disagreement correctly
but returns only the lowest of the ranks behind or out of step, so a job with two
misbehaving ranks gets one."""

from collections import Counter


def find_rank_behind(dumps: dict) -> tuple:
    calls = {}
    for rank, dump in dumps.items():
        calls[rank] = {e["collective_seq_id"]: e["profiling_name"].split(":", 1)[-1]
                       for e in dump["entries"]}

    first = max(min(s) for s in calls.values() if s)
    last = max(max(s) for s in calls.values() if s)
    for seq in range(first, last + 1):
        here = {rank: s.get(seq) for rank, s in calls.items()}
        if len(set(here.values())) == 1:
            continue
        behind = sorted(r for r, c in here.items() if c is None)
        if behind:
            others = [c for c in here.values() if c is not None]
            return behind[:1], Counter(others).most_common(1)[0][0]
        counts = Counter(here.values())
        rule = here[0] if counts[here[0]] == max(counts.values()) else counts.most_common(1)[0][0]
        return [min(r for r, c in here.items() if c != rule)], rule
    return [], None
