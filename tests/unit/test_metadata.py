"""shuffle_metadata and the IO manager's parser (shuffle_asset) agree on every argument.

The cases come from shuffle_metadata's signature: an argument added there without a sample
here, or one the parser refuses or drops, fails a test.
"""

import inspect

import pytest
from dagster import AssetKey, asset

from orchestration import shuffle_metadata
from orchestration.definition import ShuffleAsset, shuffle_asset

PARAMETERS = inspect.signature(shuffle_metadata).parameters
REQUIRED = [name for name, p in PARAMETERS.items() if p.default is inspect.Parameter.empty]

# One value per argument, each unlike its default, so a value the parser drops shows.
SAMPLES = {
    "key": ["tailnum", "carrier"],
    "num_partitions": 4,
    "max_parallelism": 64,
    "event_time": "sched_dep",
    "topic": "flights.by_plane",
    "window_column": "day",
    "replication_factor": 2,
    "schema_mode": "merge",
    "refuse_outside_window": True,
}

MISSING = object()
# Arguments that need another: given with it.
NEEDS = {"refuse_outside_window": ["event_time"]}


def read_back(parsed: ShuffleAsset, name: str):
    """The argument's value as the parsed asset holds it: an attribute of that name on the
    asset or on its ShuffleSpec."""
    value = getattr(parsed, name, MISSING)
    if value is MISSING:
        value = getattr(parsed.spec, name, MISSING)
    assert value is not MISSING, f"shuffle_asset keeps no {name!r} (on the asset or its spec)"
    return value


def expected(name: str):
    value = SAMPLES[name]
    return tuple(value) if isinstance(value, list) else value


def test_every_argument_has_a_sample_unlike_its_default():
    assert set(SAMPLES) == set(PARAMETERS), "give each argument of shuffle_metadata a sample"
    for name, p in PARAMETERS.items():
        assert SAMPLES[name] != p.default, name


@pytest.mark.parametrize("name", list(PARAMETERS))
def test_each_argument_survives_the_parser(name):
    assert name in SAMPLES, f"shuffle_metadata({name}=...) has no sample in SAMPLES"
    needed = [*REQUIRED, *NEEDS.get(name, [])]
    kwargs = {n: SAMPLES[n] for n in needed} | {name: SAMPLES[name]}
    parsed = shuffle_asset("a", ["a"], shuffle_metadata(**kwargs))
    assert read_back(parsed, name) == expected(name)


def test_all_arguments_survive_dagster_and_the_parser():
    # As the IO manager and the sensors get them: the definition metadata of an asset,
    # values wrapped by Dagster.
    @asset(metadata=shuffle_metadata(**SAMPLES))
    def flights_by_plane():
        return None

    key = AssetKey("flights_by_plane")
    metadata = flights_by_plane.specs_by_key[key].metadata
    parsed = shuffle_asset(key.to_user_string(), key.path, metadata)
    assert {name: read_back(parsed, name) for name in PARAMETERS} == {
        name: expected(name) for name in PARAMETERS
    }
