"""Hadoop's S3A connector must be the Hadoop version pyspark ships: hadoop-aws calls into
hadoop-common, and a different version fails at run time with missing methods."""

import re
from pathlib import Path

import pyspark

POM = Path(__file__).resolve().parents[2] / "stack" / "s3a" / "pom.xml"


def test_hadoop_aws_is_the_hadoop_version_of_pysparks_jars():
    jars = Path(pyspark.__file__).parent / "jars"
    shipped = {
        m.group(1)
        for j in jars.glob("hadoop-client-api-*.jar")
        if (m := re.fullmatch(r"hadoop-client-api-(.+)\.jar", j.name))
    }
    pinned = re.search(r"<hadoop.version>([^<]+)</hadoop.version>", POM.read_text())
    assert pinned is not None, f"{POM} pins no hadoop.version"
    assert shipped == {pinned.group(1)}, (shipped, pinned.group(1))
