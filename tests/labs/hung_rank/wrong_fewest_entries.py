"""Wrong: the ranks with the fewest entries are behind (right when a rank stops short, and
every recorder still holds everything)."""


def find_rank_behind(dumps: dict) -> tuple:
    counts = {rank: len(dump["entries"]) for rank, dump in dumps.items()}
    fewest = min(counts.values())
    longest = max(dumps, key=lambda rank: counts[rank])
    op = dumps[longest]["entries"][-1]["profiling_name"].split(":")[-1]
    return sorted(rank for rank, count in counts.items() if count == fewest), op
