"""Frame format v2: what one Kafka message of a shuffle's data topic holds. No Spark, no Kafka.

Every message value is a frame: a fixed header (44 bytes; 40 in version 1), then a payload.

Header (big-endian)::

    offset size  field
    0      4     magic       b"KSHF"
    4      1     version     2 (1: frames written before the checksum, still read)
    5      1     type        1 = DATA, 2 = WATERMARK, 3 = END
    6      2     flags       0 (reserved)
    8      16    run_id      the producer run (a UUID)
    24     4     subtask     the producer subtask (Spark task partition id)
    28     4     attempt     the subtask's attempt number (Spark task attempt)
    32     8     sequence    per (run, subtask, attempt), counting every frame it writes
    40     4     crc32       version 2 only: CRC-32 (zlib's, java.util.zip.CRC32's) of the
                             payload

Payloads:

- DATA: an Arrow IPC stream (schema and one record batch, body compressed with lz4 or
  zstd) holding rows of one partition. The batch carries the shuffle's columns plus
  ``_key_group`` (int32).
- WATERMARK: int64, the subtask's watermark in microseconds since the epoch (UTC):
  the largest event time it has seen minus the allowed out-of-orderness. Broadcast to
  every partition; per subtask it never decreases.
- END: two uint64, the rows and the data frames this subtask attempt wrote to this
  partition. Broadcast to every partition when the subtask has written everything.

A reader refuses a frame with an unknown magic, version or type (naming topic, partition
and offset): a newer writer's frames are never misread. It refuses a version 2 frame whose
payload does not match its checksum: Kafka's record CRC covers the disk and the wire, not a
value changed before it was produced (a writer's memory, a tool that rewrote the topic), and
an Arrow value buffer changed that way decodes into other values without a word.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from collections.abc import Collection
from dataclasses import dataclass
from enum import IntEnum

import pyarrow as pa

from orchestration.shuffle.errors import ShuffleFormatError

MAGIC = b"KSHF"
VERSION = 2  # what writers write
VERSIONS = (1, 2)  # what readers read
_HEADER_V1 = struct.Struct(">4sBBH16sIIQ")
_HEADER = struct.Struct(">4sBBH16sIIQI")
HEADER_SIZE_V1 = _HEADER_V1.size  # 40
HEADER_SIZE = _HEADER.size  # 44
_CRC = struct.Struct(">I")
_WATERMARK = struct.Struct(">q")
_END = struct.Struct(">QQ")

KEY_GROUP_COLUMN = "_key_group"


class FrameType(IntEnum):
    DATA = 1
    WATERMARK = 2
    END = 3


@dataclass(frozen=True)
class FrameHeader:
    type: FrameType
    run_id: str
    subtask: int
    attempt: int
    sequence: int

    def encode(self, payload: bytes | memoryview | pa.Buffer = b"") -> bytes:
        """The header of a frame holding ``payload`` (its checksum is the payload's)."""
        return _HEADER.pack(
            MAGIC,
            VERSION,
            int(self.type),
            0,
            uuid.UUID(self.run_id).bytes,
            self.subtask,
            self.attempt,
            self.sequence,
            zlib.crc32(payload),
        )


@dataclass(frozen=True)
class Frame:
    header: FrameHeader
    payload: memoryview

    def batch(self, columns: Collection[str] | None = None) -> pa.RecordBatch:
        """The rows of a DATA frame; with ``columns``, only those of them it has (the
        others are never decompressed)."""
        source = pa.BufferReader(self.payload)
        if columns is None:
            with pa.ipc.open_stream(source) as reader:
                return reader.read_next_batch()
        with pa.ipc.open_stream(source) as reader:
            names = reader.schema.names
        wanted = [i for i, n in enumerate(names) if n in columns]
        if len(wanted) == len(names):
            options = None
        else:
            # Decompressing buffers on Arrow's thread pool only adds hand-offs here: a
            # reader runs one per core already.
            options = pa.ipc.IpcReadOptions(included_fields=wanted, use_threads=False)
        with pa.ipc.open_stream(pa.BufferReader(self.payload), options=options) as reader:
            return reader.read_next_batch()

    def watermark(self) -> int:
        """The event time (epoch microseconds) of a WATERMARK frame."""
        return _WATERMARK.unpack_from(self.payload)[0]

    def end_counts(self) -> tuple[int, int]:
        """(rows, data frames) of an END frame."""
        return _END.unpack_from(self.payload)


def _ipc_options(compression: str | None) -> pa.ipc.IpcWriteOptions:
    return pa.ipc.IpcWriteOptions(compression=compression)


def encode_data(
    header: FrameHeader, batch: pa.RecordBatch, compression: str | None = "lz4"
) -> bytes:
    """A DATA frame holding ``batch``."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema, options=_ipc_options(compression)) as writer:
        writer.write_batch(batch)
    body = sink.getvalue()
    # One copy of the payload: join reads the Arrow buffer in place.
    return b"".join((header.encode(body), memoryview(body)))


def encode_watermark(header: FrameHeader, event_time_us: int) -> bytes:
    payload = _WATERMARK.pack(event_time_us)
    return header.encode(payload) + payload


def encode_end(header: FrameHeader, rows: int, frames: int) -> bytes:
    payload = _END.pack(rows, frames)
    return header.encode(payload) + payload


def decode(value: bytes | memoryview, where: str = "") -> Frame:
    """Parses a frame and checks a version 2 frame's payload against its checksum; ``where``
    (topic, partition, offset) goes into any error message."""
    buf = memoryview(value)
    loc = f" at {where}" if where else ""
    if len(buf) < HEADER_SIZE_V1:
        raise ShuffleFormatError(f"message{loc} is {len(buf)} bytes, shorter than a frame header")
    magic, version, ftype, _flags, run, subtask, attempt, seq = _HEADER_V1.unpack_from(buf)
    if magic != MAGIC:
        raise ShuffleFormatError(
            f"message{loc} is not a shuffle frame (magic {bytes(magic)!r}, expected {MAGIC!r})"
        )
    if version not in VERSIONS:
        raise ShuffleFormatError(
            f"frame{loc} has format version {version}; this reader understands versions "
            + " and ".join(map(str, VERSIONS))
        )
    try:
        kind = FrameType(ftype)
    except ValueError:
        raise ShuffleFormatError(f"frame{loc} has unknown frame type {ftype}") from None
    header = FrameHeader(kind, str(uuid.UUID(bytes=bytes(run))), subtask, attempt, seq)
    if version == 1:
        payload = buf[HEADER_SIZE_V1:]
    elif len(buf) < HEADER_SIZE:
        raise ShuffleFormatError(f"message{loc} is {len(buf)} bytes, shorter than a frame header")
    else:
        payload = buf[HEADER_SIZE:]
    expected = {FrameType.WATERMARK: _WATERMARK.size, FrameType.END: _END.size}.get(kind)
    if expected is not None and len(payload) != expected:
        raise ShuffleFormatError(
            f"{kind.name} frame{loc} has a {len(payload)}-byte payload, expected {expected}"
        )
    if version == 2:
        (crc,) = _CRC.unpack_from(buf, HEADER_SIZE_V1)
        actual = zlib.crc32(payload)
        if actual != crc:
            raise ShuffleFormatError(
                f"{kind.name} frame{loc} (run {header.run_id} subtask {subtask} attempt "
                f"{attempt}) fails its checksum: its {len(payload)}-byte payload has CRC-32 "
                f"{actual:08x}, its header says {crc:08x} (the frame was changed after it "
                "was written)"
            )
    return Frame(header, payload)
