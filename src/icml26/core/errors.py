"""The one exception type for user mistakes, so the CLI can print it without a traceback."""

import contextlib


class UserError(ValueError):
    """Bad input from the user: a path, a name, a field or a value, with what was expected.

    The CLI prints the message alone and exits with status 2.
    """


@contextlib.contextmanager
def exit_on_user_error():
    """For method CLIs: a :class:`UserError` becomes one line on stderr and exit status 2."""
    import typer

    try:
        yield
    except UserError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
