"""Two storages with the same few operations: a local folder and an S3 prefix.

Paths passed to a storage are relative ("step-00000010/manifest.json") and use
"/" on every platform. S3 access goes through boto3 with adaptive retries and
multipart transfers; the endpoint can be overridden for S3-compatible stores
(``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``, which boto3 reads itself).

What a job wrote is tenant data, also on the control plane: a relative path
or key that would climb out of the storage (``..``, an absolute path), and
on a local storage a symlink leading out of it, is refused with
``UnsafeEntry`` (storage.containment), never followed.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from trainplane.storage.containment import UnsafePath, local_within, relative_parts

# A file being written; never counted as part of a checkpoint.
PARTIAL_SUFFIX = ".partial"


class StorageError(Exception):
    """A storage operation failed; the message names the URI."""


class UnsafeEntry(StorageError):
    """A path or key under the storage that would lead outside it (``..``, an
    absolute path, a symlink out): job-written data that is refused, so
    trying again will not help."""


class Storage(Protocol):
    uri: str

    def child_folders(self) -> list[str]: ...
    def read_bytes(self, path: str) -> bytes | None: ...
    def write_bytes(self, path: str, data: bytes) -> None: ...
    def put_file(self, local: Path, path: str) -> None: ...
    def get_tree(self, prefix: str, local: Path) -> None: ...
    def sizes(self, prefix: str) -> dict[str, int]: ...
    def delete_tree(self, prefix: str) -> None: ...
    def delete(self, path: str) -> None: ...


class LocalStorage:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.uri = str(self.root)

    def _path(self, path: str) -> Path:
        """``path`` under the root, once it is known to stay there: no ``..``
        or absolute path, and no symlink on the way that leads out."""
        if not path:
            return self.root
        try:
            target = self.root.joinpath(*relative_parts(path.rstrip("/")))
        except UnsafePath as exc:
            raise UnsafeEntry(f"{self.uri}: {exc}") from None
        if not local_within(str(target), str(self.root)):
            raise UnsafeEntry(f"{self.uri}: '{path}' is a symlink leading outside the storage")
        return target

    def child_folders(self) -> list[str]:
        if not self.root.is_dir():
            return []
        # A symlinked folder is not one of ours, wherever it points.
        with os.scandir(self.root) as entries:
            return sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))

    def read_bytes(self, path: str) -> bytes | None:
        try:
            return self._path(path).read_bytes()
        except FileNotFoundError:
            return None

    def write_bytes(self, path: str, data: bytes) -> None:
        """Atomic: readers see the old file or the whole new one."""
        target = self._path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f"{target.name}{PARTIAL_SUFFIX}")
        with open(partial, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, target)

    def put_file(self, local: Path, path: str) -> None:
        target = self._path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        if local.resolve() == target.resolve():
            return
        try:
            os.replace(local, target)  # same filesystem: a rename, no copy
        except OSError:
            shutil.copyfile(local, target)

    def get_tree(self, prefix: str, local: Path) -> None:
        """Copies the regular files under ``prefix``; a symlink or special
        file anywhere in it is refused (UnsafeEntry), not followed or opened.
        Walked by directory descriptors, so nothing swapped in meanwhile is
        followed either."""
        source = self._path(prefix)
        if source.is_symlink():
            raise UnsafeEntry(f"{self.uri}: '{prefix}' is a symlink")
        for folder, _, names, folder_fd in os.fwalk(source, follow_symlinks=False):
            with os.scandir(folder_fd) as entries:
                links = [entry.name for entry in entries if entry.is_symlink()]
            if links:
                raise UnsafeEntry(f"{self.uri}: {folder}/{links[0]} is a symlink")
            target = local / Path(folder).relative_to(source)
            target.mkdir(parents=True, exist_ok=True)
            for name in names:
                _copy_regular_file(name, folder_fd, target / name, f"{self.uri}: {folder}/{name}")

    def sizes(self, prefix: str) -> dict[str, int]:
        base = self._path(prefix)
        return {
            file.relative_to(base).as_posix(): file.stat().st_size
            for file in _walk(base)
            if not file.name.endswith(PARTIAL_SUFFIX)
        }

    def delete_tree(self, prefix: str) -> None:
        shutil.rmtree(self._path(prefix), ignore_errors=True)

    def delete(self, path: str) -> None:
        self._path(path).unlink(missing_ok=True)

    def local_folder(self, prefix: str) -> Path:
        """Where files under ``prefix`` can be written in place."""
        return self._path(prefix)


def _copy_regular_file(name: str, folder_fd: int, target: Path, described: str) -> None:
    """Copies ``name`` in the open folder ``folder_fd`` when it is a regular
    file: not a symlink (O_NOFOLLOW), not a FIFO or device (which could block
    or never end)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder_fd)
    except OSError as exc:
        raise UnsafeEntry(
            f"{described} cannot be opened as a plain file ({exc.strerror})"
        ) from None
    with open(fd, "rb") as source:
        if not stat.S_ISREG(os.fstat(source.fileno()).st_mode):
            raise UnsafeEntry(f"{described} is not a regular file")
        with open(target, "wb") as copy:
            shutil.copyfileobj(source, copy, 4 * 1024 * 1024)


def _walk(base: Path) -> Iterator[Path]:
    """The regular files under ``base``; symlinks are not ours to count."""
    if not base.is_dir():
        return
    for dirpath, _, filenames in os.walk(base):
        for name in filenames:
            path = Path(dirpath) / name
            if not path.is_symlink():
                yield path


# Files over this go up in parts, several at once, each with its own
# checksum; a failed part is retried alone.
MULTIPART_THRESHOLD_BYTES = 64 * 1024 * 1024
MULTIPART_CONCURRENCY = 8


class S3Storage:
    def __init__(
        self,
        uri: str,
        client: Any | None = None,
        *,
        multipart_threshold: int = MULTIPART_THRESHOLD_BYTES,
    ) -> None:
        parsed = urlparse(uri)
        self.uri = uri.rstrip("/")
        self.bucket = parsed.netloc
        self.prefix = parsed.path.strip("/")
        self.client = client or s3_client()
        self.multipart_threshold = multipart_threshold

    def _key(self, path: str) -> str:
        return "/".join(part for part in (self.prefix, path) if part)

    def _keys(self, prefix: str) -> list[dict[str, Any]]:
        base = self._key(prefix).rstrip("/") + "/"
        return [entry for page in self._pages(Prefix=base) for entry in page.get("Contents", [])]

    def _pages(self, **kwargs: Any) -> list[dict[str, Any]]:
        paginator = self.client.get_paginator("list_objects_v2")
        # The pages are fetched while iterating: inside _call, so a failure
        # becomes a StorageError naming this storage.
        return self._call(lambda: list(paginator.paginate(Bucket=self.bucket, **kwargs)))

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(*args, **kwargs)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                raise FileNotFoundError(self.uri) from exc
            raise StorageError(f"{self.uri}: {exc}") from exc
        except BotoCoreError as exc:
            raise StorageError(f"{self.uri}: {exc}") from exc

    def child_folders(self) -> list[str]:
        base = self._key("").rstrip("/")
        base = base + "/" if base else ""
        folders = []
        for page in self._pages(Prefix=base, Delimiter="/"):
            for entry in page.get("CommonPrefixes", []):
                folders.append(entry["Prefix"][len(base) :].rstrip("/"))
        return sorted(folders)

    def read_bytes(self, path: str) -> bytes | None:
        try:
            answer = self._call(self.client.get_object, Bucket=self.bucket, Key=self._key(path))
        except FileNotFoundError:
            return None
        return answer["Body"].read()

    def write_bytes(self, path: str, data: bytes) -> None:
        # A PUT is atomic: the object appears whole or not at all.
        self._call(
            self.client.put_object,
            Bucket=self.bucket,
            Key=self._key(path),
            Body=data,
            ChecksumAlgorithm="SHA256",
        )

    def put_file(self, local: Path, path: str) -> None:
        from boto3.s3.transfer import TransferConfig

        config = TransferConfig(
            multipart_threshold=self.multipart_threshold,
            multipart_chunksize=self.multipart_threshold,
            max_concurrency=MULTIPART_CONCURRENCY,
        )
        # S3 computes SHA-256 over what it received and refuses the upload
        # (or the part) when it differs from the checksum sent with it.
        self._call(
            self.client.upload_file,
            str(local),
            self.bucket,
            self._key(path),
            ExtraArgs={"ChecksumAlgorithm": "SHA256"},
            Config=config,
        )

    def get_tree(self, prefix: str, local: Path) -> None:
        """Downloads every object under ``prefix`` to the same relative path
        under ``local``. A key that would land outside ``local`` (``..``, an
        empty or absolute segment) is refused (UnsafeEntry) before anything
        is written; folder markers (keys ending in ``/``) are skipped."""
        base = self._key(prefix).rstrip("/") + "/"
        downloads = []
        for entry in self._keys(prefix):
            relative = entry["Key"][len(base) :]
            if not relative or relative.endswith("/"):
                continue
            try:
                parts = relative_parts(relative)
            except UnsafePath as exc:
                raise UnsafeEntry(f"{self.uri}: key {entry['Key']!r}: {exc}") from None
            downloads.append((entry, local.joinpath(*parts)))
        for entry, target in downloads:
            target.parent.mkdir(parents=True, exist_ok=True)
            self._call(self.client.download_file, self.bucket, entry["Key"], str(target))

    def sizes(self, prefix: str) -> dict[str, int]:
        base = self._key(prefix).rstrip("/") + "/"
        return {entry["Key"][len(base) :]: entry["Size"] for entry in self._keys(prefix)}

    def delete_tree(self, prefix: str) -> None:
        keys = [{"Key": entry["Key"]} for entry in self._keys(prefix)]
        for start in range(0, len(keys), 1000):
            self._call(
                self.client.delete_objects,
                Bucket=self.bucket,
                Delete={"Objects": keys[start : start + 1000], "Quiet": True},
            )

    def delete(self, path: str) -> None:
        self._call(self.client.delete_object, Bucket=self.bucket, Key=self._key(path))

    def check_writable(self) -> None:
        """Write and remove a small object under the prefix: proves the bucket
        exists and these credentials may write there. Raises StorageError
        saying which of those failed."""
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        probe = self._key(f".trainplane-write-check-{os.urandom(6).hex()}")
        try:
            self.client.put_object(
                Bucket=self.bucket, Key=probe, Body=b"", ChecksumAlgorithm="SHA256"
            )
            self.client.delete_object(Bucket=self.bucket, Key=probe)
        except NoCredentialsError:
            raise StorageError(f"{self.uri}: no S3 credentials were found") from None
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("NoSuchBucket", "404"):
                raise StorageError(f"{self.uri}: bucket '{self.bucket}' does not exist") from None
            if code in _REFUSED_CODES:
                raise StorageError(
                    f"{self.uri}: S3 refused to let these credentials write to bucket "
                    f"'{self.bucket}' ({code})"
                ) from None
            raise StorageError(f"{self.uri}: {exc}") from None
        except BotoCoreError as exc:
            raise StorageError(f"{self.uri}: cannot reach S3: {exc}") from None


# What S3 and compatible stores answer for bad or insufficient credentials.
_REFUSED_CODES = frozenset(
    {
        "403",
        "AccessDenied",
        "AllAccessDisabled",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
    }
)


def s3_client(*, max_attempts: int = 10, timeout_seconds: float | None = None) -> Any:
    """Adaptive retries for transfers; a check at submit time asks for few
    attempts and short timeouts, so that a wrong endpoint fails in seconds."""
    import boto3
    from botocore.config import Config

    timeouts = (
        {"connect_timeout": timeout_seconds, "read_timeout": timeout_seconds}
        if timeout_seconds
        else {}
    )
    config = Config(retries={"max_attempts": max_attempts, "mode": "adaptive"}, **timeouts)
    # A session of its own: boto3's default one keeps the first credentials
    # it found for the life of the process.
    return boto3.session.Session().client("s3", config=config)


def open_storage(uri: str) -> Storage:
    """``s3://bucket/prefix`` or an absolute local path."""
    if uri.startswith("s3://"):
        if not urlparse(uri).netloc:
            raise StorageError(f"{uri}: no bucket in the URI")
        return S3Storage(uri)
    if uri.startswith("file://"):
        uri = urlparse(uri).path
    if not os.path.isabs(uri):
        raise StorageError(f"{uri}: storage must be s3://bucket/prefix or an absolute path")
    return LocalStorage(uri)


def join(uri: str, *parts: str) -> str:
    return "/".join([uri.rstrip("/"), *(part.strip("/") for part in parts)])
