"""A shuffle's producer as its own Spark application, launched through Dagster Pipes: what
``tests/integration/test_pipes.py`` submits to the local standalone cluster with
``spark-submit``. It uses the library and ``dagster_pipes`` only.

Extras from the asset: ``source`` (a Parquet folder partitioned by ``day``) and, for a test
of a failing window, ``fail_window`` (that window's write fails as a write whose tasks all
fail does).
"""

import contextlib

from dagster_pipes import open_dagster_pipes
from pyspark.sql import SparkSession

from orchestration import pipes_write_shuffle
from orchestration.shuffle.testing import fail_window_writes


def main() -> None:
    with open_dagster_pipes() as pipes:
        spark = SparkSession.builder.appName("pipes-producer").getOrCreate()
        source = pipes.get_extra("source")
        days = pipes.get_extra("kafka_shuffle")["windows"]
        paths = [f"{source}/day={d}" for d in days]
        df = spark.read.option("basePath", source).parquet(*paths)
        with contextlib.ExitStack() as stack:
            fail = pipes.extras.get("fail_window")
            if fail:
                stack.enter_context(fail_window_writes(fail))
            pipes_write_shuffle(df)
        spark.stop()


if __name__ == "__main__":
    main()
