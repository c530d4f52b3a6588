"""The troubleshooting page's table holds the words of each message as the Pythons the book
supports print it: pickling a lambda or a nested function, the way spawn and forkserver pickle
a target, and a spawned child that cannot find its target in a `__main__` without a file, on
every interpreter this machine has (3.11 to 3.13 here), and on 3.14 as its source words
them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT

PICKLE_BOTH = """
import pickle

def outer():
    def f():
        pass
    return f

for target in (lambda: 0, outer()):
    try:
        pickle.dumps(target)
    except Exception as error:
        print(f"{type(error).__module__}.{type(error).__qualname__}: {error}")
"""

# Python 3.14's Modules/_pickle.c (gh-122311): save_global's "Can't pickle %R: it's not found
# as %S.%S" for the lambda (its __main__ has no attribute <lambda>), and get_dotted_path's
# "Can't pickle local object %R", %R the function itself, for the nested function
ON_3_14 = ["_pickle.PicklingError: Can't pickle <function <lambda> ...>: it's not found as "
           "__main__.<lambda>",
           "_pickle.PicklingError: Can't pickle local object <function outer.<locals>.f ...>"]


def interpreters() -> list[str]:
    """This Python and every pyenv Python from 3.11 on."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    found = [sys.executable]
    for python in sorted(root.glob("versions/3.*/bin/python3")):
        minor = re.match(r"3\.(\d+)", python.parent.parent.name)
        if minor and int(minor.group(1)) >= 11:
            found.append(str(python))
    return found


def pickle_row(words: str = "Can't pickle <function <lambda>") -> str:
    text = (ROOT / "book" / "troubleshooting.md").read_text()
    [row] = [line for line in text.splitlines() if line.startswith(f"| `{words}")
             or words in line.split(" | ")[0]]
    return row.split(" | ")[0]


def shown(message: str) -> str:
    """A message as the table shows it: ``builtins.`` dropped, an address as ``...``."""
    return re.sub(r" at 0x[0-9a-f]+>", " ...>", message.removeprefix("builtins."))


@pytest.mark.parametrize("python", interpreters())
def test_the_pickling_row_has_this_pythons_words(python):
    done = subprocess.run([python, "-c", PICKLE_BOTH], capture_output=True, text=True,
                          timeout=60, check=True)
    messages = done.stdout.splitlines()
    assert len(messages) == 2, done.stdout
    row = pickle_row()
    for message in messages:
        assert shown(message) in row, (python, shown(message))


def test_the_pickling_row_has_the_words_of_3_14():
    row = pickle_row()
    for message in ON_3_14:
        assert message in row, message


NO_FILE_MAIN = """
import multiprocessing

def f():
    pass

if __name__ == "__main__":
    child = multiprocessing.get_context("spawn").Process(target=f)
    child.start()
    child.join(timeout=60)
"""

# Python 3.14's Lib/pickle.py: find_class is a plain getattr for a name without dots
MAIN_ON_3_14 = "AttributeError: module '__main__' has no attribute 'f'"


@pytest.mark.parametrize("python", interpreters())
def test_the_main_row_has_this_pythons_words(python):
    done = subprocess.run([python, "-c", NO_FILE_MAIN], capture_output=True, text=True,
                          timeout=60)
    [message] = [line for line in done.stderr.splitlines()
                 if line.startswith("AttributeError:")]
    row = pickle_row("AttributeError: Can't get attribute 'f' on <module '__main__'")
    # the row names the first Python's words whole, the others from "<module" on
    assert message in row or message.split(" on ", 1)[1] in row, (python, message)
    assert MAIN_ON_3_14 in row
