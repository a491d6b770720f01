"""Local Kafka stacks of the tests' own: their own folder and ports, apart from the broker
the other tests share (and from any cluster ``KAFKA_BOOTSTRAP_SERVERS`` names)."""

import contextlib
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_KEYS = (
    "SHUFFLE_LOCAL_KAFKA_NODES",
    "SHUFFLE_LOCAL_KAFKA_SECURITY",
    "SHUFFLE_LOCAL_KAFKA_DIR",
    "SHUFFLE_LOCAL_KAFKA_PORT",
    "KAFKA_BOOTSTRAP_SERVERS",
)


@contextlib.contextmanager
def own_stack(name: str, port: int, *, nodes: int = 1, security: str = "plaintext"):
    """While inside, ``devstack.localstack`` manages the stack ``.local/<name>``."""
    saved = {k: os.environ.get(k) for k in _KEYS}
    os.environ.update(
        SHUFFLE_LOCAL_KAFKA_NODES=str(nodes),
        SHUFFLE_LOCAL_KAFKA_SECURITY=security,
        SHUFFLE_LOCAL_KAFKA_DIR=str(ROOT / ".local" / name),
        SHUFFLE_LOCAL_KAFKA_PORT=str(port),
    )
    os.environ.pop("KAFKA_BOOTSTRAP_SERVERS", None)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# The SASL_SSL stack the security tests share (SCRAM users, TLS, ACLs enforced).
SASL_NAME, SASL_PORT = "test-kafka-sasl", 30092


def secure_stack():
    """``own_stack`` of the SASL_SSL stack: ``devstack.localstack`` manages it inside."""
    return own_stack(SASL_NAME, SASL_PORT, security="sasl_ssl")


@contextlib.contextmanager
def secure_users():
    """Starts the SASL_SSL stack and yields each SCRAM user's librdkafka settings (``admin``,
    a super user; ``producer``; ``consumer``); stops it after."""
    from devstack import localstack

    with secure_stack():
        localstack.start()
        confs = {u: localstack.client_config(u) for u in localstack.USERS}
    try:
        yield confs
    finally:
        with secure_stack():
            localstack.stop()
