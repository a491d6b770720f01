"""Output locations: URIs in pyarrow's and Spark's spellings, how each file system makes a
file visible whole, and which sessions may share a local path."""

import os

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from orchestration.shuffle import ShuffleOptionError
from orchestration.shuffle.core.paths import (
    AtomicWrite,
    atomic_write,
    check_shared,
    endpoint_mismatch,
    parse_location,
)


def test_a_plain_path_is_made_absolute_and_local(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    loc = parse_location("out/scores")
    assert loc.scheme == "" and loc.is_local
    assert loc.arrow == loc.spark == str(tmp_path / "out" / "scores")
    assert loc.given == "out/scores"
    assert parse_location(tmp_path / "x").arrow == str(tmp_path / "x")


@pytest.mark.parametrize(
    "uri, path",
    [
        ("file:///tmp/q/out", "/tmp/q/out"),
        ("file:/tmp/q/out/", "/tmp/q/out"),
        ("file://localhost/tmp/q/out", "/tmp/q/out"),
        ("FILE:///tmp/a%20b", "/tmp/a b"),
    ],
)
def test_a_file_uri_is_a_local_path_for_pyarrow_and_a_file_uri_for_spark(uri, path):
    loc = parse_location(uri)
    assert loc.scheme == "file" and loc.is_local
    assert loc.arrow == path
    assert loc.spark == "file://" + path


def test_a_file_uri_of_another_host_or_a_relative_path_is_refused():
    with pytest.raises(ShuffleOptionError, match="absolute path on this machine"):
        parse_location("file://otherhost/data/out")
    with pytest.raises(ShuffleOptionError, match="absolute path on this machine"):
        parse_location("file:data/out")


@pytest.mark.parametrize("scheme", ["s3", "s3a", "s3n", "S3A"])
def test_s3_is_s3_for_pyarrow_and_s3a_for_spark(scheme):
    loc = parse_location(f"{scheme}://shuffle-dev/queue/out/")
    assert not loc.is_local
    assert loc.arrow == "s3://shuffle-dev/queue/out"
    assert loc.spark == "s3a://shuffle-dev/queue/out"
    assert loc.child("part-1.parquet") == f"{scheme}://shuffle-dev/queue/out/part-1.parquet"


def test_pyarrow_keeps_the_query_of_a_uri_and_spark_does_not():
    loc = parse_location("s3a://b/k?region=eu-west-3")
    assert loc.arrow == "s3://b/k?region=eu-west-3"
    assert loc.spark == "s3a://b/k"


def test_other_schemes_pass_through_and_gcs_is_gs_for_spark():
    assert parse_location("gcs://b/out").spark == "gs://b/out"
    assert parse_location("gs://b/out").arrow == "gs://b/out"
    hdfs = parse_location("hdfs://namenode:8020/data/out")
    assert hdfs.arrow == hdfs.spark == "hdfs://namenode:8020/data/out"
    assert not hdfs.is_local
    abfs = parse_location("abfss://c@acct.dfs.core.windows.net/out")
    assert abfs.spark == "abfss://c@acct.dfs.core.windows.net/out"


def test_what_pyarrow_resolves_from_the_arrow_spelling(tmp_path):
    # The arrow spelling is what FileSystem.from_uri takes (no network: local, gcs).
    fs, path = pafs.FileSystem.from_uri(parse_location(f"file://{tmp_path}").arrow)
    assert fs.type_name == "local" and path == str(tmp_path)
    fs, path = pafs.FileSystem.from_uri(parse_location("gcs://bucket/out/").arrow)
    assert fs.type_name == "gcs" and path == "bucket/out"


def test_uris_without_a_bucket_and_empty_outputs_are_refused():
    with pytest.raises(ShuffleOptionError, match="needs a bucket"):
        parse_location("s3a:///out")
    with pytest.raises(ShuffleOptionError, match="path or a URI"):
        parse_location("  ")


def test_which_file_systems_rename_and_which_upload_whole():
    assert atomic_write("local") == AtomicWrite(rename=True, fsync=True)
    assert atomic_write("hdfs") == AtomicWrite(rename=True, fsync=False)
    assert atomic_write("abfs") == AtomicWrite(rename=True, fsync=False)
    assert atomic_write("s3") == AtomicWrite(rename=False, fsync=False)
    assert atomic_write("gcs") == AtomicWrite(rename=False, fsync=False)
    with pytest.raises(ShuffleOptionError, match="'py::fsspec'.*renames atomically"):
        atomic_write("py::fsspec")
    with pytest.raises(ShuffleOptionError, match="private to each process"):
        atomic_write("mock")


def test_an_output_on_a_file_system_of_one_process_is_refused_naming_it():
    from orchestration.shuffle.queue.executor import output_filesystem

    with pytest.raises(ShuffleOptionError, match="output 'mock://b/out': file system 'mock'"):
        output_filesystem("mock://b/out")


@pytest.mark.parametrize(
    "master",
    [
        "local",
        "local[2]",
        "local[*]",
        "local[4,3]",
        "local-cluster[2,1,1024]",
        "spark://127.0.0.1:17077",
        "spark://localhost:7077",
        "spark://[::1]:7077",
        None,
    ],
)
def test_a_local_path_is_accepted_when_the_executors_run_on_this_host(master):
    check_shared(parse_location("/data/out"), master=master)
    check_shared(parse_location("file:///data/out"), master=master)


@pytest.mark.parametrize(
    "master",
    [
        "yarn",
        "k8s://https://api:6443",
        "spark://spark-master:7077",
        "spark://127.0.0.1:7077,h2:7077",
    ],
)
def test_a_local_path_is_refused_when_the_executors_may_run_elsewhere(master):
    for output in ("/data/out", "file:///data/out"):
        with pytest.raises(ShuffleOptionError) as err:
            check_shared(parse_location(output), master=master, what="process_queue: output")
        text = str(err.value)
        assert text.startswith(f"process_queue: output {output!r} is a path on this machine")
        assert repr(master) in text and "s3a://<bucket>/<prefix>" in text
    # A shared location is fine anywhere.
    check_shared(parse_location("s3a://b/out"), master=master)
    check_shared(parse_location("hdfs://nn/out"), master=master)


def test_a_connect_session_shares_local_paths_only_with_a_server_on_this_host():
    local = parse_location("/data/out")
    for host in ("127.0.0.1", "localhost", "::1", "[::1]"):
        check_shared(local, connect_host=host)
    with pytest.raises(ShuffleOptionError, match="Spark Connect session of the server at 'spark"):
        check_shared(local, connect_host="spark.example.com")
    check_shared(parse_location("s3://b/out"), connect_host="spark.example.com")


def test_write_whole_leaves_only_the_whole_file_on_a_local_disk(tmp_path):
    from orchestration.shuffle.queue.executor import output_filesystem, parquet_bytes, write_whole

    fs, base = output_filesystem(f"file://{tmp_path}")
    table = pa.table({"id": list(range(50))})
    write_whole(fs, f"{base}/part-1.parquet", parquet_bytes(table))
    assert os.listdir(tmp_path) == ["part-1.parquet"]
    assert pq.read_table(tmp_path / "part-1.parquet").equals(table)


@pytest.mark.parametrize(
    ("spark_endpoint", "arrow_endpoint"),
    [
        (None, None),
        ("http://127.0.0.1:19000", "http://127.0.0.1:19000/"),
        ("127.0.0.1:19000", "HTTP://127.0.0.1:19000"),  # S3A takes an endpoint without scheme
        ("s3.eu-west-1.amazonaws.com", None),  # both AWS
    ],
)
def test_s3_endpoints_that_name_one_store_agree(spark_endpoint, arrow_endpoint):
    for uri in ("s3a://b/x", "s3://b/x"):
        got = endpoint_mismatch(
            parse_location(uri), spark_endpoint=spark_endpoint, arrow_endpoint=arrow_endpoint
        )
        assert got is None


@pytest.mark.parametrize(
    ("spark_endpoint", "arrow_endpoint", "named"),
    [
        (None, "http://127.0.0.1:19000", "AWS (spark.hadoop.fs.s3a.endpoint is unset)"),
        ("http://127.0.0.1:19000", None, "AWS (AWS_ENDPOINT_URL is unset)"),
        ("http://127.0.0.1:19000", "http://127.0.0.1:19001", "http://127.0.0.1:19001"),
    ],
)
def test_s3_endpoints_that_differ_are_named_with_where_to_set_them(
    spark_endpoint, arrow_endpoint, named
):
    got = endpoint_mismatch(
        parse_location("s3a://b/x"), spark_endpoint=spark_endpoint, arrow_endpoint=arrow_endpoint
    )
    assert got is not None and named in got
    assert "spark.hadoop.fs.s3a.endpoint" in got and "AWS_ENDPOINT_URL" in got


def test_endpoints_only_matter_on_s3(tmp_path):
    for where in (str(tmp_path), "gs://b/x", "hdfs://nn:8020/x"):
        got = endpoint_mismatch(parse_location(where), spark_endpoint="a:1", arrow_endpoint="b:2")
        assert got is None
