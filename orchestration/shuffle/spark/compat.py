"""What differs between the PySpark lines the package runs on (4.0 to 4.3), in one place.

**Arrow types.** PySpark 4.2 made the time zone of Arrow timestamps an argument
(``to_arrow_schema(schema, timezone="UTC")``); 4.0 and 4.1 take ``timestamp_utc=True``
for the same type. :func:`to_arrow_schema_utc` and :func:`to_arrow_type_utc` give it on each.
Back from Arrow, a timestamp without a time zone is Spark's ``timestamp_ntz`` by default
only from 4.2 (``prefer_timestamp_ntz``); :func:`from_arrow_schema_ntz` asks for it on each.

**Streaming sources.** PySpark 4.2 gave Python streaming sources admission control
(``getDefaultReadLimit``, and a ``latestOffset(start, limit)`` told where the micro-batch
starts and how much it may take) and ``Trigger.AvailableNow``
(``SupportsTriggerAvailableNow``), in ``pyspark.sql.streaming.datasource``. PySpark 4.0
and 4.1 have neither: Spark calls ``latestOffset()`` with no arguments and a micro-batch
takes everything up to the offset it returns.

The stream readers are written once, against the 4.2 protocol; on 4.0 and 4.1 this module
stands in for the missing types, and the readers answer the older call too. What they cannot
honour there (a limit per micro-batch) is refused up front by :func:`require_admission_control`
with the Spark version and what to use instead; ``Trigger.AvailableNow`` still works, by
Spark's own wrapper for sources without it (it reads what was there when the query started).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from orchestration.shuffle.errors import ShuffleOptionError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import DataType, StructType

try:
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxFiles,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    ADMISSION_CONTROL = True
except ImportError:  # PySpark 4.0 and 4.1
    ADMISSION_CONTROL = False

    class ReadLimit:  # type: ignore[no-redef]
        """Stands in for PySpark 4.2's ReadLimit; never passed by Spark before 4.2."""

    class ReadAllAvailable(ReadLimit):  # type: ignore[no-redef]
        pass

    class ReadMaxRows(ReadLimit):  # type: ignore[no-redef]
        def __init__(self, max_rows: int):
            self.max_rows = max_rows

    class ReadMaxFiles(ReadLimit):  # type: ignore[no-redef]
        def __init__(self, max_files: int):
            self.max_files = max_files

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """A plain base before 4.2: Spark does not call prepareForTriggerAvailableNow."""


__all__ = [
    "ADMISSION_CONTROL",
    "FIRST_ADMISSION_CONTROL",
    "ReadAllAvailable",
    "ReadLimit",
    "ReadMaxFiles",
    "ReadMaxRows",
    "SupportsTriggerAvailableNow",
    "require_admission_control",
    "from_arrow_schema_ntz",
    "to_arrow_schema_utc",
    "to_arrow_type_utc",
]


def _utc() -> dict[str, Any]:
    from pyspark.sql.pandas.types import to_arrow_type

    if "timezone" in inspect.signature(to_arrow_type).parameters:
        return {"timezone": "UTC"}
    return {"timestamp_utc": True}  # PySpark 4.0 and 4.1


def to_arrow_schema_utc(schema: StructType) -> pa.Schema:
    """Spark's Arrow schema of ``schema``, timestamps in UTC, on every PySpark line."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, **_utc())


def from_arrow_schema_ntz(schema: pa.Schema) -> StructType:
    """Spark's schema of the Arrow ``schema``, a timestamp without a time zone as
    ``timestamp_ntz`` (as Spark wrote it), on every PySpark line."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema, prefer_timestamp_ntz=True)


def to_arrow_type_utc(data_type: DataType) -> pa.DataType:
    """Spark's Arrow type of ``data_type``, timestamps in UTC, on every PySpark line."""
    from pyspark.sql.pandas.types import to_arrow_type

    return to_arrow_type(data_type, **_utc())


# The first PySpark line whose Python streaming sources take admission control.
FIRST_ADMISSION_CONTROL = "4.2"


def _pyspark_version() -> str:
    import pyspark

    return pyspark.__version__


def require_admission_control(
    source: str, options: Iterable[str], *, spark_version: str | None = None, jvm: bool = False
) -> None:
    """Refuses per-micro-batch limits ``options`` (those given) on a PySpark without
    admission control for Python streaming sources.

    Args:
        source: The data source's name, for the message.
        options: The limit options the query sets (empty: nothing to refuse).
        spark_version: The Spark version to judge (a session's ``spark.version``); default
            the PySpark this process imports, which is what runs a Python source.
        jvm: Whether the JVM read path is an alternative for this source.

    Raises:
        ShuffleOptionError: A limit was given and the line has no admission control; the
            message names the options, the version and what to use instead.
    """
    given = sorted(options)
    if not given:
        return
    version = spark_version or _pyspark_version()
    if spark_version is None and ADMISSION_CONTROL:
        return
    parts = version.strip().split(".")
    try:
        line = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        return
    if line >= (4, 2):
        return
    instead = (
        "read the stream on the JVM path (engine='jvm' or 'auto' with the jar on the "
        "session), which honours them on every Spark line, "
        if jvm
        else ""
    )
    raise ShuffleOptionError(
        f"{source}: option(s) {given} limit each micro-batch, which Python streaming sources "
        f"can do only from Spark {FIRST_ADMISSION_CONTROL} (admission control); this session "
        f"runs Spark {version}: {instead}leave them out (each micro-batch then reads "
        f"everything committed since the last), or use Spark {FIRST_ADMISSION_CONTROL} or newer"
    )
