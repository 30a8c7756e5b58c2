"""What the document checks in tests/docs share: the files below a path, and the exit status with
its report (each problem on stderr, or one summary line on stdout)."""
import os
import sys


def files_under(path):
    """The path itself when it is a file, else every file below it (os.walk order)."""
    if os.path.isfile(path):
        return [path]
    return [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs]


def finish(problems, summary):
    """Prints each problem to stderr and returns 1; with none, prints summary and returns 0."""
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        return 1
    print(summary)
    return 0
