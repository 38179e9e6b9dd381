"""Writing many objects as one pack file and its index (pack format 2, index
format 2), as ``git fast-import`` and ``git index-pack`` leave them.

A search writes thousands of small objects per iteration; as loose objects
each is a file to create and rename, which on most file systems costs more
than hashing and compressing it. One pack per batch makes it two files.
Objects are stored whole (no deltas): ``git gc`` recompresses them later.
"""

from __future__ import annotations

import hashlib
import os
import struct
import zlib
from collections.abc import Mapping

__all__ = ["write_pack", "KINDS"]

KINDS = {"commit": 1, "tree": 2, "blob": 3, "tag": 4}
_LARGE = 0x80000000  # offsets from 2 GiB on go to the index's table of 8-byte offsets


def _entry_header(kind: int, size: int) -> bytes:
    """The type and size of an object in a pack: 3 bits of type, then the
    size 4 bits first and 7 bits per further byte, each byte but the last
    with its high bit set."""
    byte = (kind << 4) | (size & 0x0F)
    size >>= 4
    out = bytearray()
    while size:
        out.append(byte | 0x80)
        byte = size & 0x7F
        size >>= 7
    out.append(byte)
    return bytes(out)


def write_pack(pack_dir: str, objects: Mapping[str, tuple[str, bytes]]) -> str:
    """Write ``objects`` (id → (kind, content)) as ``pack-<checksum>.pack`` and
    ``.idx`` in ``pack_dir``; returns the pack's path. The pack is complete on
    disk before its index appears, so git never finds an index whose pack is
    partial; a crash leaves at most a temporary file."""
    parts = [b"PACK" + struct.pack(">II", 2, len(objects))]
    entries: list[tuple[bytes, int, int]] = []  # (binary id, offset in the pack, CRC-32 of its bytes there)
    offset = len(parts[0])
    for hex_id, (kind, data) in objects.items():
        packed = _entry_header(KINDS[kind], len(data)) + zlib.compress(data, 1)
        entries.append((bytes.fromhex(hex_id), offset, zlib.crc32(packed)))
        parts.append(packed)
        offset += len(packed)
    body = b"".join(parts)
    checksum = hashlib.sha1(body).digest()
    entries.sort()
    counts = [0] * 256
    for sha, _, _ in entries:
        counts[sha[0]] += 1
    fanout: list[int] = []
    total = 0
    for count in counts:
        total += count
        fanout.append(total)
    small: list[int] = []
    large: list[int] = []
    for _, at, _ in entries:
        if at < _LARGE:
            small.append(at)
        else:
            small.append(_LARGE | len(large))
            large.append(at)
    index = b"".join([
        b"\xfftOc", struct.pack(">I", 2), struct.pack(">256I", *fanout),
        b"".join(sha for sha, _, _ in entries),
        struct.pack(f">{len(entries)}I", *(crc for _, _, crc in entries)),
        struct.pack(f">{len(small)}I", *small), struct.pack(f">{len(large)}Q", *large), checksum,
    ])
    index += hashlib.sha1(index).digest()
    name = f"{pack_dir}/pack-{checksum.hex()}"
    os.makedirs(pack_dir, exist_ok=True)
    for suffix, data in ((".pack", body + checksum), (".idx", index)):
        tmp = f"{pack_dir}/tmp_{os.getpid()}_{checksum.hex()}{suffix}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o444)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(tmp, name + suffix)
    return name + ".pack"
