"""Service fixtures: the async tests run on asyncio. The harness itself (apps, fake, gate) is tests.service.harness."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def models_dir(tmp_path: Path, tiny_model_dir: Path, tiny_fr_model_dir: Path, marian_es_model_dir: Path) -> Path:
    """A directory of three model directories (en<->de, en<->fr, and a converted Marian en->es), copied so that a
    test may change them."""
    root = tmp_path / "models"
    for name, source in (("de", tiny_model_dir), ("fr", tiny_fr_model_dir), ("es", marian_es_model_dir)):
        shutil.copytree(source, root / name)
    return root


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Debian's Chromium, headless, through chromium-driver (never a downloaded browser)."""
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("Debian chromium/chromium-driver are not installed (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tmp_path_factory.mktemp("chromium-profile")
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1100,720",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)
