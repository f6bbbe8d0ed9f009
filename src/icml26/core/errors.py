"""The one exception type for user mistakes, so the CLI can print it without a traceback."""


class UserError(ValueError):
    """Bad input from the user: a path, a name, a field or a value, with what was expected.

    The CLI prints the message alone and exits with status 2.
    """
