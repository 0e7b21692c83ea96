"""Behind a reverse proxy that serves the server under a sub-path (https://example.com/mt/) and strips it from what it
passes on: `transduce serve --root-path /mt` (TRANSDUCE_ROOT_PATH). The API answers as at the root, the web page
calls it by relative URLs, /docs and translatedFileUrl carry the prefix, and requests are counted and logged."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.service.harness import EN_DE, FakeTranslator, IsolatedSettings, build_app, live_server, metric
from tests.service.test_connections import serving
from transduce.engine.translator import Translator
from transduce.serve_cli import server_config


def test_root_path_is_checked_and_reaches_uvicorn() -> None:
    assert IsolatedSettings(root_path=" /mt/ ").root_path == "/mt"
    assert IsolatedSettings(root_path="/api/mt-v2").root_path == "/api/mt-v2"
    assert IsolatedSettings(root_path="/").root_path == ""  # the root itself
    for bad in ("mt", "/m t", "/mt?x=1", "/mt#top", "//mt", "/mt//x", "/ü"):
        with pytest.raises(ValueError, match="root_path must be a path such as /mt"):
            IsolatedSettings(root_path=bad)
    app = build_app(root_path="/mt")
    assert server_config(app, app.state.transduce.settings).root_path == "/mt"


def test_behind_a_proxy_that_strips_the_prefix(caplog: pytest.LogCaptureFixture) -> None:
    """serve's own uvicorn configuration; the requests come as the proxy passes them on: without the prefix."""
    caplog.set_level(logging.INFO, logger="transduce.access")
    with serving(FakeTranslator(), root_path="/mt") as served:
        url = served.url
        r = httpx.post(f"{url}/translate", json={"q": "Hello.", **EN_DE})
        assert r.status_code == 200 and r.json()["translatedText"], r.text
        assert metric(httpx.get(f"{url}/metrics").text, "transduce_requests_total", status="200") == 1
        docs = httpx.get(f"{url}/docs").text
        assert "'/mt/openapi.json'" in docs or '"/mt/openapi.json"' in docs, docs[:500]
        assert "/mt/static-offline-docs/swagger-ui-bundle.js" in docs
        assert httpx.get(f"{url}/openapi.json").json()["servers"] == [{"url": "/mt"}]
        r = httpx.post(f"{url}/translate_file", data=EN_DE, files={"file": ("a.txt", b"Hi.")})
        link = r.json()["translatedFileUrl"]
        assert link.startswith(f"{url}/mt/download_file/"), link
        got = httpx.get(url + link.removeprefix(f"{url}/mt"))  # as the proxy passes the browser's request on
        assert got.status_code == 200 and got.text
        unstripped = httpx.get(f"{url}/mt/languages")  # a proxy that passes the prefix on: said so, not a bare 404
        assert unstripped.status_code == 404 and unstripped.json()["error"] == (
            "Not Found: this server is served under root_path /mt, which the proxy in front of it strips; this "
            "request still had it (strip it at the proxy, or unset TRANSDUCE_ROOT_PATH)"
        )
        assert httpx.get(f"{url}/nowhere").json() == {"error": "Not Found"}
    paths = [r.__dict__["fields"]["path"] for r in caplog.records if r.name == "transduce.access"]
    assert paths == ["/translate", "/translate_file"], paths


def test_the_page_works_under_a_sub_path(browser: Any, default_translator: Translator, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    with live_server(default_translator, sub_path="/mt") as url:
        assert url.endswith("/mt") and httpx.get(url.removesuffix("/mt") + "/languages").status_code == 404
        wait = WebDriverWait(browser, 30)
        browser.get(url + "/")
        wait.until(lambda d: len(Select(d.find_element(By.ID, "target")).options) > 0)
        assert browser.find_element(By.LINK_TEXT, "API docs").get_attribute("href") == url + "/docs"
        text = "In the beginning God created the heaven and the earth."
        expected = httpx.post(url + "/translate", json={"q": text, **EN_DE}).json()["translatedText"]
        browser.find_element(By.ID, "input").send_keys(text)
        browser.find_element(By.ID, "translate").click()
        wait.until(lambda d: d.find_element(By.ID, "output").get_attribute("value"))
        assert browser.find_element(By.ID, "output").get_attribute("value") == expected
        assert not browser.find_element(By.ID, "error").is_displayed()

        source = tmp_path / "genesis.txt"
        source.write_text(text)
        browser.find_element(By.ID, "tab-file").click()
        browser.find_element(By.ID, "file").send_keys(str(source))
        browser.find_element(By.ID, "translate-file").click()
        wait.until(lambda d: d.find_element(By.ID, "file-link").is_displayed())
        href = browser.find_element(By.ID, "file-link").get_attribute("href")
        assert re.fullmatch(re.escape(url) + r"/download_file/\S+/genesis\.de\.txt", href), href
        assert httpx.get(href).text == expected
