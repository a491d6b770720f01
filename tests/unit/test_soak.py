"""The soak's pure parts: its fault schedule, how it finds the active controller, and how it
judges stalls and memory."""

import json

from devstack.soak import faults
from devstack.soak.verify import flat, longest_life, stalls


def test_every_kind_of_fault_happens_in_a_short_soak_and_the_schedule_is_seeded():
    plan = faults.schedule(seed=3, window=120)
    # Those a Dagster run takes are planted at the start, not on the schedule.
    assert sorted([f.kind for f in plan] + list(faults.AT_START)) == sorted(faults.KINDS)
    assert plan == faults.schedule(seed=3, window=120)
    assert [f.kind for f in plan] != [f.kind for f in faults.schedule(seed=4, window=120)]
    times = [f.at for f in plan]
    assert times == sorted(times) and 0 < times[0] and times[-1] < 120


def test_a_longer_soak_repeats_broker_and_worker_faults_about_every_90_seconds():
    plan = faults.schedule(seed=1, window=1800)
    kinds = [f.kind for f in plan]
    assert len(plan) == 20
    assert set(faults.KINDS) - set(faults.AT_START) <= set(kinds)
    assert kinds.count("broker") > 3 and kinds.count("spark_worker") > 1


def test_the_controller_is_the_leader_of_the_latest_epoch_any_node_has_seen(tmp_path):
    dirs = []
    for node, (leader, epoch) in enumerate([(2, 5), (3, 7), (-1, 7)], start=1):
        meta = tmp_path / f"n{node}" / "__cluster_metadata-0"
        meta.mkdir(parents=True)
        (meta / "quorum-state").write_text(json.dumps({"leaderId": leader, "leaderEpoch": epoch}))
        dirs.append(tmp_path / f"n{node}")
    assert faults.quorum_leader(dirs) == 3
    assert faults.quorum_leader([tmp_path / "missing"]) is None


def test_a_gap_in_the_streaming_work_is_a_stall_with_the_faults_around_it():
    start = 1000.0
    timeline = [{"t": start + t, "event": "stream_commit"} for t in (3, 6, 9, 30, 33)] + [
        {"t": start + 20, "event": "query_failed", "query": "producer", "error": "broker gone"}
    ]
    around = [{"t": start + 8, "t_end": start + 25, "kind": "broker", "node": 2}]
    far = [{"t": start + 200, "t_end": start + 210, "kind": "daemon"}]
    found = stalls(timeline, around + far, start, start + 36)
    producer = [s for s in found if s["what"] == "streaming producer"]
    assert [(s["from_s"], s["seconds"]) for s in producer] == [(9.0, 21.0)]
    assert producer[0]["causes"] == ["broker (node 2)", "query_failed: producer broker gone"]
    # The consumer never ran: one stall over the whole soak, with nothing recorded near it
    # but the broker fault.
    consumer = [s for s in found if s["what"] == "streaming consumer"]
    assert consumer[0]["seconds"] == 36.0
    # A stall on a machine busier than twice its cores says so.
    busy = stalls(timeline, [], start, start + 36, load=[(start + 12, 9.0)], cores=2)
    assert "machine load up to 9 on 2 cores" in busy[0]["causes"]


def test_memory_is_judged_over_one_process_and_only_after_eight_minutes():
    grow = [(t * 5.0, 500 + t * 5.0) for t in range(200)]  # 1000 s, 500 -> 1495 MiB
    steady = [(t * 5.0, 800.0 + (t % 3)) for t in range(200)]
    assert flat(steady)[0] is True
    ok, text = flat(grow)
    assert ok is False and "limit 1.5x" in text
    assert flat(grow[:60])[0] is True and "not judged" in flat(grow[:60])[1]
    pids = [1] * 50 + [2] * 150
    assert longest_life(grow, pids) == grow[50:]
