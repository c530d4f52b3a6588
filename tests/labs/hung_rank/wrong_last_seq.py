"""Wrong: the ranks whose last collective has the lowest number are behind (right when a
rank stops short; blind to a rank that called something else)."""


def find_rank_behind(dumps: dict) -> tuple:
    last = {rank: dump["entries"][-1]["collective_seq_id"] for rank, dump in dumps.items()}
    lowest = min(last.values())
    ahead = max(dumps, key=lambda rank: last[rank])
    op = dumps[ahead]["entries"][-1]["profiling_name"].split(":")[-1]
    return sorted(rank for rank, seq in last.items() if seq == lowest), op
