"""The JVM read path's Maven coordinate carries the Python package's version: a jar and the
wheel it ships in are one release."""

import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def _pom(tag: str) -> str:
    found = ET.parse(ROOT / "jvm" / "pom.xml").getroot().find(f"m:{tag}", POM_NS)
    assert found is not None and found.text, f"jvm/pom.xml has no <{tag}>"
    return found.text.strip()


def test_the_jar_version_is_the_python_package_version():
    with (ROOT / "pyproject.toml").open("rb") as f:
        version = tomllib.load(f)["project"]["version"]
    assert _pom("version") == version


def test_the_maven_coordinate_names_the_product_and_its_scala_line():
    assert _pom("groupId") == "io.kafkashuffle"
    assert _pom("artifactId") == "kafka-shuffle-spark_2.13"


def test_the_jar_and_the_python_side_support_the_same_spark_lines():
    from orchestration.shuffle.spark.jvm import SUPPORTED_SPARK

    found = ET.parse(ROOT / "jvm" / "pom.xml").getroot().find("m:properties", POM_NS)
    assert found is not None
    supported = found.find("m:spark.supported", POM_NS)
    assert supported is not None and supported.text
    assert tuple(supported.text.split(",")) == SUPPORTED_SPARK
