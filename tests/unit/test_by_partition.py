"""A producer task's split of a batch by partition (``split_by_partition``): each partition's
rows in their order in the batch, and with a mask, only the rows it keeps (a sorted write's
task keeps its own partitions' rows), over generated batches."""

import numpy as np
import pyarrow as pa
import pytest

from orchestration.shuffle.spark.writer import split_by_partition


def expected(batch: pa.RecordBatch, parts: np.ndarray, keep: np.ndarray | None) -> dict:
    rows = batch.to_pylist()
    out: dict[int, list] = {}
    for i, p in enumerate(parts.tolist()):
        if keep is None or keep[i]:
            out.setdefault(p, []).append(rows[i])
    return out


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("masked", [False, True])
def test_each_partition_gets_its_kept_rows_in_batch_order(seed, masked):
    rnd = np.random.default_rng(seed)
    n = int(rnd.integers(0, 200))
    num_partitions = int(rnd.choice([1, 3, 8, 70000]))
    parts = rnd.integers(0, min(num_partitions, int(rnd.integers(1, 5))), n, dtype=np.int64)
    batch = pa.record_batch(
        {
            "s": pa.array([f"r{i}" if i % 7 else None for i in range(n)], pa.string()),
            "x": pa.array(rnd.random(n)),
        }
    )
    keep = (rnd.random(n) < rnd.random()) if masked else None
    got: dict[int, list] = {}
    for p, rows in split_by_partition(batch, parts, num_partitions, keep):
        assert p not in got, f"partition {p} came twice"
        assert rows.num_rows > 0
        got[p] = rows.to_pylist()
    assert got == expected(batch, parts, keep)
