"""Content-addressed artifact store on any fsspec filesystem, verified on every load.

A blob lives at ``<root>/<namespace>/<sha[:2]>/<sha>``, where the namespace is the id of the
registry that wrote it: registries that share a store (two SQLite files in one folder, every
PostgreSQL registry on one bucket) never see, let alone collect, each other's blobs.
Identical bytes of one registry are stored once, a path can never point at other bytes
than its name says, and every read is checked against the sha256 recorded in the registry.

Blobs written before namespaces existed live at ``<root>/<sha[:2]>/<sha>``; they are still
read, but never garbage-collected (any registry sharing the store may use them).
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import os
import re
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import fsspec

from ..exceptions import DmlsearchError, InvalidParameterError
from ._base import RegistryError

__all__ = [
    "ArtifactIntegrityError",
    "ArtifactLocationError",
    "ArtifactStore",
    "ArtifactWriteError",
    "Blob",
    "check_location",
    "default_artifacts_url",
    "local_path",
    "location_protocols",
    "unknown_protocol",
]

_HEX = frozenset("0123456789abcdef")
_TMP = ".tmp-"
# ``<sha>.gc-<uuid>``: a blob a gc moved aside while it reads the references again.
_ASIDE = ".gc-"
_CHUNK = 1 << 20
# Writes of one blob before giving up on a temporary file that keeps vanishing.
_WRITE_ATTEMPTS = 5
# fsspec protocols whose filesystems can only be read (a store is written: models,
# checkpoints, state copies); refused at open instead of failing at the first write.
_READ_ONLY = frozenset(
    {"http", "https", "zip", "tar", "libarchive", "github", "git", "gist", "data", "reference",
     "dvc"}
)  # fmt: skip
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*")


class ArtifactIntegrityError(DmlsearchError):
    """An artifact is missing, or its bytes do not match the sha256 the registry recorded."""


class ArtifactLocationError(RegistryError, InvalidParameterError):
    """An artifact store location that cannot work (``param`` is ``"artifacts"``)."""


class ArtifactWriteError(RegistryError):
    """The artifact store cannot be written: no permission, a full disk, a read-only file
    system. Nothing was registered; the message names the location and what to do."""


def default_artifacts_url() -> str:
    """``DMLSEARCH_ARTIFACTS`` or a folder ``dmlsearch-artifacts`` in the working directory."""
    return os.environ.get("DMLSEARCH_ARTIFACTS") or os.path.join(os.getcwd(), "dmlsearch-artifacts")


def local_path(location: str) -> str | None:
    """The local path a ``file:`` (or fsspec's ``local:``) URL names, decoded as RFC 8089
    says (``file:///tmp/a%20b`` is ``/tmp/a b``); None for any other location.

    A file URL's authority is a host: ``file://localhost/x`` is ``/x``, and one naming
    another host (``file://models/x``, often meant as a relative path) is refused.
    """
    scheme, colon, _ = location.partition(":")
    if not colon or scheme.lower() not in ("file", "local"):
        return None
    parts = urllib.parse.urlsplit(location)
    if parts.netloc not in ("", "localhost"):
        raise ArtifactLocationError(
            "artifacts",
            f"cannot use {location!r} as an artifact store: a file URL's first part after "
            f"// is a host (RFC 8089), here {parts.netloc!r}; write file:///absolute/path "
            "(three slashes), or a plain path (a relative one is made absolute)",
        )
    return urllib.request.url2pathname(parts.path) or "/"


def _bare_protocol(piece: str) -> bool:
    """Whether ``piece`` (of a ``::`` chain) is the name of an fsspec protocol alone."""
    return bool(_NAME.fullmatch(piece)) and piece in fsspec.available_protocols()


def location_protocols(location: str) -> list[str]:
    """The fsspec protocols a store location names, outermost first: ``["s3"]`` for
    ``s3://bucket/x``, ``["simplecache", "s3"]`` for ``simplecache::s3://bucket/x``, and
    none for a plain path, which is a local folder as written (``/data/a::b`` included:
    fsspec would read ``::`` as a chain of filesystems).

    ``::`` chains filesystems only after protocol names (``simplecache::``); a URL with
    ``::`` further on (``s3://bucket/a::b``) is refused by :func:`check_location`.
    """
    pieces = location.split("::")
    if "://" not in pieces[0] and not (len(pieces) > 1 and _bare_protocol(pieces[0])):
        return []  # a plain path, '::' in a name perhaps
    protocols = []
    for i, piece in enumerate(pieces):
        scheme = piece.split("://", 1)[0] if "://" in piece else None
        if scheme is None and i < len(pieces) - 1 and _bare_protocol(piece):
            protocols.append(piece)
        elif scheme is not None and _NAME.fullmatch(scheme):
            protocols.append(scheme)
    return protocols


def unknown_protocol(location: str) -> str | None:
    """The first fsspec protocol ``location`` names that fsspec does not know (a typo), or
    None. :func:`check_location` leaves these to the filesystem lookup; a check that must
    not wait for it (a file being validated, a state store the workers open) asks here."""
    return next(
        (p for p in location_protocols(location) if p not in fsspec.available_protocols()), None
    )


def check_location(
    location: str, param: str = "artifacts", what: str = "an artifact store"
) -> None:
    """Refuse a store location that would not be used as written, or cannot be written:
    ``::`` in a URL's path (fsspec would cut it there), ``s3:models`` (no ``//``: a local
    folder named ``s3:models``), a read-only fsspec protocol (``http://``, ``zip://``).

    Only names are checked (nothing is imported or contacted); an unknown protocol is
    left to the filesystem lookup, which names it.
    """
    where = f"cannot use {location!r} as {what}"
    protocols = location_protocols(location)
    pieces = location.split("::")
    if protocols and not all(_bare_protocol(p) for p in pieces[:-1]):
        raise ArtifactLocationError(
            param,
            f"{where}: fsspec reads '::' as a link of a chain of filesystems (A::B), so a "
            "path with '::' in it would not be used as written; chain only with protocol "
            "prefixes (simplecache::s3://bucket/models), and name the store without '::'",
        )
    scheme = _NAME.match(location)
    bare = None
    if not protocols and scheme is not None and location[scheme.end() :][:1] == ":":
        name = scheme.group().lower()
        if name not in ("file", "local") and _bare_protocol(name):
            bare = name  # s3:models: a protocol without '//'
    for protocol in [*protocols, *([bare] if bare else [])]:
        if protocol.lower() in _READ_ONLY:
            raise ArtifactLocationError(
                param,
                f"{where}: fsspec's {protocol}:// filesystem can only be read, and the store "
                "is written (models, checkpoints, state copies); give a folder or a "
                "writable fsspec URL (s3://, gs://, az://, ...)",
            )
    if bare is not None:
        rest = location[len(bare) + 1 :].lstrip("/")
        raise ArtifactLocationError(
            param,
            f"{where}: '{bare}:' without '//' would be a local folder named "
            f"{location!r}, not an fsspec {bare}:// URL; write {bare}://{rest} for that "
            f"store, or ./{location} for a local folder",
        )


def _reason(exc: BaseException) -> str:
    """An exception of a storage backend (botocore's, aiohttp's...) on one line."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _is_digest(name: str) -> bool:
    return len(name) == 64 and set(name) <= _HEX


@dataclass(frozen=True)
class Blob:
    """One file of the store: a blob (``digest`` set), a temporary file left by a crash, or
    a blob a gc moved aside and has not yet deleted or put back (``aside``: its digest)."""

    path: str
    digest: str | None
    mtime: float | None
    aside: str | None = None


def _timestamp(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        return value.timestamp()
    if isinstance(value, str):
        try:
            return _timestamp(datetime.datetime.fromisoformat(value.replace("Z", "+00:00")))
        except ValueError:
            return None
    return None


def _mtime(info: dict[str, Any]) -> float | None:
    """When a file was last written, from an fsspec info dict (keys differ per backend)."""
    for key in ("mtime", "LastModified", "last_modified", "updated", "modified", "created"):
        stamp = _timestamp(info.get(key))
        if stamp is not None:
            return stamp
    return None


class ArtifactStore:
    """Blobs keyed by their sha256 on the filesystem that ``url`` names (local path, s3://, ...).

    ``namespace`` (the registry's id) is the folder under ``url`` that this store writes,
    lists and collects; without one the store uses the layout of old registries. ``hint`` is
    appended to every "missing" message (the registry says where it keeps its artifacts).
    """

    def __init__(
        self, url: str | None = None, *, namespace: str | None = None, **storage_options: Any
    ) -> None:
        self.url = url or default_artifacts_url()
        # fsspec would keep %-escapes and read file://name/x as a relative path.
        self.url = local_path(self.url) or self.url
        self.namespace = namespace
        self.hint = ""
        #: The fsspec options of the store (an endpoint, credentials): passed to the
        #: filesystem and to the workers that write to it, never shown or recorded.
        self.storage_options = dict(storage_options)
        check_location(self.url)
        try:
            if location_protocols(self.url):
                self.fs, self.root = fsspec.core.url_to_fs(self.url, **storage_options)
            else:
                # A plain path is the folder it names: fsspec would read '::' in it as a
                # chain of filesystems.
                self.fs = fsspec.filesystem("file", **storage_options)
                self.root = self.fs._strip_protocol(self.url)
        except Exception as exc:  # an unknown protocol, its package missing, a bad option
            reason = str(exc) if isinstance(exc, (ValueError, ImportError)) else _reason(exc)
            raise ArtifactLocationError(
                "artifacts",
                f"cannot use {self.url!r} as an artifact store: {reason}; give a folder or "
                "an fsspec URL such as s3://bucket/models (with its package installed, and "
                "storage_options= that its filesystem accepts)",
            ) from exc
        self.root = self.root.rstrip("/")
        self.protocol = (
            self.fs.protocol if isinstance(self.fs.protocol, str) else self.fs.protocol[0]
        )
        if self.protocol in ("file", "local"):
            self._check_folder()

    def check_writable(self) -> None:
        """Refuse a local root this process cannot create or write (a registry checks this
        before recording it). Remote stores are not contacted: they fail on first write."""
        if self.protocol not in ("file", "local"):
            return
        path = self.root
        while not os.path.exists(path) and os.path.dirname(path) != path:
            path = os.path.dirname(path)
        # access() sees what chmod does not stop root from: read-only mounts, chattr +i.
        if not os.access(path, os.W_OK | os.X_OK):
            raise ArtifactLocationError(
                "artifacts",
                f"cannot use {self.url!r} as an artifact store: this account cannot write "
                f"{path}; give a folder it can write (created if missing) or make that one "
                "writable",
            )

    def _check_folder(self) -> None:
        """Refuse a local root that is a file, or lies under one (checked before any write)."""
        path = self.root
        while not os.path.exists(path) and os.path.dirname(path) != path:
            path = os.path.dirname(path)
        if not os.path.isdir(path):
            raise ArtifactLocationError(
                "artifacts",
                f"cannot use {self.url!r} as an artifact store: {path} is a file, not a "
                "folder; give a folder (created if missing) or an fsspec URL",
            )

    def __repr__(self) -> str:
        return f"ArtifactStore({self.url!r}, namespace={self.namespace!r})"

    @property
    def base(self) -> str:
        """The folder this store writes to: ``<root>/<namespace>`` (or the root)."""
        return f"{self.root}/{self.namespace}" if self.namespace else self.root

    def _path(self, digest: str) -> str:
        return f"{self.base}/{digest[:2]}/{digest}"

    def _legacy_path(self, digest: str) -> str:
        return f"{self.root}/{digest[:2]}/{digest}"

    def _candidates(self, digest: str) -> list[str]:
        paths = [self._path(digest)]
        if self.namespace:
            paths.append(self._legacy_path(digest))
        return paths

    def show(self, path: str) -> str:
        """A path as users can paste it: plain for local files, ``protocol://`` otherwise."""
        return path if self.protocol in ("file", "local") else f"{self.protocol}://{path}"

    def uri(self, digest: str) -> str:
        """Where :meth:`put` stores ``digest``."""
        return self.show(self._path(digest))

    def put(self, data: bytes) -> tuple[str, str]:
        """Store ``data``; returns ``(uri, sha256)``.

        Writing bytes that are already there only refreshes the blob's modification time, so
        that a garbage collection running meanwhile sees it as young and leaves it alone. A
        blob already there whose size or sha256 is wrong (truncated by a full disk, a bad
        copy) is rewritten, so putting the same bytes again repairs it. Any failure of the
        backend (an OSError, botocore's EndpointConnectionError...) raises
        :class:`ArtifactWriteError` naming the store, chained to it.
        """
        digest = hashlib.sha256(data).hexdigest()
        path = self._path(digest)
        with self._failing(self._write_error, "store the model"):
            # Refresh first, then check: a blob a gc deleted in between is found missing
            # and written again, never committed as whatever the refresh left.
            if not (self._refresh(path) and self._intact(path, len(data), digest)):
                self._write(path, data)
        return self.uri(digest), digest

    @contextlib.contextmanager
    def _failing(
        self, error: Callable[[Exception, str], RegistryError], doing: str
    ) -> Iterator[None]:
        """Raise ``error(exc, doing)`` for any exception of the storage backend in the
        block (an OSError, botocore's EndpointConnectionError, ...), chained to it; ours
        (a DmlsearchError) and KeyboardInterrupt pass as they are."""
        try:
            yield
        except DmlsearchError:
            raise
        except Exception as exc:
            raise error(exc, doing) from exc

    def _place(self, exc: Exception) -> str:
        """Where a backend error happened: its file, else the store."""
        filename = getattr(exc, "filename", None)
        return self.show(filename) if isinstance(filename, str) else self.url

    def _write_error(self, exc: Exception, doing: str) -> ArtifactWriteError:
        """What a failed write or delete says: where, why, and what to do."""
        if isinstance(exc, OSError):
            reason = exc.strerror or str(exc) or type(exc).__name__
            advice = "make it writable (permissions, free space, a read-write mount)"
        else:  # not the file system's answer: the backend could not do it (a network error)
            reason = _reason(exc)
            advice = (
                "check that it can be reached and written (its endpoint, network and "
                "credentials: storage_options, or its backend's environment variables)"
            )
        return ArtifactWriteError(
            f"cannot {doing}: the artifact store {self.url} cannot be written "
            f"({self._place(exc)}: {reason}); {advice}, or open the registry with "
            "artifacts=ANOTHER_LOCATION (registry.artifacts in an experiment file) to use "
            "another store for that session"
        )

    def _read_error(self, exc: Exception, doing: str) -> RegistryError:
        """What a failed read says (not a missing file: :class:`ArtifactIntegrityError`)."""
        return RegistryError(
            f"cannot {doing}: the artifact store {self.url} cannot be read "
            f"({self._place(exc)}: {_reason(exc)}); check that it can be reached and read "
            "(its endpoint, network and credentials: storage_options, or its backend's "
            "environment variables), or open the registry with artifacts=ANOTHER_LOCATION "
            "if the artifacts moved"
        )

    def _intact(self, path: str, size: int, digest: str) -> bool:
        """Whether ``path`` holds ``size`` bytes hashing to ``digest``.

        The size (metadata only) rules out most damage; the hash is read only when it
        matches, which costs one read of a blob that is being registered again.
        """
        try:
            if self.fs.size(path) != size:
                return False
            sha = hashlib.sha256()
            with self.fs.open(path, "rb") as fh:
                while chunk := fh.read(_CHUNK):
                    sha.update(chunk)
        except FileNotFoundError:
            return False
        return sha.hexdigest() == digest

    def _write(self, path: str, data: bytes) -> None:
        for attempt in range(_WRITE_ATTEMPTS):
            self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
            # Write aside, then move: a crash never leaves a partial blob under its name.
            tmp = f"{path}{_TMP}{uuid.uuid4().hex}"
            try:
                with self.fs.open(tmp, "wb") as fh:
                    fh.write(data)
                self.fs.mv(tmp, path)
                return
            except FileNotFoundError:
                # A gc with no grace period took the temporary file (it cannot tell it
                # from a crashed write's): write it again.
                if attempt == _WRITE_ATTEMPTS - 1:
                    raise

    def _refresh(self, path: str) -> bool:
        """Bump the modification time of an existing blob; never creates one.

        False where the blob is missing or the backend cannot: the caller writes it then.
        Only local files are refreshed in place (``os.utime`` fails on a missing file);
        fsspec's ``touch(truncate=False)`` creates an empty file when the blob vanished
        since it was checked, so other backends rewrite the blob instead.
        """
        if self.protocol not in ("file", "local"):
            return False
        try:
            os.utime(path)
        except OSError:  # missing, or not ours to touch: writing it says which
            return False
        return True

    def locate(self, digest: str) -> str | None:
        """The path holding ``digest`` (this namespace first, then the old layout), or None."""
        with self._failing(self._read_error, f"look for artifact {digest}"):
            for path in self._candidates(digest):
                if self.fs.exists(path):
                    return path
        return None

    def exists(self, digest: str) -> bool:
        """Whether ``digest`` is stored (in this namespace or the old layout)."""
        return self.locate(digest) is not None

    def owns(self, digest: str) -> bool:
        """Whether ``digest`` is stored in this store's own folder (where :meth:`put` writes)."""
        with self._failing(self._read_error, f"look for artifact {digest}"):
            return bool(self.fs.exists(self._path(digest)))

    def get(self, digest: str, *, what: str = "") -> bytes:
        """The bytes of ``digest``; raises :class:`ArtifactIntegrityError` if they do not match.

        ``what`` names the artifact in messages (e.g. ``"of model 'clf' version 2"``).
        """
        label = f"artifact {digest}" + (f" {what}" if what else "")
        for path in self._candidates(digest):
            with self._failing(self._read_error, f"read {label}"):
                try:
                    with self.fs.open(path, "rb") as fh:
                        data: bytes = fh.read()
                except FileNotFoundError:
                    continue
            actual = hashlib.sha256(data).hexdigest()
            if actual != digest:
                raise ArtifactIntegrityError(
                    f"{label} at {self.show(path)} is corrupt: its bytes hash to {actual}; "
                    "refusing to load it"
                )
            return data
        looked = " or ".join(self.show(p) for p in self._candidates(digest))
        hint = self.hint or f"this artifact store is {self.url}"
        raise ArtifactIntegrityError(f"{label} is missing: no file at {looked}; {hint}")

    def problem(self, digest: str, *, what: str = "") -> str | None:
        """None if the blob exists and matches its name, else the message saying what is wrong.

        A store that cannot be read raises (RegistryError): that says nothing of the blob.
        """
        try:
            self.get(digest, what=what)
        except ArtifactIntegrityError as exc:
            return str(exc)
        return None

    def verify(self, digest: str) -> bool:
        """Whether the blob exists and matches its name."""
        return self.problem(digest) is None

    def blobs(self) -> list[Blob]:
        """Every file this store owns: its blobs and temporary files left by crashed writes.

        With a namespace that is everything under ``<root>/<namespace>``; without one, the
        files of the old layout ``<root>/<xx>/<sha>`` (never another registry's folder).
        """
        with self._failing(self._read_error, "list the stored blobs"):
            if not self.fs.exists(self.base):
                return []
            found: dict[str, Any] = self.fs.find(self.base, detail=True)
        out = []
        for path, info in sorted(found.items()):
            parts = path[len(self.base) :].strip("/").split("/")
            if len(parts) != 2 or len(parts[0]) != 2 or not set(parts[0]) <= _HEX:
                continue
            name = parts[1]
            if _is_digest(name):
                out.append(Blob(path, name, _mtime(info)))
            elif _TMP in name and _is_digest(name.split(_TMP, 1)[0]):
                out.append(Blob(path, None, _mtime(info)))
            elif _ASIDE in name and _is_digest(name.split(_ASIDE, 1)[0]):
                out.append(Blob(path, None, _mtime(info), aside=name.split(_ASIDE, 1)[0]))
        return out

    def digests(self) -> set[str]:
        """The sha256 of every blob this store owns (see :meth:`blobs`)."""
        return {b.digest for b in self.blobs() if b.digest is not None}

    def _age(self, path: str, now: float) -> float | None:
        try:
            stamp = _mtime(self.fs.info(path))
        except FileNotFoundError:
            return None
        return None if stamp is None else now - stamp

    def collect(
        self,
        references: Callable[[], set[str]],
        *,
        grace_seconds: float,
        dry_run: bool = False,
    ) -> list[str]:
        """Delete this store's blobs that ``references()`` does not name and older than
        ``grace_seconds``; returns the paths deleted (or, with ``dry_run``, that would be).

        Temporary files of crashed writes older than the grace period go too. A file whose
        age the backend does not tell is kept unless ``grace_seconds`` is 0. The store is
        listed before the references are read, so a version committed after that read
        refers to a blob listed as unreferenced at worst, never to one written later. Each
        such blob's age is read again (a registration may have just refreshed it), then it
        is moved aside; the references are read once more and the blobs now referenced are
        put back, the rest deleted. A registration committing after that last read finds
        its blob gone when it checks after committing, and writes it again.
        """
        failed: list[Exception] = []  # the references' own error, not the store's

        def read() -> set[str]:
            try:
                return references()
            except Exception as exc:
                failed.append(exc)
                raise

        try:
            return self._collect(read, grace_seconds, dry_run)
        except Exception as exc:
            if exc in failed or isinstance(exc, DmlsearchError):
                raise
            raise self._write_error(exc, "delete unreferenced blobs") from exc

    def _collect(
        self, references: Callable[[], set[str]], grace_seconds: float, dry_run: bool
    ) -> list[str]:
        listed = self.blobs()
        referenced = references()
        moved: list[tuple[str, str, str]] = []  # (path, digest, where it was moved aside)
        removed = []
        for blob in listed:
            if blob.digest is not None and blob.digest in referenced:
                continue
            if blob.aside is not None and blob.aside in referenced:
                # Left aside by a gc that did not finish; a version uses it.
                if not dry_run:
                    self._put_back(blob.path, blob.aside)
                continue
            if grace_seconds > 0:
                age = self._age(blob.path, time.time())
                if age is None or age < grace_seconds:
                    continue
            if dry_run:
                removed.append(self.show(blob.path))
            elif blob.digest is None:  # no version refers to a file by this name
                if self._remove(blob.path):
                    removed.append(self.show(blob.path))
            else:
                aside = f"{blob.path}{_ASIDE}{uuid.uuid4().hex}"
                try:
                    self.fs.mv(blob.path, aside)
                except FileNotFoundError:  # another gc took it first
                    continue
                moved.append((blob.path, blob.digest, aside))
        if moved:
            referenced = references()
        for path, digest, aside in moved:
            if digest in referenced:
                self._put_back(aside, digest)  # registered while this gc ran
            elif self._remove(aside):
                removed.append(self.show(path))
        return removed

    def _put_back(self, aside: str, digest: str) -> None:
        """Return a blob moved aside to its name, unless a registration wrote it again."""
        path = self._path(digest)
        try:
            if self.fs.exists(path):
                self.fs.rm(aside)
            else:
                self.fs.mv(aside, path)
        except FileNotFoundError:  # another gc dealt with it
            pass

    def _remove(self, path: str) -> bool:
        """Delete ``path``; False if it was already gone."""
        try:
            self.fs.rm(path)
        except FileNotFoundError:
            return False
        return True

    def delete(self, digest: str) -> None:
        """Delete ``digest`` from this namespace (never from the old shared layout)."""
        with self._failing(self._write_error, f"delete artifact {digest}"):
            self._remove(self._path(digest))
