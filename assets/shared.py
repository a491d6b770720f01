"""What the reference pipeline's asset modules share: its partitions, its asset group, the keys
of the assets one module defines and another depends on, the shuffle IO manager's resource
key and the fault-injection resource.

Both ``assets.pipeline`` and ``assets.enrichment`` import from here and neither imports the
other back, so the pipeline's modules form no import circle.
"""

from dagster import AssetKey, ConfigurableResource, DailyPartitionsDefinition
from pydantic import Field

from assets.flights_data import END_DAY, FIRST_DAY, LOCAL_TZ

daily = DailyPartitionsDefinition(start_date=FIRST_DAY, end_date=END_DAY, timezone=LOCAL_TZ)

# One asset group, so that one lineage page shows the whole pipeline.
PIPELINE_GROUP = "flights_pipeline"
FLIGHTS = AssetKey("flights")
FLIGHTS_BY_TAILNUM = AssetKey("flights_by_tailnum")
MISSING_TAILNUM = AssetKey("flights_missing_tailnum")
SHUFFLE_IO_MANAGER = "shuffle_io_manager"
DEFAULT_TOPIC = "flights.by_tailnum"


class FaultInjection(ConfigurableResource):
    """Makes chosen assets fail for chosen days (``"asset_name:YYYY-MM-DD"``), to try the
    failure handling out. Empty by default.

    A consumer listed fails outright. ``flights_by_tailnum`` listed for a day lets that
    day's rows without a tailnum through to the shuffle, whose writer refuses them: that
    day fails, the others of the run commit.
    """

    fail: list[str] = Field(default_factory=list)
    poison_flights: list[str] = Field(
        default_factory=list,
        description="Flights (``UA1545@2013-01-01``) the queue-mode enrichment fails on, "
        "every delivery: they end in its dead-letter topic.",
    )

    def fails(self, asset_name: str, day: str) -> bool:
        return f"{asset_name}:{day}" in self.fail

    def check(self, asset_name: str, day: str) -> None:
        if self.fails(asset_name, day):
            raise RuntimeError(f"injected failure of {asset_name} for {day}")
