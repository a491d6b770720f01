"""Changing a shuffle after it was created: :func:`alter_shuffle` (columns added, dropped,
renamed or widened; Kafka partitions added), as metadata only, in its commit log. No Spark.

Each change is a new layout version (``change/<n>/<id>`` in the commit log, see
:mod:`orchestration.shuffle.core.evolution`); runs already written keep the version they
were written under and are read as the latest by every reader.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa

from orchestration.shuffle.core.commitlog import Layout
from orchestration.shuffle.core.evolution import Alteration, LayoutVersion, alter, column_type
from orchestration.shuffle.errors import ShuffleOptionError
from orchestration.shuffle.kafka.client import KafkaClient, KafkaConfig
from orchestration.shuffle.kafka.commitlog import check_partitions, read_log, write_version


def alter_shuffle(
    topic: str,
    *,
    kafka: KafkaConfig,
    add_columns: Mapping[str, pa.DataType | str] | None = None,
    drop_columns: Sequence[str] = (),
    rename_columns: Mapping[str, str] | None = None,
    widen_columns: Mapping[str, pa.DataType | str] | None = None,
    num_partitions: int | None = None,
) -> Layout:
    """Changes the shuffle ``topic`` as metadata only: a new layout version in its commit log.

    Changes apply in this order: renames, drops, widenings, additions, then partitions. Runs
    already written are not touched: each is read as the latest version by field id (a
    renamed column keeps its values, a dropped one is no longer read, an added one is null
    in earlier runs, a widened one is read widened). The key, ``sort_by`` and event-time
    columns cannot be renamed, dropped or retyped; the key groups (``max_parallelism``)
    never change (:func:`rewrite_shuffle` makes a shuffle of another layout).

    ``num_partitions`` adds Kafka partitions to the data topic (up to the key groups): runs
    written before keep their partition count, and reads of old and new runs together stay
    keyed. A writer whose spec still names the old count writes on the new count (with a
    warning); one naming any other count is refused, naming both.

    Safe while writers and readers run: a run records the version it was written under, and
    of two changes made at once, one is refused or worked out again against the other.

    Example::

        alter_shuffle("events.by_user", kafka=conf, add_columns={"country": "string"},
                      rename_columns={"clicks": "click_count"}, widen_columns={"n": "bigint"})

    Args:
        topic: The shuffle's data topic.
        kafka: A :class:`~orchestration.shuffle.kafka.client.KafkaClient` or librdkafka
            settings.
        add_columns: New nullable columns and their types (Arrow types or Spark SQL type
            names), added at the end.
        drop_columns: Columns no longer read.
        rename_columns: ``{old: new}``.
        widen_columns: ``{column: wider type}``: a type promotion (the Evolution guide's
            table).
        num_partitions: The data topic's new partition count (more than it has).

    Returns:
        The shuffle's layout with the new version as its latest.

    Raises:
        ShuffleLayoutError: A change refused (each named with its rule); nothing changed.
        ShuffleOptionError: Nothing to change, or an argument of the wrong kind.
        ShuffleTopicNotFoundError: No such shuffle.
    """
    where = f"shuffle {topic!r}"
    if isinstance(drop_columns, str):
        raise ShuffleOptionError(f"{where}: drop_columns must be a list of names, not a string")
    change = Alteration(
        rename=dict(rename_columns or {}),
        drop=tuple(drop_columns),
        widen={
            c: column_type(t, f"{where}: widen_columns[{c!r}]")
            for c, t in (widen_columns or {}).items()
        },
        add=tuple(
            pa.field(c, column_type(t, f"{where}: add_columns[{c!r}]"), nullable=True)
            for c, t in (add_columns or {}).items()
        ),
        num_partitions=num_partitions,
    )
    client = KafkaClient.of(kafka)
    layout = read_log(client, topic).require_layout()
    # Checked once before any partition is added, so a refused change adds none.
    alter(topic, layout.layout_version(), change, layout.pinned, layout.max_parallelism)
    if num_partitions is not None:
        # Partitions first, then the version that names them: a run written in between is
        # written on the partitions of the version before, which its commit says.
        client.grow_topic(topic, num_partitions)

    def altered(latest: Layout) -> LayoutVersion:
        return alter(topic, latest.layout_version(), change, latest.pinned, latest.max_parallelism)

    layout = write_version(client, layout, altered, "alter_shuffle")
    check_partitions(client, layout)
    return layout


__all__ = ["alter_shuffle"]
