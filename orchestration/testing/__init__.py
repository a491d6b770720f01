"""Testing a project's shuffle assets: what a test asserts on, and the pytest plugin's fixtures.

Installing the package registers a pytest plugin (``orchestration.testing.plugin``) whose
fixtures give a test a Kafka cluster (``shuffle_kafka``), a SparkSession (``shuffle_spark``)
and a ``KafkaShuffleIOManager`` whose topics no other test sees (``shuffle_io_manager``); a
project's ``conftest.py`` needs nothing. The functions here read back what an asset wrote
through such an IO manager, and make a window's write fail on purpose.

Example::

    def test_events(shuffle_io_manager):
        result = materialize([events_by_user], partition_key="2024-03-01",
                             resources={"shuffle_io": shuffle_io_manager})
        assert committed_windows(shuffle_io_manager, events_by_user) == ["2024-03-01"]
        rows = window_rows(shuffle_io_manager, events_by_user, "2024-03-01")
        assert set(rows["user_id"]) == {"u1", "u2"}

See docs/testing.md for a whole example.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd  # type: ignore[import-untyped]
    from dagster import AssetsDefinition

    from orchestration.io_manager import KafkaShuffleIOManager

__all__ = ["committed_windows", "fail_window_once", "shuffle_topic", "window_rows"]


def shuffle_topic(io_manager: KafkaShuffleIOManager, asset: AssetsDefinition) -> str:
    """The topic ``io_manager`` stores ``asset`` in: its Kafka resource's ``topic_prefix``
    followed by the asset's ``shuffle/topic`` (default: its key's parts joined with ".")."""
    from orchestration.definition import asset_shuffle

    return asset_shuffle(asset).under(io_manager.kafka).topic


def committed_windows(io_manager: KafkaShuffleIOManager, asset: AssetsDefinition) -> list[str]:
    """The windows (partition keys) of ``asset`` that have a readable committed run, sorted.
    A window whose runs all failed or expired is not among them."""
    from orchestration.shuffle.errors import ShuffleTopicNotFoundError
    from orchestration.shuffle.read import shuffle_log

    try:
        log = shuffle_log(shuffle_topic(io_manager, asset), kafka=io_manager.kafka.client())
    except ShuffleTopicNotFoundError:
        return []
    return sorted(w for w in log.latest_by_window() if w is not None)


def window_rows(
    io_manager: KafkaShuffleIOManager, asset: AssetsDefinition, window: str | None = None
) -> pd.DataFrame:
    """The rows of ``window``'s latest committed run of ``asset``, as pandas, in no
    particular order; ``window=None``: the latest run of an unpartitioned asset. Read with
    the IO manager's session, as a downstream asset would read them.

    Raises:
        ShuffleWindowNotFoundError: The window has no committed run.
    """
    from orchestration.shuffle.errors import ShuffleWindowNotFoundError
    from orchestration.shuffle.read import plan_shuffle_read, shuffle_log

    topic = shuffle_topic(io_manager, asset)
    kafka = io_manager.kafka.client()
    log = shuffle_log(topic, kafka=kafka)
    if window is None:
        # As the IO manager reads an unpartitioned asset: its latest run without a window.
        unwindowed = [c for c in log.commits if c.window is None]
        latest = unwindowed[-1] if unwindowed else None
    else:
        latest = log.latest_by_window().get(window)
    if latest is None:
        raise ShuffleWindowNotFoundError(
            f"shuffle {topic!r} has no committed run of window {window!r}; committed: "
            f"{sorted(w for w in log.latest_by_window() if w is not None)}"
        )
    read = plan_shuffle_read(
        io_manager.session(), topic, kafka=kafka, runs=[latest.run_id], log=log
    )
    return read.dataframe().toPandas()


@contextlib.contextmanager
def fail_window_once(
    io_manager: KafkaShuffleIOManager, asset: AssetsDefinition, window: str
) -> Iterator[None]:
    """Inside, the next write of ``asset``'s ``window`` through ``io_manager`` fails as a
    failed Spark job does: its frames reach Kafka, nothing is committed. In a run over a
    range of windows the others commit, and the run fails tagged
    ``shuffle/failed_windows`` = ``window``, which is what a failed-region sensor re-runs.
    Later writes of the window succeed. The window must have rows (the tasks fail after
    their first frame), and the write must run in the test's process (``materialize``,
    ``execute_in_process``)."""
    from orchestration.shuffle.testing import fail_window_writes

    with fail_window_writes(window, topic=shuffle_topic(io_manager, asset)):
        yield
