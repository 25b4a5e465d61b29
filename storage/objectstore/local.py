"""The embedded default: a bucket in a local directory.

Keys map to paths under the root. A put writes a temporary file in the same directory, fsyncs it and renames
it over the key, so a reader (or a crash) sees the whole object or none of it. File I/O runs in the default
thread pool to keep the event loop responsive, except small puts and reads, which run in place
(``storage.offload``: a thread's GIL hand-offs cost a loaded broker more than the I/O). Large objects are written at
a pace that leaves the disk to the WAL half the time (``_write_paced``).
"""

from __future__ import annotations

import asyncio
import builtins
import os
import shutil
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from storage.durable import fdatasync, fsync_dir, make_directory, write_all
from storage.errors import ObjectExistsError, ObjectNotFoundError, ObjectStoreError
from storage.objectstore.base import ObjectData, ObjectInfo, ObjectStore, StoreStats, data_size, innermost
from storage.offload import INLINE_BYTES, offload

_TMP_SUFFIX = ".fjord-tmp"
#: A put writes and flushes this much at a time; smaller objects are written whole and flushed once.
_STEP_BYTES = 256 * 1024


def _write_paced(fd: int, data: ObjectData) -> None:
    """Writes ``data`` to the empty file ``fd`` in steps of ``_STEP_BYTES``, each flushed with fdatasync and followed
    by a pause as long as that flush took.

    The embedded store usually shares its disk with the file WAL, whose fdatasync every acknowledged produce
    waits for. Written whole and flushed once, an upload of 100 MiB queued every WAL flush made meanwhile behind
    up to 100 MiB of writeback: for the 160 ms the write took, group commits took 2-5 ms instead of 0.3, and that
    decided the end-to-end p99 at 20 MB/s with the shipped cache sizes (10.6-11.6 ms). In steps a WAL flush waits
    behind one step at most, and the pauses leave the disk half its time: 20-40 instead of about 95 group commits
    over 1.5 ms per 30 s, and a p99 of 7.6-7.8 ms. An object takes about three times as long to write (100 MiB in
    0.4-0.6 s), which the upload pipeline, writing one object per 100 MiB of produced data, has time for. Where
    uploads are the bottleneck it shows: a closed-loop producer with a 16 MiB upload threshold (bench/broker.py,
    "produce-1p uploading") gets 145-160 instead of about 255 MB/s, the price of short WAL flushes on a shared
    disk."""
    parts = [data] if isinstance(data, bytes | bytearray | memoryview) else data
    step: list[memoryview] = []
    size = position = 0
    for part in parts:
        view = memoryview(part).cast("B")
        while view:
            piece = view[: _STEP_BYTES - size]
            step.append(piece)
            size += len(piece)
            view = view[len(piece) :]
            if size == _STEP_BYTES:
                write_all(fd, step, position)
                position += size
                started = time.monotonic()
                fdatasync(fd)
                time.sleep(time.monotonic() - started)
                step, size = [], 0
    write_all(fd, step, position)


class LocalObjectStore:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self._root = Path(root).resolve()
        make_directory(self._root)
        self.stats = StoreStats()

    @property
    def name(self) -> str:
        return f"file://{self._root}"

    @property
    def root(self) -> Path:
        return self._root

    def _path(self, key: str) -> Path:
        if not key or key.startswith("/") or any(part in ("", ".", "..") for part in key.split("/")):
            raise ObjectStoreError(f"{self.name}: invalid object key {key!r}")
        return self._root / key

    async def put(self, key: str, data: ObjectData, *, if_none_match: bool = False) -> None:
        path = self._path(key)
        self.stats.puts += 1
        self.stats.bytes_put += data_size(data)
        await offload(data_size(data), self._put_sync, path, key, data, if_none_match)

    def _put_sync(self, path: Path, key: str, data: ObjectData, if_none_match: bool) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex}{_TMP_SUFFIX}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                # Parts go to the file as they are, straight from their own memory: no copy of the whole object.
                # A put small enough to run on the event loop is written whole: pacing would stall the loop.
                if data_size(data) <= INLINE_BYTES:
                    write_all(fd, [data] if isinstance(data, bytes | bytearray | memoryview) else data, 0)
                else:
                    _write_paced(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            if if_none_match:
                # link() fails if the target exists: an atomic create-if-absent.
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    raise ObjectExistsError(key, self.name) from None
                finally:
                    tmp.unlink(missing_ok=True)
            else:
                os.replace(tmp, path)
            fsync_dir(path.parent)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise ObjectStoreError(f"{self.name}: put {key!r} failed: {exc}") from exc

    async def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        path = self._path(key)
        size = INLINE_BYTES + 1 if end is None else end - start  # a whole object: its size is not known yet
        data = await offload(size, self._get_sync, path, key, start, end)
        self.stats.gets += 1
        self.stats.bytes_got += len(data)
        return data

    def _get_sync(self, path: Path, key: str, start: int, end: int | None) -> bytes:
        try:
            with open(path, "rb") as f:
                f.seek(start)
                return f.read() if end is None else f.read(max(0, end - start))
        except FileNotFoundError:
            raise ObjectNotFoundError(key, self.name) from None
        except OSError as exc:
            raise ObjectStoreError(f"{self.name}: get {key!r} failed: {exc}") from exc

    async def get_tail(self, key: str, length: int) -> tuple[bytes, int]:
        path = self._path(key)
        data, size = await offload(length, self._tail_sync, path, key, length)
        self.stats.gets += 1
        self.stats.bytes_got += len(data)
        return data, size

    def _tail_sync(self, path: Path, key: str, length: int) -> tuple[bytes, int]:
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                f.seek(max(0, size - length))
                return f.read(), size
        except FileNotFoundError:
            raise ObjectNotFoundError(key, self.name) from None
        except OSError as exc:
            raise ObjectStoreError(f"{self.name}: get tail of {key!r} failed: {exc}") from exc

    async def size(self, key: str) -> int:
        path = self._path(key)
        try:
            return (await asyncio.to_thread(os.stat, path)).st_size
        except FileNotFoundError:
            raise ObjectNotFoundError(key, self.name) from None
        except OSError as exc:
            raise ObjectStoreError(f"{self.name}: size of {key!r} failed: {exc}") from exc

    async def delete(self, keys: Sequence[str]) -> None:
        paths = [self._path(k) for k in keys]
        self.stats.deletes += 1
        await asyncio.to_thread(self._delete_sync, paths)

    def _delete_sync(self, paths: list[Path]) -> None:
        for path in paths:
            path.unlink(missing_ok=True)
            # Prune empty directories up to the root so listing stays cheap.
            parent = path.parent
            while parent != self._root:
                try:
                    parent.rmdir()
                except OSError:
                    break
                parent = parent.parent

    async def list(self, prefix: str) -> list[ObjectInfo]:
        self.stats.lists += 1
        return await asyncio.to_thread(self._list_sync, prefix)

    def _list_sync(self, prefix: str) -> builtins.list[ObjectInfo]:
        # Walk only the directory the prefix names, not the whole bucket.
        base = self._root
        head, _, _ = prefix.rpartition("/")
        if head:
            base = self._root / head
        out: builtins.list[ObjectInfo] = []
        if not base.exists():
            return out
        for dirpath, _dirs, files in os.walk(base):
            for name in files:
                if name.endswith(_TMP_SUFFIX):
                    continue
                full = Path(dirpath) / name
                key = full.relative_to(self._root).as_posix()
                if key.startswith(prefix):
                    try:
                        out.append(ObjectInfo(key, full.stat().st_size))
                    except FileNotFoundError:
                        continue
        out.sort(key=lambda info: info.key)
        return out

    def copies_from(self, source: ObjectStore) -> bool:
        return isinstance(innermost(source), LocalObjectStore)

    async def copy(self, source: ObjectStore, source_key: str, key: str) -> None:
        origin = innermost(source)
        if not isinstance(origin, LocalObjectStore):
            raise ObjectStoreError(f"{self.name}: cannot copy {source_key} from {source.name} inside the store")
        self.stats.copies += 1
        await asyncio.to_thread(self._copy_sync, origin._path(source_key), source_key, self._path(key), key)

    def _copy_sync(self, origin: Path, source_key: str, path: Path, key: str) -> None:
        """A hard link where both files share a file system (objects are never rewritten in place: a put replaces
        the file), else a copy; either way made whole under a temporary name, then renamed into place."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex}{_TMP_SUFFIX}")
        try:
            try:
                os.link(origin, tmp)
            except FileNotFoundError:
                raise ObjectNotFoundError(source_key, self.name) from None
            except OSError:
                shutil.copyfile(origin, tmp)
                with open(tmp, "rb+") as f:
                    os.fsync(f.fileno())
            os.replace(tmp, path)
            fsync_dir(path.parent)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise ObjectStoreError(f"{self.name}: copy of {source_key!r} to {key!r} failed: {exc}") from exc

    async def close(self) -> None:
        return None
