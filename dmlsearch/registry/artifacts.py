"""Content-addressed artifact store on any fsspec filesystem, verified on every load.

A blob lives at ``<root>/<sha[:2]>/<sha>``: identical models are stored once, a path can
never point at other bytes than its name says, and every read is checked against the
sha256 recorded in the registry database.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from typing import Any

import fsspec

from ..exceptions import DmlsearchError

__all__ = ["ArtifactIntegrityError", "ArtifactStore", "default_artifacts_url"]


class ArtifactIntegrityError(DmlsearchError):
    """An artifact's bytes do not match the sha256 the registry recorded (tampered or truncated)."""


def default_artifacts_url() -> str:
    """``DMLSEARCH_ARTIFACTS`` or a folder ``dmlsearch-artifacts`` in the working directory."""
    return os.environ.get("DMLSEARCH_ARTIFACTS") or os.path.join(os.getcwd(), "dmlsearch-artifacts")


class ArtifactStore:
    """Blobs keyed by their sha256 on the filesystem that ``url`` names (local path, s3://, ...)."""

    def __init__(self, url: str | None = None, **storage_options: Any) -> None:
        self.url = url or default_artifacts_url()
        self.fs, self.root = fsspec.core.url_to_fs(self.url, **storage_options)
        self.root = self.root.rstrip("/")
        self.protocol = (
            self.fs.protocol if isinstance(self.fs.protocol, str) else self.fs.protocol[0]
        )

    def _path(self, digest: str) -> str:
        return f"{self.root}/{digest[:2]}/{digest}"

    def uri(self, digest: str) -> str:
        path = self._path(digest)
        return path if self.protocol in ("file", "local") else f"{self.protocol}://{path}"

    def put(self, data: bytes) -> tuple[str, str]:
        """Store ``data``; returns ``(uri, sha256)``. Writing the same bytes twice is a no-op."""
        digest = hashlib.sha256(data).hexdigest()
        path = self._path(digest)
        if not self.fs.exists(path):
            self.fs.makedirs(f"{self.root}/{digest[:2]}", exist_ok=True)
            # Write aside, then move: a crash never leaves a partial blob under its final name.
            tmp = f"{path}.tmp-{uuid.uuid4().hex}"
            with self.fs.open(tmp, "wb") as fh:
                fh.write(data)
            self.fs.mv(tmp, path)
        return self.uri(digest), digest

    def get(self, digest: str) -> bytes:
        """The bytes of ``digest``; raises :class:`ArtifactIntegrityError` if they do not match."""
        path = self._path(digest)
        try:
            with self.fs.open(path, "rb") as fh:
                data: bytes = fh.read()
        except FileNotFoundError as exc:
            raise ArtifactIntegrityError(
                f"artifact {digest} is missing from {self.url}; it was deleted or the "
                "artifact store URL points elsewhere"
            ) from exc
        actual = hashlib.sha256(data).hexdigest()
        if actual != digest:
            raise ArtifactIntegrityError(
                f"artifact {digest} is corrupt: its bytes hash to {actual}; refusing to load it"
            )
        return data

    def verify(self, digest: str) -> bool:
        """Whether the blob exists and matches its name."""
        try:
            self.get(digest)
        except ArtifactIntegrityError:
            return False
        return True

    def digests(self) -> set[str]:
        """Every blob in the store."""
        if not self.fs.exists(self.root):
            return set()
        out = set()
        for path in self.fs.find(self.root):
            name = path.rstrip("/").rsplit("/", 1)[-1]
            if len(name) == 64 and all(c in "0123456789abcdef" for c in name):
                out.add(name)
        return out

    def delete(self, digest: str) -> None:
        path = self._path(digest)
        if self.fs.exists(path):
            self.fs.rm(path)
