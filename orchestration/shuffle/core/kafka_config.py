"""Kafka settings in the Java client's names, as a Spark ``format("kafka")`` job has them
(``kafka.sasl.jaas.config``, ``kafka.ssl.truststore.location``, ...), made into librdkafka
settings for the Python path's client. Pure Python.

The JVM path hands the settings to the Java client as they were given, so a user's settings
work on both paths unchanged. The Python path's client is librdkafka, which knows most names
the Java client knows but spells security differently and runs no Java code.
:func:`librdkafka_config` translates what has a librdkafka equivalent and refuses, naming
the setting and what to give instead, what has none. librdkafka's own names pass unchanged,
and so does every name not mentioned here (librdkafka refuses those it does not know when a
client is made). No error message holds a setting's value.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestration.shuffle.errors import ShuffleOptionError

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTHBEARER_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
KERBEROS_MODULE = "com.sun.security.auth.module.Krb5LoginModule"

# Settings whose values are secrets, in either client's names: they are never shown.
SECRET_SETTINGS = (
    "sasl.password",
    "sasl.jaas.config",
    "sasl.oauthbearer.client.secret",
    "ssl.key.password",
    "ssl.key.pem",
    "ssl.keystore.password",
    "ssl.keystore.key",
    "ssl.truststore.password",
)

# librdkafka warns on every producer and admin client given these (they are a consumer's).
CONSUMER_ONLY = ("group.id", "group.instance.id")

OIDC_INSTEAD = (
    "for OAUTHBEARER with OIDC give librdkafka's sasl.oauthbearer.method=oidc, "
    "sasl.oauthbearer.client.id, sasl.oauthbearer.client.secret and "
    "sasl.oauthbearer.token.endpoint.url instead"
)
JSSE_INSTEAD = (
    "librdkafka, the Python path's Kafka client, negotiates TLS through OpenSSL and has no "
    "such setting; remove it (ssl.cipher.suites, with OpenSSL's cipher names, narrows the "
    "ciphers)"
)

# Java-only settings librdkafka has no equivalent of, and what to do instead.
REFUSED: dict[str, str] = {
    "sasl.login.callback.handler.class": (
        "a Java login callback handler (OAUTHBEARER's OAuthBearerLoginCallbackHandler, for "
        "one) cannot run in librdkafka, the Python path's Kafka client; " + OIDC_INSTEAD
    ),
    "sasl.client.callback.handler.class": (
        "a Java callback handler cannot run in librdkafka, the Python path's Kafka client; "
        "give the credentials in sasl.jaas.config (PlainLoginModule, ScramLoginModule) or as "
        "sasl.username and sasl.password"
    ),
    "sasl.login.class": (
        "a Java login class cannot run in librdkafka, the Python path's Kafka client; give "
        "the credentials in sasl.jaas.config (PlainLoginModule, ScramLoginModule) or as "
        "sasl.username and sasl.password"
    ),
    "ssl.protocol": JSSE_INSTEAD,
    "ssl.enabled.protocols": JSSE_INSTEAD,
    "ssl.provider": JSSE_INSTEAD,
    "ssl.keymanager.algorithm": JSSE_INSTEAD,
    "ssl.trustmanager.algorithm": JSSE_INSTEAD,
    "ssl.secure.random.implementation": JSSE_INSTEAD,
}

# What each translated Java setting becomes (the security guide's table is made from these rows).
TRANSLATED: tuple[tuple[str, str, str], ...] = (
    (
        "sasl.jaas.config",
        f"`{PLAIN_MODULE.rsplit('.', 1)[1]}` or `{SCRAM_MODULE.rsplit('.', 1)[1]}`, "
        "`required`, `username`, `password`",
        "`sasl.username`, `sasl.password`",
    ),
    ("ssl.truststore.location", "with `ssl.truststore.type=PEM`", "`ssl.ca.location`"),
    ("ssl.truststore.certificates", "with `ssl.truststore.type=PEM`", "`ssl.ca.pem`"),
    (
        "ssl.keystore.location",
        "with `ssl.keystore.type=PEM` (key and certificates in one file)",
        "`ssl.certificate.location` and `ssl.key.location`",
    ),
    (
        "ssl.keystore.location",
        "with `ssl.keystore.type=PKCS12`",
        "itself, with `ssl.keystore.password` (librdkafka reads PKCS#12 key stores)",
    ),
    ("ssl.keystore.certificate.chain", "with `ssl.keystore.type=PEM`", "`ssl.certificate.pem`"),
    ("ssl.keystore.key", "with `ssl.keystore.type=PEM`", "`ssl.key.pem`"),
    ("ssl.endpoint.identification.algorithm", "`''` (off) or `https`", "`none` or `https`"),
    (
        "ssl.truststore.type, ssl.keystore.type",
        "`PEM` (`PKCS12` for a key store)",
        "nothing: they say how to read the settings above",
    ),
)

# Names both clients spell the same that a Spark job commonly has (the security guide lists them).
SAME_NAMES = (
    "bootstrap.servers",
    "security.protocol",
    "sasl.mechanism",
    "client.id",
    "group.id",
    "ssl.key.password",
    "ssl.cipher.suites",
    "sasl.oauthbearer.token.endpoint.url",
    "request.timeout.ms",
    "session.timeout.ms",
    "socket.connection.setup.timeout.ms",
)


def librdkafka_config(settings: Mapping[str, Any]) -> dict[str, Any]:
    """librdkafka settings for ``settings`` in either client's names (or a mix).

    Java names with a librdkafka equivalent are translated (see :data:`TRANSLATED`), names
    the two share and librdkafka's own pass unchanged, and Java-only settings librdkafka
    cannot use are refused. Two settings that say the same thing differently (a
    ``sasl.jaas.config`` and a ``sasl.password`` that disagree) are refused too.

    Example::

        librdkafka_config({
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule '
                                'required username="alice" password="s3cret";',
            "ssl.truststore.location": "/etc/kafka/ca.pem",
            "ssl.truststore.type": "PEM",
        })
        # {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        #  "sasl.username": "alice", "sasl.password": "s3cret",
        #  "ssl.ca.location": "/etc/kafka/ca.pem"}

    Raises:
        ShuffleOptionError: a Java-only setting, a trust or key store librdkafka cannot
            read, a ``sasl.jaas.config`` it cannot use, or settings that disagree. The
            message names the settings and what to give instead, never a value.
    """
    given = {str(k): v for k, v in settings.items()}
    for name in given:
        _refuse_java_only(name)
    out = dict(given)
    _translate_jaas(given, out)
    _translate_truststore(given, out)
    _translate_keystore(given, out)
    _translate_endpoint_check(given, out)
    _check_same(given, "sasl.mechanism", "sasl.mechanisms")
    return out


def _refuse_java_only(name: str) -> None:
    if name in REFUSED:
        raise _error(name, REFUSED[name])
    if name.endswith((".class", ".classes")):
        raise _error(
            name,
            "names Java classes, which librdkafka, the Python path's Kafka client, cannot "
            "load; remove it",
        )


def _error(name: str, why: str) -> ShuffleOptionError:
    return ShuffleOptionError(f"kafka setting {name!r}: {why}")


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _put(given: dict[str, Any], out: dict[str, Any], source: str, name: str, value: str) -> None:
    """Sets ``name`` from the Java setting ``source``, refusing a different value given for
    ``name`` itself."""
    if name in given and _text(given[name]) != value:
        raise ShuffleOptionError(
            f"kafka settings {source!r} and {name!r} disagree: give one of them"
        )
    out[name] = value


def _check_same(given: dict[str, Any], a: str, b: str) -> None:
    if a in given and b in given and _text(given[a]) != _text(given[b]):
        raise ShuffleOptionError(f"kafka settings {a!r} and {b!r} disagree: give one of them")


def _translate_jaas(given: dict[str, Any], out: dict[str, Any]) -> None:
    name = "sasl.jaas.config"
    if name not in given:
        return
    login = parse_jaas(_text(given[name]))
    out.pop(name)
    if login.module not in (PLAIN_MODULE, SCRAM_MODULE):
        raise _error(name, _unusable_module(login.module))
    if login.options.get("tokenauth", "").lower() == "true":
        raise _error(
            name,
            "ScramLoginModule with tokenauth=true logs in with a delegation token, which "
            "librdkafka, the Python path's Kafka client, cannot do; give a user's SCRAM "
            "credentials instead",
        )
    for option in ("username", "password"):
        if option not in login.options:
            raise _error(name, f"the login module has no {option!r} option")
    _put(given, out, name, "sasl.username", login.options["username"])
    _put(given, out, name, "sasl.password", login.options["password"])


def _unusable_module(module: str) -> str:
    shown = _shown_module(module)
    short = module.rsplit(".", 1)[-1]
    apache = {m.rsplit(".", 1)[1]: m for m in (PLAIN_MODULE, SCRAM_MODULE)}
    if short in apache:
        return (
            f"{shown} is not Apache Kafka's; use {apache[short]!r} (a shaded copy names a "
            "class that only its own platform has)"
        )
    if module == OAUTHBEARER_MODULE:
        return f"{short} needs a Java login callback handler; {OIDC_INSTEAD}"
    if module == KERBEROS_MODULE:
        return (
            f"{short} is Java's Kerberos login; give librdkafka's sasl.kerberos.principal "
            "and sasl.kerberos.keytab instead (librdkafka needs a build with GSSAPI)"
        )
    return (
        f"{shown} cannot run in librdkafka, the Python path's Kafka client, "
        f"which reads credentials from {PLAIN_MODULE.rsplit('.', 1)[1]} and "
        f"{SCRAM_MODULE.rsplit('.', 1)[1]} only"
    )


def _store_type(given: dict[str, Any], which: str) -> str:
    # The Java client's default store type is JKS, whatever the file's name says.
    return _text(given.get(f"ssl.{which}.type") or "JKS").upper()


def _translate_truststore(given: dict[str, Any], out: dict[str, Any]) -> None:
    sources = {
        "ssl.truststore.location": "ssl.ca.location",
        "ssl.truststore.certificates": "ssl.ca.pem",
    }
    for name in (*sources, "ssl.truststore.type", "ssl.truststore.password"):
        # The password too: librdkafka reads PEM without one, and Java ignores one for a
        # store it does not read.
        out.pop(name, None)
    present = [n for n in sources if _text(given.get(n))]
    if not present:
        return
    kind = _store_type(given, "truststore")
    if kind != "PEM":
        raise _error(
            present[0],
            f"a {kind} trust store (ssl.truststore.type, JKS when not given) cannot be read "
            "by librdkafka, the Python path's Kafka client: convert it to PEM and set "
            "ssl.truststore.type=PEM, or give ssl.ca.location (a PEM file of the CA "
            "certificates)",
        )
    for name in present:
        _put(given, out, name, sources[name], _text(given[name]))


def _translate_keystore(given: dict[str, Any], out: dict[str, Any]) -> None:
    location = "ssl.keystore.location"
    pem_only = {
        "ssl.keystore.certificate.chain": "ssl.certificate.pem",
        "ssl.keystore.key": "ssl.key.pem",
    }
    out.pop("ssl.keystore.type", None)
    present = [n for n in (location, *pem_only) if _text(given.get(n))]
    for name in (location, *pem_only):
        if name not in present:
            out.pop(name, None)
    if not present:
        return
    kind = _store_type(given, "keystore")
    if kind == "PKCS12" and present == [location]:
        return  # librdkafka reads a PKCS#12 key store by the same names
    if kind != "PEM" and present[0] in pem_only:
        raise _error(present[0], "needs ssl.keystore.type=PEM, as in the Java client")
    if kind != "PEM":
        raise _error(
            location,
            f"a {kind} key store (ssl.keystore.type, JKS when not given) cannot be read by "
            "librdkafka, the Python path's Kafka client: convert it to PEM or PKCS12 and set "
            "ssl.keystore.type to match, or give ssl.certificate.location and "
            "ssl.key.location",
        )
    # A PEM key store has no store password, only the key's (ssl.key.password, same name).
    out.pop("ssl.keystore.password", None)
    for name in present:
        value = _text(out.pop(name))
        if name == location:
            # One file holds the key and its certificates; librdkafka reads each from it.
            _put(given, out, name, "ssl.certificate.location", value)
            _put(given, out, name, "ssl.key.location", value)
        else:
            _put(given, out, name, pem_only[name], value)


def _translate_endpoint_check(given: dict[str, Any], out: dict[str, Any]) -> None:
    name = "ssl.endpoint.identification.algorithm"
    if name not in given:
        return
    value = _text(given[name]).strip().lower()
    # Java's empty string turns the host name check off; librdkafka says "none".
    if value in ("", "none"):
        out[name] = "none"
    elif value == "https":
        out[name] = "https"
    else:
        raise _error(
            name, f"must be '' (off) or 'https' (librdkafka: 'none' or 'https'), got {value!r}"
        )


def redact(text: str, settings: Mapping[str, Any]) -> str:
    """``text`` with the value of every secret setting in ``settings`` replaced by ``***``,
    including the password inside a ``sasl.jaas.config``."""
    secrets = [_text(settings.get(n)) for n in SECRET_SETTINGS]
    jaas = settings.get("sasl.jaas.config")
    if jaas:
        try:
            secrets += [v for k, v in parse_jaas(_text(jaas)).options.items() if k != "username"]
        except ShuffleOptionError:
            pass  # the whole setting is redacted already
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


# -- sasl.jaas.config ---------------------------------------------------------------------


@dataclass(frozen=True)
class JaasLogin:
    """One login module of a ``sasl.jaas.config``: its class, control flag and options
    (which hold the password: never shown)."""

    module: str
    flag: str
    options: dict[str, str] = field(repr=False)


_FLAGS = ("required", "requisite", "sufficient", "optional")
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


def parse_jaas(text: str) -> JaasLogin:
    """The one login module of a ``sasl.jaas.config`` value, read as the Java client reads
    it: ``<class> <flag> [key=value ...];`` where a value is a word (letters, digits and
    ``._-$``) or a string in double or single quotes with backslash escapes, and ``//`` or
    ``/* */`` start comments.

    Example::

        parse_jaas('org.apache.kafka.common.security.plain.PlainLoginModule required '
                   'username="alice" password="p\\\\"w";').options["password"]   # 'p"w'

    Raises:
        ShuffleOptionError: the value is not one login module in that form; the message
            says where, never what the value holds.
    """
    tokens = list(_jaas_tokens(text))
    entries: list[JaasLogin] = []
    i = 0

    def fail(why: str) -> ShuffleOptionError:
        return _error("sasl.jaas.config", why)

    while i < len(tokens):
        kind, module = tokens[i]
        if kind not in ("word", "quoted"):
            raise fail("expected a login module's class name")
        shown = _shown_module(module)
        if i + 1 >= len(tokens) or tokens[i + 1][0] not in ("word", "quoted"):
            raise fail(f"{shown} has no control flag ({', '.join(_FLAGS)})")
        flag = tokens[i + 1][1]
        if flag.lower() not in _FLAGS:
            raise fail(f"{shown}: control flag must be one of {', '.join(_FLAGS)}")
        i += 2
        options: dict[str, str] = {}
        while i < len(tokens) and tokens[i][0] != ";":
            kind, key = tokens[i]
            if kind not in ("word", "quoted"):
                raise fail(f"{shown}: expected an option name")
            if (
                i + 2 >= len(tokens)
                or tokens[i + 1][0] != "="
                or tokens[i + 2][0] not in ("word", "quoted")
            ):
                raise fail(
                    f"{_shown_option(key, len(options))} has no value (a value that is not a "
                    "plain word must be quoted)"
                )
            options[key] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise fail(f"{shown} is not ended by ';'")
        i += 1
        entries.append(JaasLogin(module, flag.lower(), options))
    if len(entries) != 1:
        raise fail(f"must hold exactly one login module, has {len(entries)}")
    return entries[0]


def _shown_module(module: str) -> str:
    """How an error names a login module: by its class when the text read as one is one.
    A malformed line can put any of its words where the class goes, the password too."""
    if module.endswith("LoginModule") and all(part.isidentifier() for part in module.split(".")):
        return f"login module {module!r}"
    return "the login module (its first word is not a login module's class)"


# Option names errors may show: what a JAAS line of a Kafka client holds. Another word in
# an option's place may be a secret that lost its "password=".
_OPTION_NAMES = {
    "username",
    "password",
    "tokenauth",
    "clientId",
    "clientSecret",
    "scope",
    "useKeyTab",
    "keyTab",
    "principal",
    "storeKey",
    "serviceName",
    "useTicketCache",
}


def _shown_option(key: str, before: int) -> str:
    return f"option {key!r}" if key in _OPTION_NAMES else f"option {before + 1} (by position)"


def _is_word_start(c: str) -> bool:
    return c.isascii() and (c.isalpha() or c in "-_${}") or ord(c) >= 160


def _is_word_part(c: str) -> bool:
    return _is_word_start(c) or c in "0123456789."


def _jaas_tokens(text: str) -> Iterator[tuple[str, str]]:
    """(kind, text) tokens: ``word``, ``quoted``, ``number`` and single characters."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if ord(c) <= 32:
            i += 1
        elif c == "/":
            # Java's tokenizer treats '/' as the start of a comment, '/*' up to '*/', any
            # other to the end of the line: a value with '/' in it must be quoted.
            if text.startswith("/*", i):
                end = text.find("*/", i + 2)
                i = n if end < 0 else end + 2
            else:
                while i < n and text[i] not in "\r\n":
                    i += 1
        elif c in "\"'":
            value, i = _quoted(text, i)
            yield "quoted", value
        elif _is_word_start(c):
            start = i
            while i < n and _is_word_part(text[i]):
                i += 1
            yield "word", text[start:i]
        elif c in "0123456789.":
            # Java reads these as a number, which is neither a name nor a value.
            while i < n and text[i] in "0123456789.":
                i += 1
            yield "number", ""
        else:
            yield c, c
            i += 1


def _quoted(text: str, i: int) -> tuple[str, int]:
    """The string that starts with the quote at ``i``, and where it ends. As in Java's
    tokenizer, a line break ends it too, and ``\\`` escapes as in Java source."""
    quote, i, n = text[i], i + 1, len(text)
    out = []
    while i < n and text[i] != quote and text[i] not in "\r\n":
        c = text[i]
        i += 1
        if c != "\\" or i >= n:
            out.append(c)
            continue
        c = text[i]
        i += 1
        if c in "01234567":
            digits = c
            longest = 3 if c <= "3" else 2
            while len(digits) < longest and i < n and text[i] in "01234567":
                digits += text[i]
                i += 1
            out.append(chr(int(digits, 8)))
        else:
            out.append(_ESCAPES.get(c, c))
    if i < n and text[i] == quote:
        i += 1
    return "".join(out), i


# -- the security guide's table -----------------------------------------------------------


def names_table() -> list[str]:
    """The security guide's table of Spark's ``kafka.*`` names and what the Python path makes of
    them, as markdown lines."""
    rows = [
        "| Spark option (`kafka.` + ...) | given as | on the Python path (librdkafka) |",
        "|---|---|---|",
    ]
    for java, given, becomes in TRANSLATED:
        names = ", ".join(f"`{n}`" for n in java.split(", "))
        rows.append(f"| {names} | {given} | {becomes} |")
    same = ", ".join(f"`{n}`" for n in SAME_NAMES)
    rows.append(f"| {same} | as in Spark | the same name and value |")
    rows.append(
        "| `ssl.truststore.location` with type `JKS` or `PKCS12` (JKS when no type is given), "
        "a JKS key store | | refused: convert to PEM and set the type, or give "
        "`ssl.ca.location` (key store: `ssl.certificate.location`, `ssl.key.location`) |"
    )
    rows.append(
        "| `sasl.jaas.config` with `OAuthBearerLoginModule`, `Krb5LoginModule`, another "
        "module or `tokenauth=true` | | refused, saying what to give instead (OIDC: "
        "`sasl.oauthbearer.method=oidc` and its settings; Kerberos: "
        "`sasl.kerberos.principal`, `sasl.kerberos.keytab`) |"
    )
    refused = ", ".join(f"`{n}`" for n in REFUSED)
    rows.append(f"| {refused}, any `*.class` or `*.classes` | | refused: Java-only |")
    return rows
