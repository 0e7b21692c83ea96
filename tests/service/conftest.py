"""Service fixtures: the async tests run on asyncio. The harness itself (apps, fake, gate) is tests.service.harness."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
