"""Hadoop's S3A connector must be the Hadoop version pyspark ships: hadoop-aws calls into
hadoop-common, and a different version fails at run time with missing methods."""

import re
from pathlib import Path

import pyspark
import pytest

from devstack import locals3

POM = Path(__file__).resolve().parents[2] / "stack" / "s3a" / "pom.xml"
LOCK = Path(__file__).resolve().parents[2] / "requirements.lock"


def _shipped() -> set[str]:
    jars = Path(pyspark.__file__).parent / "jars"
    return {
        m.group(1)
        for j in jars.glob("hadoop-client-api-*.jar")
        if (m := re.fullmatch(r"hadoop-client-api-(.+)\.jar", j.name))
    }


def test_hadoop_aws_is_resolved_at_the_hadoop_version_of_pysparks_jars():
    # On every PySpark line the package declares, whatever the pom's default.
    assert {locals3.pyspark_hadoop_version()} == _shipped()


def test_the_poms_default_is_the_hadoop_of_the_locked_pyspark():
    locked = re.search(r"^pyspark==(\S+)$", LOCK.read_text(), re.M)
    assert locked is not None, f"{LOCK} pins no pyspark"
    if pyspark.__version__ != locked.group(1):
        pytest.skip(
            f"PySpark {pyspark.__version__} is not the locked one: the test above covers it"
        )
    pinned = re.search(r"<hadoop.version>([^<]+)</hadoop.version>", POM.read_text())
    assert pinned is not None, f"{POM} pins no hadoop.version"
    assert _shipped() == {pinned.group(1)}, (_shipped(), pinned.group(1))
