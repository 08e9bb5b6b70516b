"""The one error type users see as a single line, without a traceback."""


class UserError(Exception):
    """A mistake in the user's input (config, command line, results file) that they can fix.

    The message is one line that names the problem and the fix. Bugs are not UserErrors and keep their
    tracebacks.
    """

    exit_code = 2
