"""The one parser of string options (Spark data source options). Pure Python.

Spark hands a Python data source its options as strings, lower-cased keys included. Every
data source of the project parses them here, once, on the driver, against its option table
(:mod:`orchestration.shuffle.core.optiondefs`): an option the table does not declare is
refused, and defaults and bounds come from the table. Errors name the data source and the
option.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from orchestration.shuffle.core.optiondefs import (
    BOOLEAN,
    CHOICE,
    INTEGER,
    JSON_LIST,
    KAFKA_OPTION_PREFIX,
    MILLIS,
    PARALLELISM,
    OptionDef,
    OptionTable,
    table,
)
from orchestration.shuffle.errors import ShuffleOptionError

__all__ = ["KAFKA_OPTION_PREFIX", "Options", "kafka_to_options", "micros_to_millis_text"]

AUTO = "auto"
# Epoch milliseconds with up to three decimals (microseconds), as both read paths take them.
_MILLIS = re.compile(r"[ \t]*(-?)([0-9]+)(?:\.([0-9]{1,3}))?[ \t]*")
_INT64 = (-(2**63), 2**63 - 1)


class Options:
    """Typed access to a data source's string options, checked against its option table.

    Every option given must be declared in the table (``kafka.*`` ones are Kafka settings,
    not checked); with ``mode`` (``"batch"`` or ``"stream"``) each must also apply to that
    kind of read. Defaults and bounds come from the table.

    Example::

        opts = Options(self.options, "kafka-shuffle", mode="batch")
        topic = opts.require("topic")
        parallelism = opts.int_or_auto("parallelism")
    """

    def __init__(
        self, options: Mapping[str, str], source: OptionTable | str, mode: str | None = None
    ):
        self.table = source if isinstance(source, OptionTable) else table(source)
        self.owner = self.table.source
        self.mode = mode
        # Spark's option map is case-insensitive; so is this one.
        self._raw = {str(k).lower(): v for k, v in options.items()}
        self._names = {str(k).lower(): str(k) for k in options}
        self.table.check(self._names.values(), mode)

    def check_mode(self, mode: str) -> None:
        """Refuses options that do not apply to a read in ``mode``, once the kind of read is
        known (a data source learns it after it parsed its options for the schema)."""
        self.table.check(self._names.values(), mode)

    def given(self, name: str) -> bool:
        """Whether option ``name`` has a (non-empty) value."""
        return self.raw(name) is not None

    def raw(self, name: str) -> str | None:
        """The value as given, without a default (None: not given or empty)."""
        self.table.get(name)
        value = self._raw.get(name.lower())
        return None if value is None or value == "" else str(value)

    def _value(self, d: OptionDef) -> str | None:
        value = self._raw.get(d.name.lower())
        if value is None or value == "":
            return d.default_for(self.mode)
        return str(value)

    def _def(self, name: str, *types: str) -> OptionDef:
        d = self.table.get(name)
        if types and d.type not in types:
            raise TypeError(f"{self.owner}: option {name!r} is declared {d.type}, not {types}")
        return d

    def _error(self, name: str, what: str, value: Any) -> ShuffleOptionError:
        return ShuffleOptionError(f"{self.owner}: option {name!r} must be {what}, got {value!r}")

    def text(self, name: str) -> str | None:
        """The value, or the declared default (None if there is none)."""
        return self._value(self._def(name))

    def require(self, name: str) -> str:
        """The value; an error naming the option when it is not given."""
        value = self.text(name)
        if value is None:
            raise ShuffleOptionError(f"{self.owner}: option {name!r} is required")
        return value

    def choice(self, name: str) -> str:
        """One of the declared choices (case-insensitive), lower-cased."""
        d = self._def(name, CHOICE)
        value = (self._value(d) or "").strip().lower()
        if value not in d.choices:
            raise self._error(d.name, " or ".join(repr(c) for c in d.choices), value)
        return value

    def integer(self, name: str) -> int | None:
        """An integer at or above the declared minimum (0 when none is declared)."""
        d = self._def(name, INTEGER)
        value = self._value(d)
        if value is None:
            return None
        minimum = 0 if d.minimum is None else d.minimum
        try:
            parsed = int(value)
        except ValueError:
            raise self._error(d.name, "an integer", value) from None
        if parsed < minimum:
            raise self._error(d.name, f"an integer >= {minimum}", value)
        return parsed

    def require_integer(self, name: str) -> int:
        """:meth:`integer` of an option that has a default or must be given."""
        value = self.integer(name)
        if value is None:
            raise ShuffleOptionError(f"{self.owner}: option {name!r} is required")
        return value

    def int_or_auto(self, name: str) -> int | str | None:
        """``"auto"`` (any case) or a positive integer."""
        d = self._def(name, PARALLELISM)
        value = self._value(d)
        if value is None:
            return None
        if value.strip().lower() == AUTO:
            return AUTO
        try:
            parsed = int(value)
        except ValueError:
            raise self._error(d.name, "an integer", value) from None
        if parsed < 1:
            raise self._error(d.name, "an integer >= 1", value)
        return parsed

    def flag(self, name: str) -> bool:
        """``true`` or ``false`` (any case)."""
        d = self._def(name, BOOLEAN)
        value = (self._value(d) or "false").strip().lower()
        if value not in ("true", "false"):
            raise self._error(d.name, "'true' or 'false'", value)
        return value == "true"

    def json_list(self, name: str) -> list[str] | None:
        """A JSON list, its items as strings."""
        d = self._def(name, JSON_LIST)
        value = self._value(d)
        if value is None:
            return None
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        if not isinstance(parsed, list):
            raise self._error(d.name, "a JSON list of strings", value)
        return [str(v) for v in parsed]

    def millis_as_micros(self, name: str) -> int | None:
        """Epoch milliseconds (an integer, or up to three decimals), as epoch microseconds."""
        d = self._def(name, MILLIS)
        value = self._value(d)
        if value is None:
            return None
        m = _MILLIS.fullmatch(value)
        micros = None
        if m is not None:
            sign, whole, fraction = m.groups()
            micros = int(whole) * 1000 + int((fraction or "").ljust(3, "0"))
            micros = -micros if sign else micros
        if micros is None or not _INT64[0] <= micros <= _INT64[1]:
            raise self._error(
                d.name, "epoch milliseconds (an integer, or a decimal of up to 3 places)", value
            )
        return micros

    def kafka(self) -> dict[str, str]:
        """The ``kafka.*`` options as a librdkafka config dict; ``bootstrap.servers`` required."""
        conf = {
            self._names[k][len(KAFKA_OPTION_PREFIX) :]: v
            for k, v in self._raw.items()
            if k.startswith(KAFKA_OPTION_PREFIX)
        }
        if not conf.get("bootstrap.servers"):
            raise ShuffleOptionError(f"{self.owner}: option 'kafka.bootstrap.servers' is required")
        return conf


def micros_to_millis_text(micros: int) -> str:
    """Epoch microseconds as the epoch milliseconds an option takes: an integer when whole,
    else three decimals (exact either way)."""
    whole, part = divmod(abs(micros), 1000)
    sign = "-" if micros < 0 else ""
    return f"{sign}{whole}" if part == 0 else f"{sign}{whole}.{part:03d}"


def kafka_to_options(kafka: Mapping[str, Any]) -> dict[str, str]:
    """A librdkafka config dict as ``kafka.*`` data source options."""
    return {f"{KAFKA_OPTION_PREFIX}{k}": str(v) for k, v in kafka.items()}
