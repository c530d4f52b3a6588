"""Wrong: a rank whose last collective is retired (finished) is the one behind, since the
others' last one is not (right when a rank stops short; but retired says little on gloo)."""


def find_rank_behind(dumps: dict) -> tuple:
    done = sorted(rank for rank, dump in dumps.items() if dump["entries"][-1]["retired"])
    waiting = [dump for dump in dumps.values() if not dump["entries"][-1]["retired"]]
    op = waiting[0]["entries"][-1]["profiling_name"].split(":")[-1] if waiting else ""
    return done, op
