"""``storage.objectstore.local_location``: a node remembers where its ``file://`` objects are, and refuses a start
whose store lost them to that place (a relative path read from another working directory), but not a store that
was moved there."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.config import BucketURL, ConfigError
from storage.objectstore.local_location import MARKER, check_local_objects

CLUSTER = "_fjord_qNH6MuZ1VuesZA3lEFlaKA"
OTHER_CLUSTER = "_fjord_wHvYGFL3USeoZPBYpe4cyA"


def file_bucket(path: str | Path) -> BucketURL:
    return BucketURL(0, "file", str(path))


def put_object(root: Path, namespace: str = CLUSTER) -> None:
    (root / "10000000" / namespace).mkdir(parents=True)
    (root / "10000000" / namespace / "1").write_bytes(b"object")


def test_the_first_start_remembers_the_absolute_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node_dir = tmp_path / "kraft"
    node_dir.mkdir()
    monkeypatch.chdir(tmp_path)
    check_local_objects(file_bucket("data/objects"), CLUSTER, node_dir)
    assert (node_dir / MARKER).read_text() == f"{tmp_path / 'data' / 'objects'}\n"


def test_a_relative_path_read_from_another_directory_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node_dir = tmp_path / "kraft"
    node_dir.mkdir()
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    monkeypatch.chdir(tmp_path / "first")
    check_local_objects(file_bucket("data/objects"), CLUSTER, node_dir)
    put_object(tmp_path / "first" / "data" / "objects")
    check_local_objects(file_bucket("data/objects"), CLUSTER, node_dir)  # the same place: taken

    monkeypatch.chdir(tmp_path / "second")
    with pytest.raises(ConfigError) as info:
        check_local_objects(file_bucket("data/objects"), CLUSTER, node_dir)
    kept = tmp_path / "first" / "data" / "objects"
    assert str(info.value) == (
        f"s3.data.buckets: file://data/objects is {tmp_path / 'second' / 'data' / 'objects'}, which holds none of "
        f"this cluster's objects; this node kept them in {kept} (a relative path resolves against the working "
        f"directory: start the node from the directory it started in before, or give the path whole, "
        f"file://{kept})"
    )
    assert (node_dir / MARKER).read_text() == f"{kept}\n"  # still the place the objects are


def test_a_store_moved_with_its_objects_is_taken_and_remembered(tmp_path: Path) -> None:
    node_dir = tmp_path / "kraft"
    node_dir.mkdir()
    old, new = tmp_path / "old", tmp_path / "new"
    check_local_objects(file_bucket(old), CLUSTER, node_dir)
    put_object(old)
    old.rename(new)
    check_local_objects(file_bucket(new), CLUSTER, node_dir)
    assert (node_dir / MARKER).read_text() == f"{new}\n"


def test_a_store_that_held_nothing_of_the_cluster_is_not_held_to(tmp_path: Path) -> None:
    """No object of this cluster was ever written to the place remembered (another cluster's objects are there):
    nothing can be lost by taking the new one."""
    node_dir = tmp_path / "kraft"
    node_dir.mkdir()
    old = tmp_path / "old"
    check_local_objects(file_bucket(old), CLUSTER, node_dir)
    put_object(old, OTHER_CLUSTER)
    check_local_objects(file_bucket(tmp_path / "new"), CLUSTER, node_dir)
    assert (node_dir / MARKER).read_text() == f"{tmp_path / 'new'}\n"


def test_an_s3_bucket_is_not_looked_at(tmp_path: Path) -> None:
    check_local_objects(BucketURL(0, "s3", "bucket", endpoint="http://127.0.0.1:9"), CLUSTER, tmp_path)
    assert not (tmp_path / MARKER).exists()
