"""Wrong (kept from a blind round, passed before): Strips the prefix with .replace("gloo:",
""), so on any other backend's recorder (NCCL's "nccl:all_reduce") the collective comes
back with its prefix."""

def find_rank_behind(dumps: dict) -> tuple:
    calls = {rank: {e["collective_seq_id"]: e["profiling_name"].replace("gloo:", "")
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
        if missing:
            return missing, rule_of({r: c for r, c in here.items() if c is not None})
        rule = rule_of(here)
        return sorted(rank for rank, call in here.items() if call != rule), rule
    return [], None


def rule_of(here: dict) -> str:
    """The call most ranks made; at a tie, the call of the lowest rank among the tied."""
    groups = {}
    for rank in sorted(here):
        groups.setdefault(here[rank], []).append(rank)
    return max(groups, key=lambda call: (len(groups[call]), -groups[call][0]))
