import uuid

import pyarrow as pa
import pytest

from orchestration.shuffle.core import frames as fr
from orchestration.shuffle.errors import ShuffleError, ShuffleFormatError

RUN = str(uuid.uuid4())


def header(t, seq=0):
    return fr.FrameHeader(t, RUN, subtask=3, attempt=1, sequence=seq)


def test_header_is_40_bytes():
    assert fr.HEADER_SIZE == 40
    assert len(header(fr.FrameType.END).encode()) == 40


@pytest.mark.parametrize("compression", ["zstd", "lz4", None])
def test_data_frame_round_trip(compression):
    batch = pa.record_batch(
        {
            "k": ["a", "b", None],
            "v": [1, 2, 3],
            fr.KEY_GROUP_COLUMN: pa.array([1, 2, 3], pa.int32()),
        }
    )
    value = fr.encode_data(header(fr.FrameType.DATA, 7), batch, compression)
    frame = fr.decode(value)
    assert frame.header == header(fr.FrameType.DATA, 7)
    assert frame.batch().equals(batch)


def test_compression_shrinks_repetitive_rows():
    batch = pa.record_batch({"k": ["same-key"] * 10_000})
    raw = fr.encode_data(header(fr.FrameType.DATA), batch, None)
    packed = fr.encode_data(header(fr.FrameType.DATA), batch, "zstd")
    assert len(packed) * 3 < len(raw)


def test_watermark_and_end_frames():
    wm = fr.decode(fr.encode_watermark(header(fr.FrameType.WATERMARK), -5))
    assert wm.header.type is fr.FrameType.WATERMARK and wm.watermark() == -5
    end = fr.decode(fr.encode_end(header(fr.FrameType.END), 123, 4))
    assert end.end_counts() == (123, 4)


def test_bad_magic_names_the_location():
    with pytest.raises(ShuffleFormatError, match="topic 't' partition 2 offset 9") as info:
        fr.decode(b"X" * 48, where="topic 't' partition 2 offset 9")
    assert isinstance(info.value, ShuffleError) and isinstance(info.value, ValueError)


def test_unknown_version_and_type_are_refused():
    good = bytearray(fr.encode_end(header(fr.FrameType.END), 1, 1))
    v2 = bytearray(good)
    v2[4] = 2
    with pytest.raises(ShuffleFormatError, match="format version 2"):
        fr.decode(bytes(v2), where="x")
    t9 = bytearray(good)
    t9[5] = 9
    with pytest.raises(ShuffleFormatError, match="unknown frame type 9"):
        fr.decode(bytes(t9))


def test_short_message_and_bad_payload_size():
    with pytest.raises(ShuffleFormatError, match="shorter than a frame header"):
        fr.decode(b"KSHF")
    with pytest.raises(ShuffleFormatError, match="payload"):
        fr.decode(header(fr.FrameType.WATERMARK).encode() + b"\x00")
