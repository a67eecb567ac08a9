"""The one exception type the CLI turns into a one-line message and exit 2."""


class UserError(Exception):
    """Bad input from the user or their files: shown as one line, exit code 2.

    `where` is a "file:line" (or just a file) the message is about, when known.
    """

    def __init__(self, message: str, where: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.where = where

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message

    def _render_traceback_(self) -> list[str]:
        """IPython and Jupyter show these lines instead of a traceback: a UserError in a notebook
        (`drill.check`, `%%drill`) reads as the CLI's one line, not as a crash of drill."""
        return [f"error: {self}"]
