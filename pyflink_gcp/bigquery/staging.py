"""The staging location of ``WriteMethod.FILE_LOADS``: where pending files wait for their load.

- ``gs://bucket/prefix`` (:class:`Staging`): a finished file is uploaded under
  ``gs://bucket/prefix/<table id>/``; a load job reads it from there, and it is deleted once
  loaded, by the URI the committable holds (so a file staged before a change of the staging
  location is still loaded and deleted where it is). Every call is one attempt with a timeout
  (the client library's own retry is off) under the sink's retry policy.
  ``STORAGE_EMULATOR_HOST`` (a URL) points the client at an emulator, with anonymous
  credentials, as the Cloud Storage libraries do.
- a local directory (``file:///path`` or ``/path``; :class:`LocalStaging`): a finished file is
  moved under ``<directory>/<table id>/`` and loaded from its ``file://`` URI. BigQuery itself
  reads only Cloud Storage; a local directory is for backends that read the machine's files
  (the BigQuery emulator), and every TaskManager must see the same directory (the committer
  loading a table's files runs on one of them).
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from pyflink_gcp.bigquery.options import BigQueryFileLoadsOptions
from pyflink_gcp.core.errors import ConfigurationError, WriteError
from pyflink_gcp.core.retry import RetryPolicy, status_name

STORAGE_EMULATOR_VARIABLE = "STORAGE_EMULATOR_HOST"
#: Timeout of one upload or delete, capped by the retry deadline.
_CALL_TIMEOUT_S = 120.0


def storage_module() -> Any:
    """``google.cloud.storage``, or a ConfigurationError naming the extra that brings it."""
    try:
        from google.cloud import storage  # type: ignore[attr-defined]
    except ImportError as exc:
        raise ConfigurationError(
            "WriteMethod.FILE_LOADS stages files in Cloud Storage and needs "
            "google-cloud-storage: pip install 'pyflink-gcp[bigquery,storage]'"
        ) from exc
    return storage


def open_staging(options: BigQueryFileLoadsOptions, retry: RetryPolicy, sink_name: str) -> Staging:
    """The opened staging area of ``options.staging_location``."""
    staging: Staging = (
        LocalStaging(options, retry, sink_name)
        if options.local_directory is not None
        else Staging(options, retry, sink_name)
    )
    staging.open()
    return staging


class Staging:
    """The pending objects of one sink subtask (or its committer) in a Cloud Storage bucket."""

    def __init__(self, options: BigQueryFileLoadsOptions, retry: RetryPolicy, sink_name: str):
        self.bucket_name = options.bucket
        self.prefix = options.prefix
        self._retry = retry
        self._sink = sink_name
        self._timeout_s = retry.attempt_timeout(_CALL_TIMEOUT_S)
        self._client: Any = None
        self._bucket: Any = None
        self.endpoint = "https://storage.googleapis.com"

    def open(self, project: str | None = None) -> None:
        storage = storage_module()
        emulator = os.environ.get(STORAGE_EMULATOR_VARIABLE)
        if emulator:
            from google.auth.credentials import AnonymousCredentials

            self.endpoint = emulator
            self._client = storage.Client(
                project=project or "emulator",
                credentials=AnonymousCredentials(),
                client_options={"api_endpoint": emulator},
            )
        else:
            self._client = storage.Client(project=project)
        self._bucket = self._client.bucket(self.bucket_name)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = self._bucket = None

    def object_name(self, table_id: str, file_name: str) -> str:
        """The object of ``file_name`` staged for the table ``project.dataset.table``."""
        return "/".join(p for p in (self.prefix, table_id, file_name) if p)

    def uri(self, name: str) -> str:
        return f"gs://{self.bucket_name}/{name}"

    def _call(self, fn: Any, what: str) -> Any:
        what = f"sink '{self._sink}': {what} at {self.endpoint}"
        try:
            return self._retry.call(fn, what)
        except WriteError:
            raise
        except Exception as exc:
            raise WriteError(f"{what} failed: {status_name(exc)}: {exc}") from exc

    def upload(self, path: str, name: str) -> None:
        """Upload the local file ``path`` as the object ``name``."""
        blob = self._bucket.blob(name)
        self._call(
            lambda: blob.upload_from_filename(path, timeout=self._timeout_s, retry=None),
            f"upload {self.uri(name)}",
        )

    def delete(self, name: str) -> None:
        """Delete the object ``name``; a missing one counts as deleted (a repeated commit)."""
        from google.api_core.exceptions import NotFound

        blob = self._bucket.blob(name)

        def attempt() -> None:
            try:
                blob.delete(timeout=self._timeout_s, retry=None)
            except NotFound:
                pass

        self._call(attempt, f"delete {self.uri(name)}")

    def delete_uri(self, uri: str) -> None:
        """Delete the object ``uri`` (``gs://bucket/name``, in any bucket); a missing one counts
        as deleted (a repeated commit)."""
        from google.api_core.exceptions import NotFound

        bucket, _, name = uri.removeprefix("gs://").partition("/")
        if not uri.startswith("gs://") or not bucket or not name:
            raise WriteError(f"sink '{self._sink}': cannot delete {uri}: not a gs:// object")
        blob = self._client.bucket(bucket).blob(name)

        def attempt() -> None:
            try:
                blob.delete(timeout=self._timeout_s, retry=None)
            except NotFound:
                pass

        self._call(attempt, f"delete {uri}")

    def list(self, prefix: str = "") -> list[str]:
        """Names of the objects under ``prefix`` (inside the staging prefix)."""
        full = self.object_name(prefix, "") if prefix else self.prefix
        return self._call(
            lambda: [
                b.name
                for b in self._client.list_blobs(
                    self.bucket_name, prefix=full, timeout=self._timeout_s, retry=None
                )
            ],
            f"list gs://{self.bucket_name}/{full}",
        )


class LocalStaging(Staging):
    """The pending files of one sink subtask (or its committer) in a local directory."""

    def __init__(self, options: BigQueryFileLoadsOptions, retry: RetryPolicy, sink_name: str):
        super().__init__(options, retry, sink_name)
        assert options.local_directory is not None
        self._root = options.local_directory
        self.endpoint = "file://" + self._root

    def open(self, project: str | None = None) -> None:
        os.makedirs(self._root, exist_ok=True)

    def close(self) -> None:
        pass

    def object_name(self, table_id: str, file_name: str) -> str:
        return "/".join((table_id, file_name))

    def uri(self, name: str) -> str:
        return "file://" + os.path.join(self._root, name)

    def upload(self, path: str, name: str) -> None:
        target = os.path.join(self._root, name)

        def attempt() -> None:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            partial = target + ".part"
            shutil.copyfile(path, partial)
            os.replace(partial, target)  # a load never sees half a file

        self._call(attempt, f"copy {path} to {self.uri(name)}")

    def delete(self, name: str) -> None:
        try:
            os.remove(os.path.join(self._root, name))
        except FileNotFoundError:
            pass

    def delete_uri(self, uri: str) -> None:
        if not uri.startswith("file://"):
            raise WriteError(f"sink '{self._sink}': cannot delete {uri}: not a local file")
        try:
            os.remove(uri.removeprefix("file://"))
        except FileNotFoundError:
            pass

    def list(self, prefix: str = "") -> list[str]:
        top = os.path.join(self._root, prefix)
        found = []
        for directory, _, files in os.walk(top):
            for file_name in files:
                found.append(os.path.relpath(os.path.join(directory, file_name), self._root))
        return sorted(found)
