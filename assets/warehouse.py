"""``WarehouseResource``: where the reference pipeline keeps its Parquet outputs."""

import uuid
from typing import Any

from dagster import ConfigurableResource
from pydantic import Field

from orchestration.shuffle.core.paths import open_filesystem, parse_location


class WarehouseResource(ConfigurableResource):
    """Where Parquet outputs live: ``<path>/<asset_name>/day=YYYY-MM-DD/``, on a local disk or
    any file system ``pyarrow.fs`` resolves (``s3a://bucket/prefix``, ``gs://``, ...).

    Paths it hands out are spelled for Spark (``s3a://`` for S3); its file methods go
    through ``pyarrow.fs`` (S3's endpoint and keys from the ``AWS_*`` environment).

    Example::

        WarehouseResource(path=EnvVar("SHUFFLE_WAREHOUSE"))   # a path, or s3a://bucket/wh
    """

    path: str = Field(description="Root folder of the Parquet outputs: a path or a URI")

    def root(self) -> str:
        """The root, spelled for Spark (a local path is made absolute)."""
        return parse_location(self.path).spark

    def day_path(self, asset_name: str, day: str) -> str:
        return f"{self.root()}/{asset_name}/day={day}"

    def _open(self, path: str) -> tuple[Any, str]:
        return open_filesystem(parse_location(path))

    def exists(self, path: str) -> bool:
        """Whether the folder or file ``path`` (as :meth:`day_path` spells it) exists."""
        import pyarrow.fs as pafs

        fs, inner = self._open(path)
        info = fs.get_file_info(inner)
        if info.type != pafs.FileType.NotFound:
            return True
        # Object stores have no folders: a prefix exists when something is under it.
        return bool(fs.get_file_info(pafs.FileSelector(inner, allow_not_found=True)))

    def replace_dir(self, path: str) -> None:
        """Deletes the folder ``path`` with what it holds, and creates it empty."""
        fs, inner = self._open(path)
        fs.delete_dir_contents(inner, missing_dir_ok=True)
        fs.create_dir(inner)

    def replace_with_table(self, folder: str, table: Any) -> str:
        """Replaces what ``folder`` holds with the pyarrow ``table`` as one Parquet file, and
        returns the file's path. The file's name is new on every call: a session that read
        the folder before must not be handed the earlier file's bytes under the same name
        (Hadoop 3.5's S3A reads through the analytics accelerator by default, which keeps
        what it read of an object by name for the life of the file system)."""
        self.replace_dir(folder)
        path = f"{folder}/part-{uuid.uuid4().hex[:12]}.parquet"
        self.write_table(table, path)
        return path

    def write_table(self, table: Any, path: str) -> None:
        """Writes a pyarrow ``table`` as the Parquet file ``path``. A reader never sees part
        of it: on a local disk it is written under a hidden name and renamed; an object
        store publishes an upload only whole."""
        import pyarrow.parquet as pq

        fs, inner = self._open(path)
        if fs.type_name != "local":
            pq.write_table(table, inner, filesystem=fs)
            return
        folder, name = inner.rsplit("/", 1)
        hidden = f"{folder}/.{name}.tmp"
        pq.write_table(table, hidden, filesystem=fs)
        fs.move(hidden, inner)

    def read_table(self, path: str) -> Any:
        """The Parquet file or folder ``path`` as one pyarrow table."""
        import pyarrow.parquet as pq

        fs, inner = self._open(path)
        return pq.read_table(inner, filesystem=fs)
