"""Wrong (kept from a blind round, passed before): Strips the backend prefix with
str.lstrip('gloo:'), which strips characters, not a prefix: 'gloo:gather' becomes
'ather'."""

from collections import Counter


def find_rank_behind(dumps: dict) -> tuple:
    ranks = sorted(dumps)
    calls = {r: {e["collective_seq_id"]: e["profiling_name"] for e in dumps[r]["entries"]}
             for r in ranks}
    oldest = [min(c) for c in calls.values() if c]
    newest = max((max(c) for c in calls.values() if c), default=0)
    start = max(oldest, default=1)
    for n in range(start, newest + 1):
        have = [r for r in ranks if n in calls[r]]
        names = [calls[r][n] for r in have]
        counts = Counter(names)
        top = max(counts.values())
        first = calls[have[0]][n]
        rule = first if counts[first] == top else counts.most_common(1)[0][0]
        if len(have) < len(ranks):
            behind = [r for r in ranks if r not in have]
            return behind, rule.lstrip("gloo:")
        odd = [r for r in ranks if calls[r][n] != rule]
        if odd:
            return odd, rule.lstrip("gloo:")
    return [], None
