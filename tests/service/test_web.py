"""The web page: served without external resources, and driven in a real headless Chromium against the service."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.service.harness import live_server
from transduce.engine.translator import Translator

ROOT = Path(__file__).resolve().parents[2]
DOCS_SCREENSHOT = ROOT / "docs" / "screenshot.png"  # the README's picture: refreshed only when asked
UPDATE_SCREENSHOT = "TRANSDUCE_UPDATE_SCREENSHOT"


def save_screenshot(browser: Any, tmp_path: Path) -> Path:
    """Screenshot into the test's own folder; with TRANSDUCE_UPDATE_SCREENSHOT=1 also over docs/screenshot.png."""
    shot = tmp_path / "screenshot.png"
    assert browser.save_screenshot(str(shot)) and shot.read_bytes().startswith(b"\x89PNG")
    if os.environ.get(UPDATE_SCREENSHOT) == "1":
        DOCS_SCREENSHOT.parent.mkdir(exist_ok=True)
        shutil.copyfile(shot, DOCS_SCREENSHOT)
        print(f"screenshot: {shot}, copied to {DOCS_SCREENSHOT}")
    else:
        print(f"screenshot: {shot} ({UPDATE_SCREENSHOT}=1 copies it to {DOCS_SCREENSHOT})")
    return shot


@pytest.fixture(scope="module")
def web_url(default_translator: Translator) -> Iterator[str]:
    """The real app with the shipped model under uvicorn on loopback (max_chars small so the error case is easy)."""
    with live_server(default_translator, max_chars=200) as url:
        yield url


def test_static_page_is_self_contained(web_url: str) -> None:
    html = httpx.get(web_url + "/").text
    for element in (
        'id="source"',
        'id="target"',
        'id="swap"',
        'id="translate"',
        'id="copy"',
        'id="counter"',
        'href="docs"',
        'rel="icon"',
    ):
        assert element in html
    icon = httpx.get(web_url + "/favicon.ico")
    assert (
        icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml") and b"<svg" in icon.content
    )
    for asset in ("/", "/static/app.js", "/static/style.css", "/static/favicon.svg"):
        body = httpx.get(web_url + asset).text
        assert not re.search(r"(src|href)=[\"']https?://", body), asset
        # and none of this server's by an absolute path, which would miss a proxy's sub-path (TRANSDUCE_ROOT_PATH)
        assert not re.search(r"((src|href)=|fetch\(|postWithin\([^,]*,)\s*[\"']/", body), asset
        assert "cdn" not in body.lower()
    settings = httpx.get(web_url + "/frontend/settings").json()
    assert settings["char_limit"] == 200 and settings["model"]
    assert settings["supportedFilesFormat"] == [".txt", ".md", ".html", ".htm", ".docx"]
    assert (settings["max_file_bytes"], settings["max_file_chars"]) == (2_000_000, 100_000)


def test_translate_in_the_browser(browser: Any, web_url: str, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select, WebDriverWait

    wait = WebDriverWait(browser, 20)
    browser.get(web_url + "/")
    wait.until(lambda d: len(Select(d.find_element(By.ID, "target")).options) > 0)
    assert Select(browser.find_element(By.ID, "source")).first_selected_option.get_attribute("value") == "en"
    assert Select(browser.find_element(By.ID, "target")).first_selected_option.get_attribute("value") == "de"
    assert not browser.find_element(By.ID, "api-key").is_displayed()  # the server needs no key
    text = "And the LORD said unto Jacob, Return unto the land of thy fathers."  # a Bible dev-chapter verse
    expected = httpx.post(web_url + "/translate", json={"q": text, "source": "en", "target": "de"}).json()
    box = browser.find_element(By.ID, "input")
    box.send_keys(text)
    assert browser.find_element(By.ID, "counter").text == f"{len(text)} / 200"
    browser.find_element(By.ID, "translate").click()
    wait.until(lambda d: d.find_element(By.ID, "output").get_attribute("value"))
    assert browser.find_element(By.ID, "output").get_attribute("value") == expected["translatedText"]
    assert "ms" in browser.find_element(By.ID, "status").text
    save_screenshot(browser, tmp_path)

    # Ctrl+Enter translates too, to the same text
    browser.execute_script("document.getElementById('output').value = ''")
    box.send_keys(Keys.CONTROL, Keys.ENTER)
    wait.until(lambda d: d.find_element(By.ID, "output").get_attribute("value"))
    assert browser.find_element(By.ID, "output").get_attribute("value") == expected["translatedText"]

    # copy puts the translation on the clipboard
    browser.execute_cdp_cmd(
        "Browser.grantPermissions",
        {"origin": web_url, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]},
    )
    browser.find_element(By.ID, "copy").click()
    wait.until(lambda d: "copied" in d.find_element(By.ID, "status").text)
    clipboard = browser.execute_async_script(
        "navigator.clipboard.readText().then(arguments[0], e => arguments[0]('ERR ' + e))"
    )
    assert clipboard == expected["translatedText"]

    # swap: languages change sides and the translation becomes the input
    translation = browser.find_element(By.ID, "output").get_attribute("value")
    browser.find_element(By.ID, "swap").click()
    assert Select(browser.find_element(By.ID, "source")).first_selected_option.get_attribute("value") == "de"
    assert Select(browser.find_element(By.ID, "target")).first_selected_option.get_attribute("value") == "en"
    assert box.get_attribute("value") == translation
    assert browser.find_element(By.ID, "output").get_attribute("value") == ""

    # "Detect language": the detected language is shown beside the translation
    Select(browser.find_element(By.ID, "source")).select_by_value("auto")
    Select(browser.find_element(By.ID, "target")).select_by_value("en")
    box.clear()
    box.send_keys("Und Gott sprach: Es werde Licht! Und es ward Licht.")
    browser.find_element(By.ID, "translate").click()
    wait.until(lambda d: d.find_element(By.ID, "detected").text)
    assert browser.find_element(By.ID, "detected").text.startswith("Detected: German (")
    assert browser.find_element(By.ID, "output").get_attribute("value")

    # an API error is shown to the user in plain words, the API's message as the detail, and the old output goes
    box.clear()
    box.send_keys("a" * 250)
    assert "over" in (browser.find_element(By.ID, "counter").get_attribute("class") or "")
    browser.find_element(By.ID, "translate").click()
    wait.until(lambda d: d.find_element(By.ID, "error").is_displayed())
    error = browser.find_element(By.ID, "error").text
    assert error.startswith("The text is too long: this server translates up to 200 characters at a time.")
    assert "Details: request (250 characters) exceeds the limit of 200 characters" in error
    assert browser.find_element(By.ID, "output").get_attribute("value") == ""
    assert browser.find_element(By.ID, "detected").text == ""


def test_a_server_that_never_answers_is_given_up_on(browser: Any, web_url: str) -> None:
    """A dropped connection left the page "Translating…" with its buttons off for ever: it now gives up a margin
    past the server's own deadline (request_timeout_s, from /frontend/settings) and says so. The fetch of
    /translate is replaced in the page by one that never answers; the margin is cut to keep the test short."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    assert httpx.get(web_url + "/frontend/settings").json()["request_timeout_s"] == 30.0
    wait = WebDriverWait(browser, 20)
    browser.get(web_url + "/")
    wait.until(lambda d: len(Select(d.find_element(By.ID, "target")).options) > 0)
    assert browser.execute_script("return settings.request_timeout_s") == 30
    browser.execute_script(
        """settings.request_timeout_s = 0.2; ANSWER_MARGIN_S.text = 0.3;
        const real = window.fetch;
        window.fetch = (url, options) => String(url).split("/").pop() === "translate"
          ? new Promise((_, reject) => options.signal.addEventListener(
              "abort", () => reject(new DOMException("aborted", "AbortError"))))
          : real(url, options);"""
    )
    browser.find_element(By.ID, "input").send_keys("Good morning.")
    browser.find_element(By.ID, "translate").click()
    wait.until(lambda d: d.find_element(By.ID, "error").is_displayed())
    assert browser.find_element(By.ID, "error").text.startswith("The server did not answer within 0.5 s.")
    assert browser.find_element(By.ID, "translate").is_enabled() and browser.find_element(By.ID, "swap").is_enabled()
    assert browser.find_element(By.ID, "status").text == ""
    # no deadline stated (request_timeout_s inf is sent as null), or one past what a timer holds: no timer at all
    # (a null deadline gave up after the margin alone; 1e9 s overflowed the timer, which then fired at once)
    assert browser.execute_script(
        """return [null, 1e9, 30].map((deadline) => {
          settings.request_timeout_s = deadline;
          return answerWithin("file");
        });"""
    ) == [None, None, 90]


def test_translate_a_file_in_the_browser(browser: Any, web_url: str, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    lines = ["In the beginning God created the heaven and the earth.", "", "And God saw the light."]
    source = tmp_path / "genesis.txt"
    source.write_text("\n".join(lines))
    wait = WebDriverWait(browser, 30)
    browser.get(web_url + "/")
    wait.until(lambda d: len(Select(d.find_element(By.ID, "target")).options) > 0)
    assert not browser.find_element(By.ID, "file-pane").is_displayed()
    browser.find_element(By.ID, "tab-file").click()
    assert browser.find_element(By.ID, "file-pane").is_displayed()
    assert not browser.find_element(By.ID, "input").is_displayed()
    browser.find_element(By.ID, "translate-file").click()  # no file chosen yet: said in plain words
    wait.until(lambda d: d.find_element(By.ID, "error").is_displayed())
    assert "Choose a file" in browser.find_element(By.ID, "error").text
    browser.find_element(By.ID, "file").send_keys(str(source))
    browser.find_element(By.ID, "translate-file").click()
    wait.until(lambda d: d.find_element(By.ID, "file-link").is_displayed())
    link = browser.find_element(By.ID, "file-link")
    assert link.text == "Download genesis.de.txt" and not browser.find_element(By.ID, "error").is_displayed()
    got = httpx.get(link.get_attribute("href")).text.split("\n")
    expected = [
        httpx.post(web_url + "/translate", json={"q": line, "source": "en", "target": "de"}).json()["translatedText"]
        for line in lines
    ]
    assert got == expected and got[1] == ""


def test_file_errors_are_worded_for_files(browser: Any, web_url: str, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    wait = WebDriverWait(browser, 30)
    browser.get(web_url + "/")
    wait.until(lambda d: len(Select(d.find_element(By.ID, "target")).options) > 0)
    browser.find_element(By.ID, "tab-file").click()
    chooser = browser.find_element(By.ID, "file")
    assert chooser.get_attribute("accept") == ".txt,.md,.html,.htm,.docx"  # from /frontend/settings
    assert browser.find_element(By.ID, "file-hint").text.startswith(
        "A .txt, .md, .html, .htm or .docx file of up to 2 MB"
    )
    errors = []
    for name, data in (("slides.pdf", b"%PDF-1.4"), ("huge.txt", b"Some words. " * 10_000)):
        (tmp_path / name).write_bytes(data)
        chooser.clear()
        chooser.send_keys(str(tmp_path / name))
        browser.find_element(By.ID, "translate-file").click()
        wait.until(lambda d: d.find_element(By.ID, "error").is_displayed())
        errors.append(browser.find_element(By.ID, "error").text)
        browser.find_element(By.ID, "tab-file").click()  # clears the error
    unsupported, too_large = errors
    assert unsupported.startswith("This file type is not supported: choose a .txt, .md, .html, .htm or .docx file.")
    assert "Details: files of type '.pdf' are not supported: send .txt, .md, .html, .htm, .docx" in unsupported
    assert too_large.startswith(
        "This file is too large: this server translates files of up to 2 MB and 100000 characters of text."
    )
    assert "Details: huge.txt has 119999 characters of text, over the limit of 100000 (max_file_chars)" in too_large
    assert (
        "text is too long" not in unsupported + too_large
        and not browser.find_element(By.ID, "file-link").is_displayed()
    )


def test_narrow_screen_stacks_the_panes(browser: Any, web_url: str) -> None:
    from selenium.webdriver.common.by import By

    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride", {"width": 390, "height": 800, "deviceScaleFactor": 1, "mobile": True}
    )
    try:
        browser.get(web_url + "/")
        source, output = browser.find_element(By.ID, "input").rect, browser.find_element(By.ID, "output").rect
        assert output["y"] >= source["y"] + source["height"]  # one column: the translation sits below the input
        assert source["x"] + source["width"] <= 390 and output["x"] + output["width"] <= 390
        assert browser.execute_script("return document.documentElement.scrollWidth") <= 390  # no sideways scrolling
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def test_api_key_field_when_the_server_requires_one(browser: Any, default_translator: Translator) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    with live_server(default_translator, api_keys="s3cret", req_limit=1) as url:
        wait = WebDriverWait(browser, 20)
        browser.get(url + "/")
        wait.until(lambda d: len(Select(d.find_element(By.ID, "target")).options) > 0)
        assert browser.find_element(By.ID, "api-key").is_displayed()
        browser.find_element(By.ID, "input").send_keys("Hello world.")
        browser.find_element(By.ID, "translate").click()
        wait.until(lambda d: d.find_element(By.ID, "error").is_displayed())
        assert "API key is required" in browser.find_element(By.ID, "error").text
        browser.find_element(By.ID, "api-key").send_keys("s3cret")
        browser.find_element(By.ID, "translate").click()
        wait.until(lambda d: d.find_element(By.ID, "output").get_attribute("value"))
        assert not browser.find_element(By.ID, "error").is_displayed()
        browser.find_element(By.ID, "translate").click()  # a second one with the key in the minute: over req_limit
        wait.until(lambda d: d.find_element(By.ID, "error").is_displayed())
        assert "Too many requests from here" in browser.find_element(By.ID, "error").text


def test_a_language_the_server_only_writes_is_a_target_not_a_source(browser: Any) -> None:
    """/languages lists a language the server only translates into (with no targets of its own); the page does not
    offer it as a source, where it would have had nothing to translate into."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    from tests.service.harness import FakeTranslator

    seen = []
    for pairs in ([("en", "de")], [("de", "en")]):  # English written only: "en" is no source to start on
        with live_server(FakeTranslator(pairs=pairs)) as url:
            assert [lang["code"] for lang in httpx.get(url + "/languages").json()] == ["de", "en"]
            browser.get(url + "/")
            WebDriverWait(browser, 20).until(lambda d: d.find_element(By.ID, "translate").is_enabled())
            source, target = (Select(browser.find_element(By.ID, name)) for name in ("source", "target"))
            seen.append(
                (
                    [o.get_attribute("value") for o in source.options],
                    source.first_selected_option.get_attribute("value"),
                    [o.get_attribute("value") for o in target.options],
                )
            )
    assert seen == [(["auto", "en"], "en", ["de"]), (["auto", "de"], "auto", ["en"])]


def test_page_details_from_a_browser_probe(browser: Any, default_translator: Translator) -> None:
    """The counter counts characters as the server does, a 413 for sentences says so, swap keeps edited text and
    uses the detected language, the tabs take arrow keys, the controls wait for the languages, long names wrap."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select, WebDriverWait

    with live_server(default_translator, max_chars=300, max_queue_items=3) as url:
        page = httpx.get(url + "/").text  # disabled as served: enabled once the languages and settings are loaded
        for button in ("translate", "translate-file", "swap"):
            assert re.search(rf'<button id="{button}"[^>]*\sdisabled[\s>]', page), button
        wait = WebDriverWait(browser, 20)
        browser.get(url + "/")
        wait.until(lambda d: d.find_element(By.ID, "translate").is_enabled())
        box = browser.find_element(By.ID, "input")
        browser.execute_script(
            "arguments[0].value = '😀'.repeat(200); arguments[0].dispatchEvent(new Event('input'))", box
        )
        assert browser.find_element(By.ID, "counter").text == "200 / 300"  # was 400: UTF-16 units
        box.clear()
        box.send_keys("One.\nTwo.\nThree.\nFour.")  # 4 sentences, 22 characters
        browser.find_element(By.ID, "translate").click()
        wait.until(lambda d: d.find_element(By.ID, "error").is_displayed())
        assert browser.find_element(By.ID, "error").text.startswith("The text has too many sentences or lines")

        # swap: an edited input stays (the old translation is not its translation); the languages change sides
        box.clear()
        box.send_keys("Good morning.")
        browser.find_element(By.ID, "translate").click()
        wait.until(lambda d: d.find_element(By.ID, "output").get_attribute("value"))
        box.send_keys(" And more.")
        browser.find_element(By.ID, "swap").click()
        assert box.get_attribute("value") == "Good morning. And more."
        assert Select(browser.find_element(By.ID, "source")).first_selected_option.get_attribute("value") == "de"

        # under "Detect language", swap takes the detected language and keeps the translation as the input
        Select(browser.find_element(By.ID, "source")).select_by_value("auto")
        Select(browser.find_element(By.ID, "target")).select_by_value("en")
        box.clear()
        box.send_keys("Und Gott sprach: Es werde Licht! Und es ward Licht.")
        browser.find_element(By.ID, "translate").click()
        wait.until(lambda d: d.find_element(By.ID, "output").get_attribute("value"))
        translation = browser.find_element(By.ID, "output").get_attribute("value")
        browser.find_element(By.ID, "swap").click()
        assert not browser.find_element(By.ID, "error").is_displayed()
        assert Select(browser.find_element(By.ID, "source")).first_selected_option.get_attribute("value") == "en"
        assert Select(browser.find_element(By.ID, "target")).first_selected_option.get_attribute("value") == "de"
        assert box.get_attribute("value") == translation

        # tabs: one tab stop, arrow keys move
        text_tab = browser.find_element(By.ID, "tab-text")
        assert browser.find_element(By.ID, "tab-file").get_attribute("tabindex") == "-1"
        back = "const e = new KeyboardEvent('keydown', {key: 'ArrowLeft', altKey: true, cancelable: true});"
        assert (
            browser.execute_script(back + "arguments[0].dispatchEvent(e); return e.defaultPrevented", text_tab) is False
        )
        text_tab.send_keys(Keys.ARROW_RIGHT)
        assert browser.find_element(By.ID, "tab-file").get_attribute("aria-selected") == "true"
        assert browser.switch_to.active_element.get_attribute("id") == "tab-file"

        # a long file name (one word once spaces are "_") wraps on a phone instead of scrolling the page
        browser.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride", {"width": 375, "height": 667, "deviceScaleFactor": 1, "mobile": True}
        )
        try:
            browser.execute_script(
                "const a = document.getElementById('file-link'); a.hidden = false;"
                "a.textContent = 'Download ' + 'Annual_report_of_the_parish_council_'.repeat(3) + '2024.de.docx';"
            )
            assert browser.execute_script("return document.documentElement.scrollWidth") <= 375
        finally:
            browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
