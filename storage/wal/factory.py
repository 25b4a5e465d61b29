"""Opens the WAL that ``s3.wal.path`` names: ``file://DIR`` for the file mode, ``s3://`` or ``mem://`` for the S3 mode.

The object store for the S3 mode comes from a factory parameter so that tests (and tools) can hand in a wrapped or
shared store; by default it is the engine's URL factory.

The S3-mode WAL (``storage.wal.s3`` and its object format) is imported only when a URL names one, as the object
store factory imports the S3 client only for an ``s3://`` bucket: a node on the shipped config (a ``file://`` WAL)
never opens one, and importing it would cost every such node's start (issue 25).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from storage.config import BucketURL, ConfigError, StorageConfig
from storage.objectstore.base import ObjectStore
from storage.objectstore.factory import open_object_store
from storage.wal.base import WriteAheadLog
from storage.wal.file import FileWAL

if TYPE_CHECKING:
    from storage.wal.s3 import S3WAL

StoreFactory = Callable[[BucketURL, StorageConfig], ObjectStore]


def open_wal(
    config: StorageConfig,
    store_factory: StoreFactory | None = None,
    *,
    observe_flush: Callable[[float], None] | None = None,
    on_disk_full: Callable[[], None] | None = None,
) -> WriteAheadLog:
    """A WAL for ``config.wal_url``, not yet started. An S3-mode WAL owns (and closes) the store it opens.
    ``observe_flush`` learns the seconds of each flush: a file WAL's write + fdatasync, an S3 WAL's object PUT;
    ``on_disk_full``, a file WAL's disk filling up (``storage.wal.disk_full``)."""
    url = config.wal_url
    wal: FileWAL | S3WAL
    if url.scheme == "file":
        wal = FileWAL.from_config(config)
        if on_disk_full is not None:
            wal.on_disk_full = on_disk_full
    elif url.scheme in ("s3", "mem"):
        from storage.wal.s3 import S3WAL  # noqa: PLC0415 - only an S3-mode WAL needs it: see the module docstring

        store = (store_factory or open_object_store)(url, config)
        wal = S3WAL.from_config(config, store, owns_store=True)
    else:
        raise ConfigError(f"s3.wal.path: unsupported WAL URL {url.describe()} (use file://, s3:// or mem://)")
    if observe_flush is not None:
        wal.observe_flush = observe_flush
    return wal


def open_failover_wal(
    config: StorageConfig,
    node_id: int,
    failover_epoch: int,
    store_factory: StoreFactory | None = None,
    own_wal: WriteAheadLog | None = None,
) -> S3WAL:
    """Another node's S3 WAL, opened to replay it after that node died (not yet started).

    The dead node's WAL is found under its node prefix in *this* node's ``s3.wal.path`` bucket: every broker of a
    cluster shares the WAL bucket (storage/wal/s3_format.py), so a file-mode WAL cannot take part. ``own_wal``, this
    node's S3 WAL, lends its store (that bucket's): the failover then opens no S3 client of its own and finds its
    connections open, a few hundred ms off a failover on a loaded machine; it is not closed with the failover's WAL.
    """
    url = config.wal_url
    if url.scheme not in ("s3", "mem"):
        raise ConfigError(
            f"s3.wal.path: node {config.node_id} has the WAL {url.describe()}; only a node with an s3 WAL in the "
            f"cluster's shared WAL bucket can replay node {node_id}'s WAL"
        )
    from storage.wal.s3 import S3WAL  # noqa: PLC0415 - only an S3-mode WAL needs it: see the module docstring

    dead = dataclasses.replace(config, node_id=node_id, node_epoch=failover_epoch)
    if isinstance(own_wal, S3WAL):
        return S3WAL.from_config(dead, own_wal.store, owns_store=False, failover=True)
    store = (store_factory or open_object_store)(url, config)
    return S3WAL.from_config(dead, store, owns_store=True, failover=True)
