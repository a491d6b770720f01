"""One exception hierarchy for the shuffle engine.

Every error the engine raises on purpose derives from :class:`ShuffleError` and also from
the built-in exception it resembles, so callers can catch either. Messages name the topic,
partition, offset, option or column at fault.
"""

from __future__ import annotations


class ShuffleError(Exception):
    """Base class of every error raised by the shuffle engine."""


class ShuffleConnectionError(ShuffleError, ConnectionError):
    """Kafka could not be reached (nothing listening, wrong address, timeout)."""


class ShuffleAuthorizationError(ShuffleConnectionError, PermissionError):
    """The cluster refused an operation for want of an ACL (a topic, group, transactional
    id or the cluster); the message names what was refused and the operation. Authentication
    that fails (a wrong password) is a :class:`ShuffleConnectionError` of its own."""


class ShuffleTopicNotFoundError(ShuffleError, LookupError):
    """A shuffle's data topic or commit-log topic does not exist."""


class ShuffleWindowNotFoundError(ShuffleError, LookupError):
    """A read names a window or run that has no committed run."""


class ShuffleLayoutError(ShuffleError, ValueError):
    """A write or read disagrees with the shuffle's recorded layout."""


class ShuffleSchemaError(ShuffleError, ValueError):
    """Rows do not fit the shuffle's recorded Arrow schema."""


class ShuffleOptionError(ShuffleError, ValueError):
    """An option given to the engine is missing or malformed."""


class ShuffleKeyError(ShuffleError, ValueError):
    """Rows cannot be keyed (null key values), or per-key work asks for another key."""


class ShuffleFormatError(ShuffleError, ValueError):
    """A message in a shuffle topic is not a frame this version can read."""


class ShuffleWatermarkError(ShuffleError, RuntimeError):
    """Watermarks went backwards where they must be monotonic."""


class ShuffleWriteError(ShuffleError, RuntimeError):
    """Producing to Kafka failed; the run is not committed."""


class ShuffleSessionError(ShuffleError, RuntimeError):
    """The Spark session lacks what the engine needs (a jar, a setting); the message lists
    each missing piece and where to set it. The engine never changes a session's settings."""


class QueueSchemaError(ShuffleSchemaError):
    """A queue function returned rows that do not fit the declared schema."""


class QueueGroupError(ShuffleError, ValueError):
    """A share group cannot be used: its id is a classic group's, or a config is refused."""
