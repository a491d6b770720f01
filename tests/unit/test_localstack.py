import base64

from orchestration import localstack


def test_cluster_ids_never_start_with_a_dash_and_hold_16_bytes():
    # One id in 64 would begin with "-" if drawn blindly; 5,000 draws make a miss
    # practically certain, so this fails if the redraw rule is lost.
    ids = {localstack._cluster_id() for _ in range(5000)}
    assert len(ids) == 5000
    for cid in ids:
        assert not cid.startswith("-"), cid
        assert len(cid) == 22
        assert len(base64.urlsafe_b64decode(cid + "==")) == 16
