"""Root exception of the project; every package's errors derive from it."""


class DpmError(Exception):
    """Base of every error this project raises on purpose.

    The CLI prints these as one clear line and exits non-zero; anything else is a bug.
    """
