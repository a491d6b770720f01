import pytest

from orchestration.shuffle import ShuffleWatermarkError
from orchestration.shuffle.core.watermarks import WatermarkMerger, run_watermark, subtask_watermark


def test_emits_only_after_every_subtask_reported():
    m = WatermarkMerger([0, 1, 2])
    assert m.observe(0, 10) is None
    assert m.observe(1, 20) is None
    assert m.current is None
    assert m.observe(2, 5) == 5
    assert m.current == 5


def test_emits_the_minimum_and_only_when_it_advances():
    m = WatermarkMerger([0, 1])
    m.observe(0, 10)
    assert m.observe(1, 30) == 10
    assert m.observe(1, 40) is None  # subtask 0 still holds it at 10
    assert m.observe(0, 35) == 35
    assert m.observe(0, 35) is None  # repeating is not a regression


def test_regression_is_an_error():
    m = WatermarkMerger([0, 1], where="topic 't' partition 3")
    m.observe(0, 10)
    with pytest.raises(
        ShuffleWatermarkError, match="subtask 0 went back from 10 to 9.*partition 3"
    ):
        m.observe(0, 9)


def test_ended_subtask_no_longer_holds_back():
    m = WatermarkMerger([0, 1])
    m.observe(0, 10)
    assert m.end(1) == 10  # subtask 1 had no rows and ended
    assert m.observe(0, 20) == 20
    assert m.end(0) is None


def test_unknown_subtask_is_an_error():
    with pytest.raises(ShuffleWatermarkError, match="subtask 7"):
        WatermarkMerger([0]).observe(7, 1)


def test_subtask_and_run_watermarks():
    assert subtask_watermark(None, 5) is None
    assert subtask_watermark(100, 5) == 95
    assert run_watermark([50, 30, None]) == 30
    assert run_watermark([50, 30], complete_until=40) == 40
    assert run_watermark([50, 30], complete_until=10) == 30
    assert run_watermark([], complete_until=7) == 7
    assert run_watermark([]) is None
