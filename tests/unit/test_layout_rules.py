"""Rules about the code base itself: the engine imports no Dagster; pure parts no Spark/Kafka."""

import subprocess
import sys
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[2] / "orchestration" / "shuffle"
PURE = [f"core.{p.stem}" for p in (ENGINE / "core").glob("*.py") if p.stem != "__init__"] + [
    "errors"
]


def test_engine_imports_no_dagster():
    offenders = [
        p.name
        for p in ENGINE.rglob("*.py")
        if any(
            line.lstrip().startswith(("import dagster", "from dagster"))
            for line in p.read_text().splitlines()
        )
    ]
    assert offenders == []


def test_pure_modules_load_without_spark_or_kafka():
    code = (
        "import sys\n"
        + "".join(f"import orchestration.shuffle.{m}\n" for m in PURE)
        + "bad = [m for m in ('pyspark', 'confluent_kafka', 'dagster') if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
