"""Whether a location lies inside another, and relative paths that cannot leave
their folder.

Two uses, one rule set. The control plane decides whether a spec may name a
location (a job's folder under its project's storage root, a dataset under a
server-paths root): ``within`` compares after resolving symlinks, on path
segment boundaries, so ``/data/alpha-old`` is not under ``/data/alpha``. And
whatever a job wrote (manifest entries, S3 keys, artifact names) is tenant
data: ``relative_parts`` turns such a string into path segments only when it
cannot climb out of the folder it is joined to (no ``..``, no absolute path,
no NUL). Symlinks are the storages' business (``storage.backends``): they are
resolved or refused where files are opened.
"""

from __future__ import annotations

import os
from urllib.parse import urlparse

S3_SCHEME = "s3://"


class UnsafePath(ValueError):
    """A path that would lead outside its folder; the message says why."""


def relative_parts(path: str) -> list[str]:
    """The segments of the relative, ``/``-separated ``path``. Refuses
    anything that could name something outside the folder it is joined to,
    or two names for one file: an absolute path, ``..`` or ``.`` segments,
    empty segments (``a//b``) and NUL."""
    if "\x00" in path:
        raise UnsafePath(f"{path!r} contains a NUL character")
    if path.startswith("/"):
        raise UnsafePath(f"'{path}' is an absolute path; a relative one is expected")
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise UnsafePath(f"'{path}' has an empty, '.' or '..' segment")
    return parts


def has_dot_segments(location: str) -> bool:
    """``location`` (a path or an s3:// URI) has a ``.`` or ``..`` segment:
    refused in a spec before any comparison, whatever it would resolve to."""
    path = urlparse(location).path if location.startswith(S3_SCHEME) else location
    return any(part in (".", "..") for part in path.split("/"))


def resolved(path: str) -> str:
    """``path`` with every symlink resolved (of the part that exists) and no
    ``.``/``..`` left: what it names on this machine now."""
    return os.path.realpath(path)


def within(location: str, root: str) -> bool:
    """Whether ``location`` is ``root`` or lies under it: both local paths
    (compared once symlinks are resolved) or both s3:// URIs (same bucket, the
    key under the root's prefix on a ``/`` boundary). Reads no file contents
    and makes no S3 call."""
    if location.startswith(S3_SCHEME) or root.startswith(S3_SCHEME):
        return _s3_within(location, root)
    if not (os.path.isabs(location) and os.path.isabs(root)):
        return False
    return local_within(location, root)


def local_within(path: str, root: str) -> bool:
    """Whether the local ``path`` is ``root`` or under it, once both have
    their symlinks resolved."""
    path, root = resolved(path), resolved(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


def _s3_within(uri: str, root: str) -> bool:
    if not (uri.startswith(S3_SCHEME) and root.startswith(S3_SCHEME)):
        return False
    location, base = urlparse(uri), urlparse(root)
    if not location.netloc or location.netloc != base.netloc:
        return False
    key, prefix = location.path.strip("/"), base.path.strip("/")
    return not prefix or key == prefix or key.startswith(prefix + "/")
