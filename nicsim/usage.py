"""Bad input on a command line: the one error every command of nicsim reports the same way."""


class UsageError(Exception):
    """Bad input: the message is the one line printed after 'error: '."""
