"""A pass's spill file is read back a batch at a time: a key streamed from it holds a batch,
not the file, and a worker under an address-space limit (PySpark's
``spark.executor.pyspark.memory``) reads back a spill larger than the room it has left."""

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import resource

    import numpy as np
    import pyarrow as pa

    from orchestration.shuffle.spark.reader import SpillFile

    spill = SpillFile("topic 't' partition 0")
    n = 1_000_000
    batch = pa.record_batch({"k": np.arange(n, dtype=np.int64), "v": np.ones(n)})
    for _ in range(24):  # 384 MB
        spill.write(batch)
    with open("/proc/self/status") as status:
        size = next(int(line.split()[1]) for line in status if line.startswith("VmSize"))
    # Room for a few batches, not for the file.
    resource.setrlimit(resource.RLIMIT_AS, (size * 1024 + (160 << 20), resource.RLIM_INFINITY))
    total = 0
    for got in spill.read():
        total += int(got.column(0).to_numpy()[-1]) + got.num_rows
    spill.close()
    print(total)
    """
)


def test_a_spill_larger_than_the_address_space_left_is_read_back(tmp_path):
    env = {"SPARK_LOCAL_DIRS": str(tmp_path), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, env=env
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-1] == str(24 * (999_999 + 1_000_000))
    assert list(tmp_path.iterdir()) == []  # closed: the file is gone
