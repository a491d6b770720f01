"""The benchmarks: one entry point per benchmark, each run as ``python -m bench.<name>``
from the checkout (``scripts/dev bench*`` run them so, with the checkout on ``PYTHONPATH``).

- ``shuffle_bench``: the shuffle against Spark's Kafka sink and source, ``groupBy`` and a
  bucketed table (T1-T9, B, P6; ``scripts/dev bench``);
- ``session_bench``: a long-lived session (P1) and small windows (P2;
  ``scripts/dev bench-session``);
- ``jvm_bench``: the JVM read path (``scripts/dev bench-jvm``);
- ``records_bench``: ``kafka-records`` and streaming reads (``scripts/dev bench-records``);
- ``queue_bench``: queue mode (``scripts/dev bench-queue``);
- ``read_limit_bench``: a read against Kafka's own consumer (``scripts/dev bench-read-limit``);
- ``checksum_bench``: what the frames' checksum costs;
- ``per_key_floor``: T1's function alone, the floor of any per-key path;
- ``report``: the tables of docs/performance.md (and the chart) from saved results.

What they share lives in ``common`` (the synthetic rows, the baselines, the timing) and
``results`` (the shuffle benchmark's targets and chart); no benchmark imports another
(``tests/unit/test_layout_rules.py`` holds that, and that nothing here edits ``sys.path``).
"""
