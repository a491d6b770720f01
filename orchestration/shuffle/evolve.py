"""Changing a shuffle after it was created: :func:`alter_shuffle` (columns added, dropped,
renamed or widened; Kafka partitions added), as metadata only, in its commit log; and
:func:`rewrite_shuffle`, which copies a shuffle into one of another layout (a new key, more
key groups) when a change is not metadata. Neither needs Spark.

Each change is a new layout version (``change/<n>/<id>`` in the commit log, see
:mod:`orchestration.shuffle.core.evolution`); runs already written keep the version they
were written under and are read as the latest by every reader.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from orchestration.shuffle.core.commitlog import Commit, Layout, from_micros
from orchestration.shuffle.core.evolution import Alteration, LayoutVersion, alter, column_type
from orchestration.shuffle.errors import ShuffleError, ShuffleOptionError
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


# A rewritten run's commit attributes: the shuffle and run it was copied from, and when that
# run was committed. A rewrite that is run again skips the runs already copied.
REWRITTEN_FROM_TOPIC = "rewritten_from_topic"
REWRITTEN_FROM_RUN = "rewritten_from_run"
REWRITTEN_FROM_COMMITTED_AT = "rewritten_from_committed_at"

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from orchestration.shuffle.spec import ShuffleSpec, WriteResult


@dataclass
class RewriteResult:
    """What :func:`rewrite_shuffle` did: the runs it copied (by source run id), those it
    found copied already (a rewrite run again), and those that failed, with why."""

    copied: dict[str, WriteResult] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


def rewrite_shuffle(
    source: str,
    target: ShuffleSpec,
    *,
    kafka: KafkaConfig,
    spark: SparkSession | None = None,
    windows: Sequence[str] | None = None,
    on_run: Callable[[Commit, WriteResult | ShuffleError | None], None] | None = None,
) -> RewriteResult:
    """Copies every visible run of the shuffle ``source`` into the shuffle ``target`` (of
    another layout: a new key, more key groups, another topic), one run for each, in the
    source's commit order.

    Each copy keeps its run's window, the event time it declared complete
    (``complete_until``) and its attributes, and records where it came from
    (``rewritten_from_topic``, ``rewritten_from_run``, ``rewritten_from_committed_at``); its
    rows are the run's, read as the source's latest schema version. Resumable: a run whose
    copy is already the target's visible run of its window (or, for a run without a window,
    any copy of it) is skipped, so a rewrite stopped half-way is run again to finish it, and
    run again later to copy the windows written since. A run that fails to copy does not
    stop the others.

    Without ``spark``, each run is read and written in this process (``read_table``,
    ``write_table``: the run must fit in memory, and its key of a type hashed in Arrow);
    with a session, through Spark (``read_shuffle``, ``write_shuffle``).

    Switching consumers: once the rewrite has copied every window (and the producer writes
    to ``target``), point the consumers at the target's topic (``shuffle/topic`` in their
    ``shuffle_metadata``, or ``read_shuffle(..., topic)``); the source stays readable until
    it is deleted, so the asset's earlier materializations keep their meaning. See the
    Evolution guide.

    Example::

        spec = ShuffleSpec("events.by_user.v2", key="user_id", num_partitions=16,
                           max_parallelism=512, event_time="ts")
        result = rewrite_shuffle("events.by_user", spec, kafka=conf)
        assert not result.failed

    Args:
        source: The shuffle to copy.
        target: The new shuffle; created by the first copy, or checked against its layout.
        kafka: The cluster both live on.
        spark: A session to copy through Spark; None: without Spark.
        windows: Copy only these windows (default: every visible run).
        on_run: Called after each run with its commit and the copy's result, its error, or
            None when it was copied already (e.g. to log progress).

    Returns:
        The runs copied, skipped and failed.

    Raises:
        ShuffleOptionError: ``target`` is ``source``.
        ShuffleTopicNotFoundError: No shuffle ``source``.
    """
    from orchestration.shuffle.table_read import read_table
    from orchestration.shuffle.table_write import write_table

    if target.topic == source:
        raise ShuffleOptionError(
            f"shuffle {source!r}: rewrite_shuffle needs another topic to copy it into"
        )
    client = KafkaClient.of(kafka)
    src = read_log(client, source)
    src.require_layout()
    src.require_readable(windows)
    try:
        done = read_log(client, target.topic)
    except ShuffleError:
        done = None
    copied_runs = set()
    if done is not None:
        latest = done.latest_by_window()
        for c in done.commits:
            run = c.attrs.get(REWRITTEN_FROM_RUN)
            if c.attrs.get(REWRITTEN_FROM_TOPIC) != source or run is None:
                continue
            # A window's copy counts only while it is the target's visible run of it.
            if c.window is None or latest.get(c.window) is c:
                copied_runs.add(run)
    result = RewriteResult()
    for commit in src.visible(windows):
        if commit.run_id in copied_runs:
            result.skipped.append(commit.run_id)
            if on_run is not None:
                on_run(commit, None)
            continue
        attrs = {
            **commit.attrs,
            REWRITTEN_FROM_TOPIC: source,
            REWRITTEN_FROM_RUN: commit.run_id,
            REWRITTEN_FROM_COMMITTED_AT: commit.committed_at,
        }
        complete = from_micros(commit.complete_until)
        outcome: WriteResult | ShuffleError
        try:
            if spark is None:
                rows = read_table(source, kafka=client, runs=[commit.run_id], log=src)
                outcome = write_table(
                    rows, target, kafka=client, window=commit.window,
                    complete_until=complete, attrs=attrs,
                )  # fmt: skip
            else:
                from orchestration.shuffle.read import read_shuffle
                from orchestration.shuffle.write import write_shuffle

                df = read_shuffle(spark, source, kafka=client, runs=[commit.run_id], log=src)
                outcome = write_shuffle(
                    df, target, kafka=client, window=commit.window,
                    complete_until=complete, attrs=attrs,
                )  # fmt: skip
        except ShuffleError as exc:
            outcome = exc
            result.failed[commit.run_id] = str(exc)
            log.warning(
                "shuffle %r: run %s (window %r) was not copied into %r: %s",
                source, commit.run_id, commit.window, target.topic, exc,
            )  # fmt: skip
        else:
            result.copied[commit.run_id] = outcome
            log.info(
                "shuffle %r: run %s (window %r) copied into %r as run %s (%d rows)",
                source, commit.run_id, commit.window, target.topic, outcome.run_id,
                outcome.rows,
            )  # fmt: skip
        if on_run is not None:
            on_run(commit, outcome)
    return result


__all__ = ["RewriteResult", "alter_shuffle", "rewrite_shuffle"]
