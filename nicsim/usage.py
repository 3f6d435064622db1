"""Bad input on a command line: the one error every command of nicsim reports the same way."""

from __future__ import annotations

import argparse
from typing import NoReturn


class UsageError(Exception):
    """Bad input: the message is the one line printed after 'error: '."""


class OneLineParser(argparse.ArgumentParser):
    """argparse with its errors on one line (no usage dump), raised as UsageError (exit 2)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")
