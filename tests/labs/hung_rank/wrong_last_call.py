"""Wrong (kept from a blind round, passed before): Finds the right ranks but reports as the
collective the others' LAST call instead of their call at the first differing number:
wrong whenever some of the others got past that number (gloo paired a mismatched call
and let them on, e.g. to the final barrier)."""

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
        if not missing:
            rule = rule_of(here)
            missing = sorted(rank for rank, call in here.items() if call != rule)
        waiting = {r: calls[r][max(calls[r])] for r in calls if r not in missing and calls[r]}
        return missing, rule_of(waiting)
    return [], None


def rule_of(here: dict) -> str:
    """The call most ranks made; at a tie, the call of the lowest rank among the tied."""
    groups = {}
    for rank in sorted(here):
        groups.setdefault(here[rank], []).append(rank)
    return max(groups, key=lambda call: (len(groups[call]), -groups[call][0]))
