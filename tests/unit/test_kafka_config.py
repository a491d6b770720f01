"""Spark's kafka.* names (the Java client's) made into librdkafka settings for the Python
path: each translation, each refusal with its message, and no secret in any message."""

import pickle
import re
from pathlib import Path

import pytest

from orchestration.shuffle import KafkaClient, ShuffleOptionError
from orchestration.shuffle.core.kafka_config import (
    REFUSED,
    SAME_NAMES,
    librdkafka_config,
    names_table,
    parse_jaas,
    redact,
)
from orchestration.shuffle.kafka.client import READER_GROUP

ROOT = Path(__file__).resolve().parents[2]
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
SECRET = "pw-4e1d\"9'x"
# The secret in JAAS syntax: double-quoted, its quote and backslash escaped.
QUOTED = '"' + SECRET.replace("\\", "\\\\").replace('"', '\\"') + '"'


def jaas(module=SCRAM, options=f'username="alice" password={QUOTED}'):
    return f"{module} required {options};"


# (Java settings, the librdkafka settings they become)
TRANSLATIONS = {
    "scram jaas": (
        {"sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": jaas()},
        {"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": SECRET},
    ),
    "plain jaas, unquoted words, other flag case": (
        {"sasl.jaas.config": f"{PLAIN} REQUIRED username=alice password=a.b-c_d$;"},
        {"sasl.username": "alice", "sasl.password": "a.b-c_d$"},
    ),
    "jaas with single quotes, comments, octal and tab escapes": (
        {
            "sasl.jaas.config": f"{PLAIN} required /* who */ username='al ice' // line\n"
            + 'password="t\\tn\\101";'
        },
        {"sasl.username": "al ice", "sasl.password": "t\tnA"},
    ),
    "jaas and the same username and password in librdkafka's names": (
        {"sasl.jaas.config": jaas(), "sasl.username": "alice", "sasl.password": SECRET},
        {"sasl.username": "alice", "sasl.password": SECRET},
    ),
    "PEM trust store file": (
        {"ssl.truststore.location": "/etc/ca.pem", "ssl.truststore.type": "PEM"},
        {"ssl.ca.location": "/etc/ca.pem"},
    ),
    "PEM trust store inline, type in lower case": (
        {"ssl.truststore.certificates": "-----BEGIN...", "ssl.truststore.type": "pem"},
        {"ssl.ca.pem": "-----BEGIN..."},
    ),
    "PEM trust store and the same ssl.ca.location": (
        {
            "ssl.truststore.location": "/etc/ca.pem",
            "ssl.truststore.type": "PEM",
            "ssl.ca.location": "/etc/ca.pem",
        },
        {"ssl.ca.location": "/etc/ca.pem"},
    ),
    "a trust store type or password without a store": (
        {"ssl.truststore.type": "JKS", "ssl.truststore.password": SECRET},
        {},
    ),
    "PEM key store file": (
        {
            "ssl.keystore.location": "/etc/me.pem",
            "ssl.keystore.type": "PEM",
            "ssl.key.password": SECRET,
        },
        {
            "ssl.certificate.location": "/etc/me.pem",
            "ssl.key.location": "/etc/me.pem",
            "ssl.key.password": SECRET,
        },
    ),
    "PEM key store inline": (
        {
            "ssl.keystore.certificate.chain": "-----BEGIN CERT",
            "ssl.keystore.key": "-----BEGIN KEY",
            "ssl.keystore.type": "PEM",
        },
        {"ssl.certificate.pem": "-----BEGIN CERT", "ssl.key.pem": "-----BEGIN KEY"},
    ),
    "PKCS12 key store: librdkafka's own names": (
        {
            "ssl.keystore.location": "/etc/me.p12",
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.password": SECRET,
        },
        {"ssl.keystore.location": "/etc/me.p12", "ssl.keystore.password": SECRET},
    ),
    "host name check off": (
        {"ssl.endpoint.identification.algorithm": ""},
        {"ssl.endpoint.identification.algorithm": "none"},
    ),
    "host name check on": (
        {"ssl.endpoint.identification.algorithm": "HTTPS"},
        {"ssl.endpoint.identification.algorithm": "https"},
    ),
    "librdkafka's none": (
        {"ssl.endpoint.identification.algorithm": "none"},
        {"ssl.endpoint.identification.algorithm": "none"},
    ),
    "names both clients share": (
        {
            "security.protocol": "SASL_SSL",
            "client.id": "etl-7",
            "group.id": "etl",
            "request.timeout.ms": 20000,
        },
        {
            "security.protocol": "SASL_SSL",
            "client.id": "etl-7",
            "group.id": "etl",
            "request.timeout.ms": 20000,
        },
    ),
    "librdkafka's names": (
        {
            "sasl.mechanisms": "PLAIN",
            "sasl.username": "u",
            "sasl.password": SECRET,
            "ssl.ca.location": "/etc/ca.pem",
            "linger.ms": 5,
        },
        {
            "sasl.mechanisms": "PLAIN",
            "sasl.username": "u",
            "sasl.password": SECRET,
            "ssl.ca.location": "/etc/ca.pem",
            "linger.ms": 5,
        },
    ),
}


@pytest.mark.parametrize("case", TRANSLATIONS, ids=list(TRANSLATIONS))
def test_translates(case):
    given, expected = TRANSLATIONS[case]
    base = {"bootstrap.servers": "h:1"}
    assert librdkafka_config({**base, **given}) == {**base, **expected}


def test_a_spark_jobs_settings_in_full():
    spark_options = {
        "kafka.bootstrap.servers": "b1:9093,b2:9093",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": jaas(PLAIN, f'username="etl" password={QUOTED}'),
        "kafka.ssl.truststore.location": "/etc/kafka/ca.pem",
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.endpoint.identification.algorithm": "",
        "kafka.client.id": "etl",
    }
    settings = {k.removeprefix("kafka."): v for k, v in spark_options.items()}
    assert librdkafka_config(settings) == {
        "bootstrap.servers": "b1:9093,b2:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "etl",
        "sasl.password": SECRET,
        "ssl.ca.location": "/etc/kafka/ca.pem",
        "ssl.endpoint.identification.algorithm": "none",
        "client.id": "etl",
    }


# (settings, what the message says: the setting at fault, and what to give instead)
REFUSALS = {
    "JKS trust store (the default type)": (
        {"ssl.truststore.location": "/etc/ts.jks", "ssl.truststore.password": SECRET},
        ["'ssl.truststore.location'", "a JKS trust store", "ssl.truststore.type=PEM"],
    ),
    "PKCS12 trust store": (
        {"ssl.truststore.location": "/etc/ts.p12", "ssl.truststore.type": "PKCS12"},
        ["a PKCS12 trust store", "convert it to PEM", "ssl.ca.location"],
    ),
    "JKS key store": (
        {"ssl.keystore.location": "/etc/ks.jks", "ssl.keystore.password": SECRET},
        ["'ssl.keystore.location'", "a JKS key store", "ssl.certificate.location"],
    ),
    "inline key without type PEM": (
        {"ssl.keystore.key": SECRET},
        ["'ssl.keystore.key'", "ssl.keystore.type=PEM"],
    ),
    "OAUTHBEARER callback handler": (
        {
            "sasl.login.callback.handler.class": "org.apache.kafka.common.security."
            "oauthbearer.OAuthBearerLoginCallbackHandler"
        },
        ["'sasl.login.callback.handler.class'", "sasl.oauthbearer.method=oidc"],
    ),
    "OAUTHBEARER login module": (
        {
            "sasl.jaas.config": jaas(
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
                f'clientId="c" clientSecret={QUOTED}',
            )
        },
        ["OAuthBearerLoginModule", "sasl.oauthbearer.client.secret"],
    ),
    "Kerberos login module": (
        {
            "sasl.jaas.config": jaas(
                "com.sun.security.auth.module.Krb5LoginModule",
                'useKeyTab=true keyTab="/etc/k.keytab" principal="etl@REALM"',
            )
        },
        ["Krb5LoginModule", "sasl.kerberos.keytab"],
    ),
    "a shaded login module": (
        {"sasl.jaas.config": jaas("kafkashaded." + PLAIN)},
        ["is not Apache Kafka's", repr(PLAIN)],
    ),
    "an unknown login module": (
        {"sasl.jaas.config": jaas("com.example.TokenLoginModule")},
        ["'com.example.TokenLoginModule' cannot run in librdkafka"],
    ),
    "a delegation token": (
        {"sasl.jaas.config": jaas(options=f'username="tok" password={QUOTED} tokenauth=true')},
        ["tokenauth=true", "delegation token"],
    ),
    "jaas without a password": (
        {"sasl.jaas.config": jaas(options='username="alice"')},
        ["no 'password' option"],
    ),
    "jaas not ended": (
        {"sasl.jaas.config": f'{PLAIN} required username="alice" password={QUOTED}'},
        ["not ended by ';'"],
    ),
    "jaas value with '/' unquoted (a comment to Java)": (
        {"sasl.jaas.config": f"{PLAIN} required username=alice password=ab/{SECRET};"},
        ["not ended by ';'"],
    ),
    "jaas value starting with a digit unquoted": (
        {"sasl.jaas.config": f"{PLAIN} required username=alice password=123{SECRET};"},
        ["option 'password' has no value", "must be quoted"],
    ),
    "jaas with the password's name left out": (
        {"sasl.jaas.config": f"{PLAIN} required username=alice {SECRET[:6]}WORD;"},
        ["option 2 (by position) has no value"],
    ),
    "jaas with a quoted secret where an option name goes": (
        {"sasl.jaas.config": f"{PLAIN} required username=alice {QUOTED};"},
        ["option 2 (by position) has no value"],
    ),
    "jaas with a secret where the class goes": (
        {"sasl.jaas.config": f"{QUOTED} required;"},
        ["the login module (its first word is not a login module's class) cannot run"],
    ),
    "jaas with two login modules": (
        {"sasl.jaas.config": jaas() + " " + jaas()},
        ["exactly one login module, has 2"],
    ),
    "jaas without a flag": (
        {"sasl.jaas.config": f"{PLAIN} maybe username=alice;"},
        ["control flag must be one of required"],
    ),
    "jaas and a different password": (
        {"sasl.jaas.config": jaas(), "sasl.password": SECRET + "2"},
        ["'sasl.jaas.config' and 'sasl.password' disagree"],
    ),
    "jaas and a different user": (
        {"sasl.jaas.config": jaas(), "sasl.username": "bob"},
        ["'sasl.jaas.config' and 'sasl.username' disagree"],
    ),
    "trust store and a different ssl.ca.location": (
        {
            "ssl.truststore.location": "/a.pem",
            "ssl.truststore.type": "PEM",
            "ssl.ca.location": "/b.pem",
        },
        ["'ssl.truststore.location' and 'ssl.ca.location' disagree"],
    ),
    "two mechanisms": (
        {"sasl.mechanism": "PLAIN", "sasl.mechanisms": "SCRAM-SHA-256"},
        ["'sasl.mechanism' and 'sasl.mechanisms' disagree"],
    ),
    "host name check by ldaps": (
        {"ssl.endpoint.identification.algorithm": "ldaps"},
        ["'ssl.endpoint.identification.algorithm'", "'' (off) or 'https'"],
    ),
    "any Java class": (
        {"interceptor.classes": "com.example.Audit"},
        ["'interceptor.classes'", "names Java classes"],
    ),
    **{
        f"Java-only {name}": ({name: "x"}, [repr(name), REFUSED[name][:40]])
        for name in ("ssl.enabled.protocols", "ssl.protocol", "sasl.client.callback.handler.class")
    },
}


@pytest.mark.parametrize("case", REFUSALS, ids=list(REFUSALS))
def test_refuses_naming_the_setting_and_what_to_give(case):
    given, says = REFUSALS[case]
    with pytest.raises(ShuffleOptionError) as failure:
        librdkafka_config({"bootstrap.servers": "h:1", **given})
    message = str(failure.value)
    for part in says:
        assert part in message, message
    assert SECRET not in message and SECRET[:6] not in message
    # The refusal comes when the client is made, before anything is read.
    with pytest.raises(ShuffleOptionError):
        KafkaClient({"bootstrap.servers": "h:1", **given})


# Cases read with kafka-clients' own JAAS parser (JaasContext.loadClientContext): what it
# read, or None where it refused.
JAVA_READS = {
    f'{PLAIN} required username="alice" password="p\\"w\\\\x";': {
        "username": "alice",
        "password": 'p"w\\x',
    },
    f"{PLAIN} required username=alice password=abc.def-1;": {
        "username": "alice",
        "password": "abc.def-1",
    },
    f"{PLAIN} REQUIRED username='al ice' password='x\"y';": {
        "username": "al ice",
        "password": 'x"y',
    },
    f'{PLAIN} required username="a" password="";': {"username": "a", "password": ""},
    f"{PLAIN} required username=alice password=123abc;": None,
    f'{PLAIN} required username="a" password="b"': None,
    f'{PLAIN} required username="a" password=a/b;': None,
    f'{PLAIN} required username="a" password=b@c;': None,
    f'{PLAIN} required username="a" password="b"; x required;': None,
    f'{PLAIN} maybe username="a";': None,
}


@pytest.mark.parametrize("text", JAVA_READS)
def test_jaas_is_read_as_the_java_client_reads_it(text):
    expected = JAVA_READS[text]
    if expected is None:
        with pytest.raises(ShuffleOptionError):
            parse_jaas(text)
    else:
        login = parse_jaas(text)
        assert (login.module, login.flag, login.options) == (PLAIN, "required", expected)
        if expected["password"]:
            assert expected["password"] not in repr(login)


def test_redact_hides_every_secret_including_the_one_in_jaas():
    settings = {"sasl.jaas.config": jaas(), "ssl.key.password": "k3y-pass"}
    text = f"could not use {SECRET} nor k3y-pass nor {settings['sasl.jaas.config']}"
    hidden = redact(text, settings)
    assert SECRET not in hidden and "k3y-pass" not in hidden and "***" in hidden
    assert "alice" in redact("user alice", settings)


def test_the_client_keeps_settings_as_given_and_gives_librdkafka_its_names():
    given = {
        "bootstrap.servers": "h:1",
        "sasl.jaas.config": jaas(),
        "ssl.truststore.location": "/ca.pem",
        "ssl.truststore.type": "PEM",
        "ssl.endpoint.identification.algorithm": "",
    }
    client = KafkaClient(given)
    # The JVM path gets these, in the Java client's names.
    assert {k: client.settings[k] for k in given} == given
    conf = client.config(**{"linger.ms": 5})
    assert conf["sasl.username"] == "alice" and conf["sasl.password"] == SECRET
    assert conf["ssl.ca.location"] == "/ca.pem" and conf["linger.ms"] == 5
    assert conf["ssl.endpoint.identification.algorithm"] == "none"
    assert not {"sasl.jaas.config", "ssl.truststore.location", "ssl.truststore.type"} & set(conf)
    again = pickle.loads(pickle.dumps(client))
    assert again == client and again.config() == client.config()
    assert SECRET not in repr(client)


class Recorded:
    """Stands in for a librdkafka client class: keeps the config it was made with."""

    def __init__(self, conf):
        self.conf = conf


def test_group_id_is_the_consumers_and_not_the_producers(monkeypatch):
    from orchestration.shuffle.kafka import client as module

    monkeypatch.setattr(module, "Consumer", Recorded)
    monkeypatch.setattr(module, "Producer", Recorded)
    monkeypatch.setattr(module, "AdminClient", Recorded)
    kafka = KafkaClient({"bootstrap.servers": "h:1", "group.id": "etl", "client.id": "etl-7"})
    assert kafka.consumer().conf["group.id"] == "etl"
    assert kafka.consumer(**{"group.id": "other"}).conf["group.id"] == "other"
    assert KafkaClient({"bootstrap.servers": "h:1"}).consumer().conf["group.id"] == READER_GROUP
    for made in (kafka.producer(), kafka.admin()):
        assert "group.id" not in made.conf and made.conf["client.id"] == "etl-7"


def test_librdkafka_knows_every_name_said_to_be_the_same_or_made():
    made = {
        name
        for _, expected in TRANSLATIONS.values()
        for name in expected
        if name not in ("sasl.mechanisms", "linger.ms")
    }
    for name in sorted(made | set(SAME_NAMES)):
        # A value librdkafka finds invalid is fine here: only an unknown name is refused,
        # and client creation stops at the first problem, so each name goes alone.
        try:
            with KafkaClient({"bootstrap.servers": "127.0.0.1:1", name: "1"}).consumer():
                pass
        except ShuffleOptionError as exc:
            assert "No such configuration property" not in str(exc), name


def test_a_name_librdkafka_does_not_know_is_an_option_error_without_secrets():
    kafka = KafkaClient(
        {"bootstrap.servers": "h:1", "fetch.max.wait.ms": "5", "sasl.password": SECRET}
    )
    with pytest.raises(ShuffleOptionError, match="fetch.max.wait.ms") as failure:
        kafka.consumer()
    assert "Java client setting" in str(failure.value)
    assert SECRET not in str(failure.value)


def test_the_security_guide_states_the_names_table():
    text = (ROOT / "docs" / "guides" / "security.md").read_text()
    stated = re.search(r"<!-- kafka-names:start -->\n(.*?)\n<!-- kafka-names:end -->", text, re.S)
    assert stated is not None, "docs/guides/security.md has no <!-- kafka-names:start/end --> table"
    assert stated.group(1).splitlines() == names_table()


def test_kafka_resource_takes_a_jaas_line_and_never_shows_it():
    from orchestration import KafkaResource

    resource = KafkaResource(
        bootstrap_servers="h:1",
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_jaas_config=jaas(),
        extra={"ssl.truststore.location": "/ca.pem", "ssl.truststore.type": "PEM"},
    )
    assert SECRET not in repr(resource)
    assert resource.config()["sasl.jaas.config"] == jaas()
    conf = resource.client().config()
    assert conf["sasl.password"] == SECRET and conf["ssl.ca.location"] == "/ca.pem"


def test_the_jvm_path_gets_the_java_names_as_given(tmp_path, monkeypatch):
    from orchestration.shuffle import jvm_spark_conf
    from orchestration.shuffle.spark import jvm

    # Only the Kafka settings matter here, not where the jars are.
    monkeypatch.setattr(jvm, "jvm_jars", lambda: [str(tmp_path / "a.jar")])
    given = {
        "bootstrap.servers": "h:1",
        "sasl.jaas.config": jaas(),
        "ssl.truststore.location": "/ca.pem",
        "ssl.truststore.type": "PEM",
        "ssl.endpoint.identification.algorithm": "",
        "client.id": "etl-7",
    }
    conf = jvm_spark_conf(kafka=given, catalog="shuffles")
    catalog = {
        k.removeprefix("spark.sql.catalog.shuffles.kafka."): v
        for k, v in conf.items()
        if k.startswith("spark.sql.catalog.shuffles.kafka.")
    }
    assert {k: catalog[k] for k in given} == given
    assert not {"sasl.username", "sasl.password", "ssl.ca.location"} & set(catalog)
