"""The ``cluster:`` and ``registry:`` sections: where trials run and where they are recorded.

Separate from the search sections because they describe the environment of a run, not
what it searches; both a search and a training job use them.
"""

from __future__ import annotations

import ipaddress
import math
import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator, model_validator

from ._common import _err, _Problems, _short
from ._data_model import NonNegInt, PosInt, Seconds, _check_kwargs, _Section
from ._imports import _base_dir, _import, _ImportFailed

__all__ = ["AdaptSection", "ClusterSection", "LocalClusterSection", "RegistrySection"]


_MEMORY_LIMIT_ALLOWED = (
    "expected a size such as 4GiB or 500MB, a fraction of this machine's memory (0.5), auto "
    "(the machine's memory shared among the workers) or 0 for no limit"
)


def _memory_limit(value: Any) -> Any:
    """What distributed's ``parse_memory_limit`` takes, checked before any worker starts.

    None and 0 mean no limit, ``auto`` the machine's share, a number <= 1 a fraction of the
    machine's memory, a larger number bytes, and a string a size (``dask.utils.parse_bytes``);
    a negative or non-finite value would only fail once the workers start.
    """
    if value is None or value == "auto":
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise _err(f"{_MEMORY_LIMIT_ALLOWED}, got {_short(value)!r}")
    number: float | None
    try:
        number = float(value)  # distributed reads "0.5" and 0.5 alike
    except ValueError:
        number = None
    if number is None:
        from dask.utils import parse_bytes

        try:
            number = float(parse_bytes(str(value)))
        except (ValueError, TypeError):
            raise _err(f"{_MEMORY_LIMIT_ALLOWED}, got {value!r}") from None
    if not math.isfinite(number) or number < 0:
        what = "negative" if number < 0 else "not finite"
        raise _err(f"{value!r} is {what}: {_MEMORY_LIMIT_ALLOWED}")
    return value


class LocalClusterSection(_Section):
    """A LocalCluster of worker processes on this machine, started for the run."""

    n_workers: PosInt | None = None
    threads_per_worker: PosInt = 1
    memory_limit: Annotated[Any, BeforeValidator(_memory_limit)] = None


class AdaptSection(_Section):
    """``cluster.adapt(minimum=..., maximum=...)`` for a cluster class that can adapt."""

    minimum: NonNegInt = 0
    maximum: PosInt

    @model_validator(mode="after")
    def _check(self) -> AdaptSection:
        if self.minimum > self.maximum:
            raise _err(f"minimum ({self.minimum}) is greater than maximum ({self.maximum})")
        return self


# A host is a name or IPv4 address (no ':' or '/') or a bracketed IPv6 address
# (tcp://[::1]:8786), with an optional port.
_ADDRESS = re.compile(
    r"^(?:(?:tcp|tls|ucx|ws|wss|inproc)://)?(?:[^\s/:\[\]]+|\[(?P<ipv6>[^\s/\[\]]+)\])"
    r"(?::(?P<port>\d{1,5}))?/?$|^inproc://\S+$"
)


class ClusterSection(_Section):
    """Where trials run: one of ``local``, ``address`` or ``class``.

    Leave the whole section out for the embedded default (a LocalCluster sized to the
    machine, started and closed by the search).
    """

    local: LocalClusterSection | None = None
    address: str | None = None
    cls: str | None = Field(None, alias="class")
    kwargs: dict[str, Any] = Field(default_factory=dict)
    scale: PosInt | None = None
    adapt: AdaptSection | None = None
    connect_timeout: Seconds = 30.0

    @field_validator("address", mode="after")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is None:
            return None
        match = _ADDRESS.match(value.strip())
        if not match:
            raise _err(
                "expected a scheduler address such as tcp://10.0.0.5:8786 or "
                f"tcp://[::1]:8786, got {value!r}"
            )
        if match.group("ipv6") is not None:
            try:
                ipaddress.IPv6Address(match.group("ipv6"))
            except ValueError:
                raise _err(
                    f"not an IPv6 address between the brackets of {value!r} (e.g. tcp://[::1]:8786)"
                ) from None
        port = match.group("port")
        if port is not None and not 1 <= int(port) <= 65535:
            raise _err(f"port {int(port)} is out of range: expected 1 to 65535, in {value!r}")
        return value.strip()

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> ClusterSection:
        problems = _Problems()
        given = [
            k
            for k, v in (("local", self.local), ("address", self.address), ("class", self.cls))
            if v is not None
        ]
        if len(given) != 1:
            problems.add(
                (given[1],) if len(given) > 1 else (),
                "give exactly one of local (a LocalCluster), address (a running scheduler) or "
                f"class (e.g. dask_jobqueue.SLURMCluster); got {given or 'none'}. Leave the "
                "section out for the embedded default",
            )
        if self.address is None and "connect_timeout" in self.model_fields_set:
            # Only a running scheduler is connected to; a started cluster ignores it.
            problems.add(("connect_timeout",), "only used with cluster.address")
        if self.cls is None:
            for key in ("kwargs", "scale", "adapt"):
                if getattr(self, key):
                    problems.add((key,), "only used with cluster.class")
        else:
            if self.scale is not None and self.adapt is not None:
                problems.add(("adapt",), "give scale or adapt, not both")
            try:
                cls = _import(self.cls, _base_dir(info))
            except _ImportFailed as exc:
                problems.add(("class",), str(exc), self.cls)
            else:
                if not callable(cls):
                    problems.add(("class",), f"{self.cls} is not a cluster class", self.cls)
                else:
                    _check_kwargs(cls, self.kwargs, problems)
        problems.raise_if_any("ClusterSection")
        return self


class RegistrySection(_Section):
    """Where experiments and models are recorded.

    ``url``: a SQLAlchemy database URL (default ``$DMLSEARCH_REGISTRY``, else
    ``sqlite:///./dmlsearch.db`` in the working directory); ``artifacts``: a folder or
    fsspec URL for model files (default beside a SQLite database); ``storage_options``:
    the fsspec options of that store (an S3 ``endpoint_url``, ``profile``, ``anon``...),
    never recorded nor shown.
    """

    url: str | None = None
    artifacts: str | None = None
    storage_options: dict[str, Any] | None = Field(default=None, repr=False)

    @field_validator("artifacts", mode="after")
    @classmethod
    def _artifacts(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or "\x00" in value):
            raise _err(
                f"expected a folder or fsspec URL for model files (e.g. ./artifacts or "
                f"s3://bucket/models), got {value!r}; leave it out for the default"
            )
        if value is not None:
            from ..registry.artifacts import ArtifactLocationError, check_location, unknown_protocol

            try:  # s3:models (no //), '::' in a path, a read-only protocol
                check_location(value)
            except ArtifactLocationError as exc:
                raise _err(str(exc).removeprefix("artifacts: ")) from None
            # A typo in the protocol would otherwise only fail once the registry opens.
            protocol = unknown_protocol(value)
            if protocol is not None:
                raise _err(
                    f"unknown protocol {protocol!r} in {value!r}: expected a folder or an "
                    "fsspec URL (file://, s3://, gs://, az://, ...)"
                )
        return value

    @field_validator("storage_options", mode="before")
    @classmethod
    def _storage_options(cls, value: Any) -> Any:
        # Never echo the values: they may be credentials.
        if value is None:
            return None
        if not isinstance(value, dict):
            raise _err(
                "expected a mapping of fsspec storage options (e.g. {endpoint_url: "
                f"'http://minio:9000', anon: false}}), got a {type(value).__name__}"
            )
        for key in value:
            if not isinstance(key, str):
                raise _err(f"expected option names as keys, got {key!r}")
        return value

    @field_validator("url", mode="after")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            make_url(value)
        except (ArgumentError, ValueError):
            raise _err(
                f"not a database URL: {value!r} (e.g. sqlite:///dmlsearch.db or postgresql+psycopg://user@host/db)"
            ) from None
        return value
