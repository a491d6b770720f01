"""The one parser of string options (Spark data source options). Pure Python.

Spark hands a Python data source its options as strings, lower-cased keys included. Every
data source of the project parses them here, once, on the driver, with errors that name
the data source and the option.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal, overload

from orchestration.shuffle.errors import ShuffleOptionError

# Options that start with this prefix are passed to librdkafka without it.
KAFKA_OPTION_PREFIX = "kafka."


class Options:
    """Typed access to a data source's string options.

    Example::

        opts = Options(self.options, "kafka-shuffle")
        topic = opts.text("topic", required=True)
        parallelism = opts.integer("parallelism")
    """

    def __init__(self, options: Mapping[str, str], owner: str):
        # Spark's option map is case-insensitive; so is this one.
        self._raw = {str(k).lower(): v for k, v in options.items()}
        self._names = {str(k).lower(): str(k) for k, v in options.items()}
        self.owner = owner

    def _get(self, name: str) -> str | None:
        value = self._raw.get(name.lower())
        return None if value is None or value == "" else str(value)

    def _error(self, name: str, what: str, value: Any) -> ShuffleOptionError:
        return ShuffleOptionError(f"{self.owner}: option {name!r} must be {what}, got {value!r}")

    @overload
    def text(self, name: str, *, required: Literal[True]) -> str: ...
    @overload
    def text(self, name: str, *, required: bool = False, default: str) -> str: ...
    @overload
    def text(self, name: str, *, required: bool = False, default: None = None) -> str | None: ...
    def text(self, name: str, *, required: bool = False, default: str | None = None) -> str | None:
        value = self._get(name)
        if value is None:
            if required:
                raise ShuffleOptionError(f"{self.owner}: option {name!r} is required")
            return default
        return value

    def choice(self, name: str, choices: tuple[str, ...], default: str) -> str:
        value = (self._get(name) or default).strip().lower()
        if value not in choices:
            raise self._error(name, " or ".join(repr(c) for c in choices), value)
        return value

    @overload
    def integer(self, name: str, *, required: Literal[True], minimum: int = 0) -> int: ...
    @overload
    def integer(
        self, name: str, *, required: bool = False, default: int, minimum: int = 0
    ) -> int: ...
    @overload
    def integer(
        self, name: str, *, required: bool = False, default: None = None, minimum: int = 0
    ) -> int | None: ...
    def integer(
        self, name: str, *, required: bool = False, default: int | None = None, minimum: int = 0
    ) -> int | None:
        value = self._get(name)
        if value is None:
            if required:
                raise ShuffleOptionError(f"{self.owner}: option {name!r} is required")
            return default
        try:
            parsed = int(value)
        except ValueError:
            raise self._error(name, "an integer", value) from None
        if parsed < minimum:
            raise self._error(name, f"an integer >= {minimum}", value)
        return parsed

    def flag(self, name: str, default: bool = False) -> bool:
        return self.choice(name, ("true", "false"), str(default).lower()) == "true"

    def json_list(self, name: str) -> list[str] | None:
        value = self._get(name)
        if value is None:
            return None
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        if not isinstance(parsed, list):
            raise self._error(name, "a JSON list of strings", value)
        return [str(v) for v in parsed]

    def offsets(self, name: str, default: str) -> str | dict[int, int]:
        """``earliest``, ``latest`` or a JSON object ``{"partition": offset}``."""
        value = self._get(name) or default
        if value in ("earliest", "latest"):
            return value
        try:
            parsed = json.loads(value)
            return {int(k): int(v) for k, v in parsed.items()}
        except (ValueError, AttributeError, TypeError):
            raise self._error(
                name, "'earliest', 'latest' or a JSON object {\"partition\": offset}", value
            ) from None

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


def kafka_to_options(kafka: Mapping[str, Any]) -> dict[str, str]:
    """A librdkafka config dict as ``kafka.*`` data source options."""
    return {f"{KAFKA_OPTION_PREFIX}{k}": str(v) for k, v in kafka.items()}
