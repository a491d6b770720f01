"""Schema evolution through Dagster, on the real broker and a Dagster instance: an asset adds a
column with ``shuffle/schema_mode: merge``, each materialization's column schema is its run's
version, a consumer's stale declaration is named where it loads and fails the layout check."""

import datetime as dt
import uuid

import pandas as pd
import pytest
from dagster import (
    AssetKey,
    AssetSelection,
    AssetSpec,
    DailyPartitionsDefinition,
    Definitions,
    MaterializeResult,
    asset,
    define_asset_job,
    instance_for_test,
    materialize,
)

from orchestration import (
    KafkaResource,
    KafkaShuffleIOManager,
    shuffle_asset_checks,
    shuffle_metadata,
)
from orchestration.shuffle import (
    ShuffleLayoutError,
    ShuffleSpec,
    alter_shuffle,
    shuffle_log,
    write_table,
)

pytestmark = pytest.mark.integration

DAYS = ["2024-06-01", "2024-06-02", "2024-06-03"]
daily = DailyPartitionsDefinition(start_date=DAYS[0], end_date="2024-06-10")


def events(day: str, with_country: bool) -> pd.DataFrame:
    n = 20
    frame = pd.DataFrame(
        {
            "user_id": [f"u{i % 5}" for i in range(n)],
            "ts": pd.date_range(day, periods=n, freq="min", tz="UTC"),
            "clicks": list(range(n)),
        }
    )
    if with_country:
        frame["country"] = ["fr" if i % 2 else "de" for i in range(n)]
    return frame


def producer(topic: str, mode: str | None):
    @asset(
        name="events",
        partitions_def=daily,
        io_manager_key="shuffle_io",
        metadata=shuffle_metadata(
            key="user_id", num_partitions=3, event_time="ts", topic=topic, schema_mode=mode
        ),
    )
    def events_asset(context) -> pd.DataFrame:
        return events(context.partition_key, context.partition_key != DAYS[0])

    return events_asset


def materializations(instance, key: str):
    records = instance.fetch_materializations(AssetKey(key), limit=100).records
    return sorted(
        (r.event_log_entry.dagster_event.event_specific_data.materialization for r in records),
        key=lambda m: m.partition,
    )


def test_merge_through_the_io_manager_and_column_schema_per_run(bootstrap):
    topic = f"evo-dg.events-{uuid.uuid4().hex[:8]}"
    io = KafkaShuffleIOManager(kafka=KafkaResource(bootstrap_servers=bootstrap))
    with instance_for_test() as instance:
        strict = producer(topic, None)
        assert materialize(
            [strict], partition_key=DAYS[0], instance=instance, resources={"shuffle_io": io}
        ).success
        # The IO manager's default is strict: a new column is refused, naming the mode.
        result = materialize(
            [strict],
            partition_key=DAYS[1],
            instance=instance,
            resources={"shuffle_io": io},
            raise_on_error=False,
        )
        assert not result.success
        text = str(result.all_events)
        assert "column 'country'" in text and "schema_mode='merge'" in text
        # The asset's metadata asks for merge; the IO manager's config could too.
        merged = producer(topic, "merge")
        for day in DAYS[1:]:
            assert materialize(
                [merged], partition_key=day, instance=instance, resources={"shuffle_io": io}
            ).success
        by_day = {m.partition: m.metadata for m in materializations(instance, "events")}
        assert by_day[DAYS[0]]["shuffle/schema_version"].value == 1
        assert by_day[DAYS[1]]["shuffle/schema_version"].value == 2
        first = [c.name for c in by_day[DAYS[0]]["dagster/column_schema"].value.columns]
        second = [c.name for c in by_day[DAYS[1]]["dagster/column_schema"].value.columns]
        assert first == ["user_id", "ts", "clicks"]
        assert second == ["user_id", "ts", "clicks", "country"]
        assert "added column 'country'" in by_day[DAYS[1]]["shuffle/schema_changes"].value
        # The IO manager's own schema_mode works the same when the metadata says nothing.
        io_merge = KafkaShuffleIOManager(
            kafka=KafkaResource(bootstrap_servers=bootstrap), schema_mode="merge"
        )
        alter_shuffle(topic, kafka={"bootstrap.servers": bootstrap}, drop_columns=["country"])
        assert materialize(
            [strict], partition_key=DAYS[2], instance=instance, resources={"shuffle_io": io_merge}
        ).success
        assert shuffle_log(topic, kafka={"bootstrap.servers": bootstrap}).layout.version == 4


def test_a_stale_declaration_is_named_on_load_and_fails_the_layout_check(bootstrap):
    topic = f"evo-dg.stale-{uuid.uuid4().hex[:8]}"
    conf = {"bootstrap.servers": bootstrap}
    io = KafkaShuffleIOManager(kafka=KafkaResource(bootstrap_servers=bootstrap))
    merged = producer(topic, "merge")
    with instance_for_test() as instance:
        for day in DAYS[:2]:
            assert materialize(
                [merged], partition_key=day, instance=instance, resources={"shuffle_io": io}
            ).success
        alter_shuffle(topic, kafka=conf, rename_columns={"clicks": "n_clicks"}, num_partitions=6)
        # Another code location declares the shuffle as it was: 3 partitions, old columns.
        spec = AssetSpec(
            "events",
            partitions_def=daily,
            metadata={
                **shuffle_metadata(key="user_id", num_partitions=3, event_time="ts", topic=topic),
                "dagster/column_schema": materializations(instance, "events")[0].metadata[
                    "dagster/column_schema"
                ],
            },
        ).with_io_manager_key("shuffle_io")

        @asset(partitions_def=daily)
        def per_user(events: pd.DataFrame) -> MaterializeResult:
            return MaterializeResult(
                metadata={"rows": len(events), "columns": ",".join(events.columns)}
            )

        checks = shuffle_asset_checks(spec, blocking=False)
        defs = Definitions(
            assets=[spec, per_user], asset_checks=checks, resources={"shuffle_io": io}
        )
        job = defs.resolve_implicit_global_asset_job_def()
        result = job.execute_in_process(
            instance=instance, partition_key=DAYS[1], asset_selection=[AssetKey("per_user")]
        )
        assert result.success
        logged = [e.user_message for e in instance.all_logs(result.run_id)]
        warnings = [m for m in logged if "declaration differs" in m]
        said = "\n".join(w or "" for w in warnings)
        assert "num_partitions: declared 3, the shuffle has 6" in said
        assert "column 'clicks': declared, not in the shuffle's schema" in said
        assert "column 'n_clicks' (bigint): in the shuffle's schema, not declared" in said
        # The read follows the log: the latest columns.
        mat = result.asset_materializations_for_node("per_user")[0]
        assert mat.metadata["columns"].value == "user_id,ts,n_clicks,country"
        selection = AssetSelection.assets(per_user) | AssetSelection.checks_for_assets(spec.key)
        check_job = Definitions(
            assets=[spec, per_user],
            asset_checks=checks,
            resources={"shuffle_io": io},
            jobs=[define_asset_job("checks", selection=selection)],
        ).resolve_job_def("checks")
        run = check_job.execute_in_process(
            instance=instance, partition_key=DAYS[1], raise_on_error=False
        )
        layout_check = [
            e.asset_check_evaluation_data
            for e in run.all_events
            if e.event_type_value == "ASSET_CHECK_EVALUATION"
            and e.asset_check_evaluation_data.check_name == "shuffle_layout"
        ]
        assert layout_check and not layout_check[0].passed
        assert "num_partitions: declared 3" in layout_check[0].description
    # A writer naming a count the shuffle never had is refused, naming both.
    with pytest.raises(ShuffleLayoutError, match="num_partitions is 6 .grown from 3., not 4"):
        write_table(
            events(DAYS[0], False), ShuffleSpec(topic, "user_id", 4, event_time="ts"), kafka=conf
        )


def test_a_run_outside_its_window_can_be_refused(bootstrap):
    topic = f"evo-dg.outside-{uuid.uuid4().hex[:8]}"
    conf = {"bootstrap.servers": bootstrap}
    io = KafkaShuffleIOManager(kafka=KafkaResource(bootstrap_servers=bootstrap))

    @asset(
        name="events",
        partitions_def=daily,
        io_manager_key="shuffle_io",
        metadata=shuffle_metadata(
            key="user_id", num_partitions=3, event_time="ts", topic=topic,
            refuse_outside_window=True,
        ),
    )  # fmt: skip
    def events_asset(context) -> pd.DataFrame:
        # Forgot to select its day: the next day's rows too.
        return pd.concat([events(DAYS[0], False), events(DAYS[1], False)])

    with instance_for_test() as instance:
        result = materialize([events_asset], partition_key=DAYS[0], instance=instance,
                             resources={"shuffle_io": io}, raise_on_error=False)  # fmt: skip
        assert not result.success
        text = str(result.all_events)
        assert f"of window '{DAYS[0]}'" in text and "was not committed" in text
    # Refused before its commit: nothing is visible.
    assert shuffle_log(topic, kafka=conf).commits == []
    # The engine's own option, on a write of the day's rows alone: committed.
    inside = write_table(
        events(DAYS[0], False), ShuffleSpec(topic, "user_id", 3, event_time="ts"), kafka=conf,
        window=DAYS[0], event_time_bounds=(
            dt.datetime.fromisoformat(DAYS[0]).replace(tzinfo=dt.UTC),
            dt.datetime.fromisoformat(DAYS[1]).replace(tzinfo=dt.UTC),
        ),
    )  # fmt: skip
    assert inside.rows == 20
