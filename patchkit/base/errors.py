"""Errors that carry a message a user can act on. Anything else is a bug."""


class PatchkitError(Exception):
    """Base: the message is the whole story, no traceback needed."""


class UsageError(PatchkitError):
    """Bad command line, recipe or inventory: nothing was contacted (exit 2)."""


class HostError(PatchkitError):
    """A host could not be reached or worked with (that host fails, others go on)."""


class HostUnreachable(HostError):
    """The host could not be reached (connection, host key, authentication); the message says which."""
