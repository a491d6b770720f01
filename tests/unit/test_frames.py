import uuid

import pyarrow as pa
import pytest

from orchestration.shuffle import ShuffleError, ShuffleFormatError
from orchestration.shuffle.core import frames as fr

RUN = str(uuid.uuid4())


def header(t, seq=0):
    return fr.FrameHeader(t, RUN, subtask=3, attempt=1, sequence=seq)


def test_header_is_44_bytes_and_40_in_version_1():
    assert fr.HEADER_SIZE == 44 and fr.HEADER_SIZE_V1 == 40
    assert len(header(fr.FrameType.END).encode()) == 44


def v1(value: bytes) -> bytes:
    """The frame ``value`` (version 2) as a version 1 writer wrote it: no checksum."""
    return value[:4] + bytes([1]) + value[5:40] + value[44:]


def test_version_1_frames_are_still_read():
    batch = pa.record_batch({"k": ["a", "b"], fr.KEY_GROUP_COLUMN: pa.array([1, 2], pa.int32())})
    frame = fr.decode(v1(fr.encode_data(header(fr.FrameType.DATA, 7), batch)))
    assert frame.header == header(fr.FrameType.DATA, 7) and frame.batch().equals(batch)
    end = fr.decode(v1(fr.encode_end(header(fr.FrameType.END), 123, 4)))
    assert end.end_counts() == (123, 4)
    # A version 1 frame carries no checksum: a changed payload is not detected.
    changed = bytearray(v1(fr.encode_end(header(fr.FrameType.END), 123, 4)))
    changed[-1] ^= 1
    assert fr.decode(bytes(changed)).end_counts() == (123, 5)


@pytest.mark.parametrize("at", [44, 60, -1])
def test_a_changed_payload_fails_its_checksum(at):
    batch = pa.record_batch({"v": pa.array(range(100), pa.int64())})
    value = bytearray(fr.encode_data(header(fr.FrameType.DATA, 7), batch, None))
    value[at] ^= 0x10
    with pytest.raises(
        ShuffleFormatError,
        match=rf"DATA frame at topic 't' partition 2 offset 9 \(run {RUN} subtask 3 attempt 1\) "
        r"fails its checksum: its \d+-byte payload has CRC-32 [0-9a-f]{8}, its header says",
    ):
        fr.decode(bytes(value), where="topic 't' partition 2 offset 9")


def test_the_checksum_is_zlib_crc32_of_the_payload():
    import zlib

    value = fr.encode_watermark(header(fr.FrameType.WATERMARK), 12345)
    assert int.from_bytes(value[40:44], "big") == zlib.crc32(value[44:])


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
    v3 = bytearray(good)
    v3[4] = 3
    with pytest.raises(
        ShuffleFormatError,
        match="frame at x has format version 3; this reader understands versions 1 and 2",
    ):
        fr.decode(bytes(v3), where="x")
    t9 = bytearray(good)
    t9[5] = 9
    with pytest.raises(ShuffleFormatError, match="unknown frame type 9"):
        fr.decode(bytes(t9))


def test_short_message_and_bad_payload_size():
    with pytest.raises(ShuffleFormatError, match="shorter than a frame header"):
        fr.decode(b"KSHF")
    with pytest.raises(ShuffleFormatError, match="42 bytes, shorter than a frame header"):
        fr.decode(header(fr.FrameType.END).encode()[:42])
    with pytest.raises(ShuffleFormatError, match="payload"):
        fr.decode(header(fr.FrameType.WATERMARK).encode() + b"\x00")
