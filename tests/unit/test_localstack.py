import base64

from devstack import localstack


def test_cluster_ids_never_start_with_a_dash_and_hold_16_bytes():
    # One id in 64 would begin with "-" if drawn blindly; 5,000 draws make a miss
    # practically certain, so this fails if the redraw rule is lost.
    ids = {localstack.new_cluster_id() for _ in range(5000)}
    assert len(ids) == 5000
    for cid in ids:
        assert not cid.startswith("-"), cid
        assert len(cid) == 22
        assert len(base64.urlsafe_b64decode(cid + "==")) == 16


def test_three_nodes_get_their_own_ports_folders_and_a_shared_quorum(tmp_path, monkeypatch):
    monkeypatch.setenv("SHUFFLE_LOCAL_KAFKA_NODES", "3")
    monkeypatch.setenv("SHUFFLE_LOCAL_KAFKA_DIR", str(tmp_path))
    monkeypatch.delenv("SHUFFLE_LOCAL_KAFKA_PORT", raising=False)
    monkeypatch.delenv("SHUFFLE_LOCAL_KAFKA_SECURITY", raising=False)
    local = localstack.local_stack()
    nodes = local.all_nodes
    assert [(n.index, n.port, n.controller_port) for n in nodes] == [
        (1, 19292, 19293),
        (2, 19294, 19295),
        (3, 19296, 19297),
    ]
    assert len({n.home for n in nodes}) == 3
    assert localstack.local_bootstrap() == "127.0.0.1:19292,127.0.0.1:19294,127.0.0.1:19296"
    localstack.write_configs(local, nodes[1])
    conf = dict(
        line.split("=", 1) for line in nodes[1].config.read_text().splitlines() if "=" in line
    )
    assert conf["node.id"] == "2"
    assert conf["controller.quorum.voters"] == (
        "1@127.0.0.1:19293,2@127.0.0.1:19295,3@127.0.0.1:19297"
    )
    assert conf["offsets.topic.replication.factor"] == "3"
    assert conf["transaction.state.log.min.isr"] == "2"
    assert conf["listeners"].startswith("PLAINTEXT://127.0.0.1:19294")


def test_a_stack_refuses_to_start_with_another_shape(tmp_path, monkeypatch):
    import pytest

    monkeypatch.setenv("SHUFFLE_LOCAL_KAFKA_DIR", str(tmp_path))
    monkeypatch.setenv("SHUFFLE_LOCAL_KAFKA_NODES", "1")
    localstack.check_stamp(localstack.local_stack())
    monkeypatch.setenv("SHUFFLE_LOCAL_KAFKA_NODES", "3")
    with pytest.raises(localstack.LocalStackError, match="was set up with"):
        localstack.check_stamp(localstack.local_stack())


def test_sasl_ssl_listener_settings_and_private_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("SHUFFLE_LOCAL_KAFKA_DIR", str(tmp_path))
    monkeypatch.setenv("SHUFFLE_LOCAL_KAFKA_SECURITY", "sasl_ssl")
    monkeypatch.delenv("SHUFFLE_LOCAL_KAFKA_NODES", raising=False)
    monkeypatch.delenv("SHUFFLE_LOCAL_KAFKA_PORT", raising=False)
    local = localstack.local_stack()
    assert local.port == 20092
    lines = localstack.listener_lines(local, local.all_nodes[0])
    conf = dict(line.split("=", 1) for line in lines)
    assert conf["listeners"].startswith("SASL_SSL://127.0.0.1:20092")
    assert conf["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert conf["allow.everyone.if.no.acl.found"] == "false"
    assert (tmp_path / "secrets.json").stat().st_mode & 0o077 == 0
    client = localstack.client_config("consumer")
    assert client["security.protocol"] == "SASL_SSL" and client["sasl.username"] == "consumer"
    assert client["sasl.password"] != localstack.client_config("producer")["sasl.password"]
