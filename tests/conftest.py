from __future__ import annotations

from collections.abc import Iterator

import pytest
from distributed import Client, LocalCluster

from dmlsearch.testing import local_cluster


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    cl = local_cluster(2)
    yield cl
    cl.close()


@pytest.fixture(scope="session")
def client(cluster: LocalCluster) -> Iterator[Client]:
    """A client on the shared 2-worker process cluster (not the default client)."""
    with Client(cluster, set_as_default=False) as c:
        yield c


@pytest.fixture
def fresh_cluster() -> Iterator[LocalCluster]:
    """A private cluster for tests that kill or restart workers."""
    cl = local_cluster(2)
    yield cl
    cl.close()
