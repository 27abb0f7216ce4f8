"""The one error type a user can cause.

Every message is a single line naming the input that was wrong (file and line, flag,
variable). The CLI maps it to exit status 2 and prints no traceback.
"""


class UsageError(ValueError):
    """Bad input from the user: one line, names the culprit, exit status 2."""

    exit_status = 2

    def __init__(self, message: str):
        # Keep it one line whatever the caller passed.
        super().__init__(" ".join(str(message).split()))
