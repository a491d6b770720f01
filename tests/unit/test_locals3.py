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


def test_minio_is_built_only_at_its_pinned_version_and_without_go_the_error_says_so(
    tmp_path, monkeypatch
):
    """The build is skipped only for a binary stamped with the pinned version; one of
    another version is built again, and with no Go on the path the server's own error
    names Go and the module."""
    from devstack import minio

    monkeypatch.setattr(minio, "go_dir", lambda: tmp_path / "go")
    minio.binary().parent.mkdir(parents=True)
    minio.binary().write_text("")
    stamp = minio.binary().with_name("minio.version")
    stamp.write_text(minio.MINIO_VERSION)
    assert minio.built() and locals3.ensure_server() == minio.binary()
    stamp.write_text("v0.0.0-older")
    assert not minio.built()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(locals3.LocalS3Error, match=r"Go \('go'\) is needed.*minio/minio@"):
        locals3.ensure_server()
