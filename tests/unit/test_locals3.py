import socket

import pytest

from devstack import locals3


def test_a_port_held_by_another_process_is_refused_by_name(monkeypatch):
    """A server this checkout did not start (another checkout's, with its own credentials)
    is refused before anything is started, naming the port and the setting, instead of
    failing later as ACCESS_DENIED on the bucket."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        monkeypatch.setenv("SHUFFLE_LOCAL_S3_PORT", str(port))
        with pytest.raises(
            locals3.LocalS3Error, match=f"port {port} is taken.*SHUFFLE_LOCAL_S3_PORT"
        ):
            locals3.refuse_a_foreign_server()
    locals3.refuse_a_foreign_server()  # closed: nothing to refuse
