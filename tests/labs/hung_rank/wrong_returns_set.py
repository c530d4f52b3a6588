"""Wrong (kept from a blind round, passed before): Returns the culprits as a set, not the
sorted list the contract asks for (the members are right). (Written more compactly here;
the mistake is the blind solution's.)"""

from collections import Counter


def find_rank_behind(dumps: dict) -> tuple:
    table = {}
    for rank, dump in dumps.items():
        table[rank] = {}
        for entry in dump["entries"]:
            table[rank][entry["collective_seq_id"]] = entry["profiling_name"].split(":")[-1]
    numbers = [sorted(calls) for calls in table.values() if calls]
    number = max(seqs[0] for seqs in numbers)
    while number <= max(seqs[-1] for seqs in numbers):
        column = {rank: table[rank].get(number) for rank in table}
        if len(set(column.values())) > 1:
            absent = {rank for rank, call in column.items() if call is None}
            present = [call for call in column.values() if call is not None]
            if absent:
                return absent, present[0]
            votes = Counter(present)
            rule = column[min(rank for rank in column
                              if votes[column[rank]] == max(votes.values()))]
            return {rank for rank, call in column.items() if call != rule}, rule
        number += 1
    return set(), None
