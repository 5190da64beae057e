"""The `hiercoll_launch` command of the wheel: the launcher binary beside the library, run in this process's place."""
import os
import sys

from . import launcher_path


def main():
    path = launcher_path()
    os.execv(path, [path] + sys.argv[1:])
