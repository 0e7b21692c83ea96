"""API keys from a key file (TRANSDUCE_API_KEYS_FILE): its format and errors (which never show a key), each key's
own requests a minute, and keys added, revoked and re-limited by POST /admin/reload and SIGHUP, without a restart."""

from __future__ import annotations

import re
import shutil
import signal
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from tests.ops.test_serve_settings import serve_env, serve_process, wait_for_line
from tests.service.harness import EN_DE, IsolatedSettings, serve
from transduce.service.apikeys import MAX_KEY_LIMIT, KeyFileError, KeyRing, load_key_file

pytestmark = pytest.mark.anyio
ADMIN = {"X-Admin-Key": "root-key"}


def test_the_key_file_format(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_bytes(b"\xef\xbb\xbf# team keys\n\nalpha-1\nbeta-2 600  # the batch job\n  gamma-3\t0\t#x\n")
    assert load_key_file(path) == {"alpha-1": None, "beta-2": 600, "gamma-3": 0}
    for text, problem in (
        ("alpha-1\nbeta-2 600 x\n", "line 2: write KEY, or KEY and its requests a minute"),
        ("alpha-1 lots\n", "line 1: the key's limit must be a whole number of requests a minute from 0"),
        ("alpha-1 -5\n", "line 1: the key's limit must be a whole number"),
        (f"alpha-1 {MAX_KEY_LIMIT + 1}\n", "line 1: the key's limit must be a whole number"),
        ("alpha-1\n# x\nalpha-1 5\n", "line 3 repeats the key of line 1"),
        ("alpha-1 \u00b2\n", "line 1: the key's limit must be a whole number"),  # (isdigit(): int() then raised)
        (f"alpha-1 {'9' * 5000}\n", "line 1: the key's limit must be a whole number"),
        ("alpha-1\nZq8#x2-team\n", "line 2: a key cannot hold '#'"),  # (it was cut to Zq8)
        ("# nothing yet\n\n", "lists no key: add keys (one a line), or unset api_keys_file"),
    ):
        path.write_text(text)
        with pytest.raises(KeyFileError, match=re.escape(problem)) as caught:
            load_key_file(path)
        assert "alpha-1" not in str(caught.value)  # a key is never shown
    path.write_bytes(b"caf\xe9-key\n")
    with pytest.raises(KeyFileError, match="is not UTF-8 text"):
        load_key_file(path)
    with pytest.raises(KeyFileError, match="cannot be read: No such file or directory"):
        load_key_file(tmp_path / "missing")


def test_settings_read_the_key_file_and_refuse_a_bad_one(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("from-file 5\n")
    settings = IsolatedSettings(api_keys="listed", api_keys_file=str(path), protect_health=True)
    assert settings.keys == {"listed", "from-file"}
    ring = settings.key_ring()
    assert (len(ring), ring.limit("from-file"), ring.limit("listed"), ring.match("listed")) == (2, 5, None, "listed")
    assert ring.match("listed ") is None and not KeyRing(())
    path.write_text("a b c\n")
    with pytest.raises(ValidationError, match=r"api_keys_file\n.*line 1: write KEY"):
        IsolatedSettings(api_keys_file=str(path))
    path.write_text("a \u00b2\n")  # (named neither the file nor the line: "invalid literal for int()")
    with pytest.raises(ValidationError, match=r"api_keys_file\n.*line 1: the key's limit must be a whole number"):
        IsolatedSettings(api_keys_file=str(path))


async def test_each_key_has_its_own_limit_and_a_reload_changes_the_keys(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("file-key 2\nfree-key 0\n")
    body = {"q": "Hello.", **EN_DE}
    async with serve(api_keys="env-key", api_keys_file=str(path), req_limit=3, admin_key="root-key") as (client, _):

        async def status(key: str | None) -> int:
            return (await client.post("/translate", json={**body, "api_key": key} if key else body)).status_code

        assert (await client.get("/frontend/settings")).json()["keyRequired"] is True
        assert [await status(k) for k in (None, "wrong")] == [401, 403]  # each counted against the address
        assert [await status("env-key") for _ in range(4)] == [200, 200, 200, 429]  # req_limit 3
        assert [await status("file-key") for _ in range(3)] == [200, 200, 429]  # its own 2 a minute
        r = await client.post("/translate", json={**body, "api_key": "file-key"})
        assert r.json()["error"].startswith("too many requests: at most 2 a minute from this API key")
        assert [await status("free-key") for _ in range(6)] == [200] * 6  # 0: no limit
        path.write_text("free-key 1\nnew-key\n")  # file-key revoked, new-key added, free-key limited
        report = await client.post("/admin/reload", headers=ADMIN)
        assert report.status_code == 200, report.text
        keys = {"keys": 3, "added": 1, "removed": 1, "limits_changed": 1}
        assert report.json() == {
            "added": [],
            "removed": [],
            "replaced": [],
            "retried": [],
            "unchanged": [],
            "failed": {},
            "api_keys": keys,
        }
        assert [await status(k) for k in ("file-key", "new-key", "env-key")] == [403, 200, 429]
        assert [await status("free-key") for _ in range(2)] == [200, 429]
        path.write_text("free-key 1\nnew-key\nenv-key 9\n")  # env-key in both: the file's limit
        assert (await client.post("/admin/reload", headers=ADMIN)).json()["api_keys"] == {
            "keys": 3,
            "added": 0,
            "removed": 0,
            "limits_changed": 1,
        }
        path.write_text("free-key 1\nnew-key\n")  # out of the file, still in api_keys: still accepted, not removed
        assert (await client.post("/admin/reload", headers=ADMIN)).json()["api_keys"]["removed"] == 0
        path.write_text("new-key\nnew-key\n")  # a broken file: nothing changes
        refused = await client.post("/admin/reload", headers=ADMIN)
        assert refused.status_code == 409 and "line 2 repeats the key of line 1" in refused.json()["error"]
        assert "new-key" not in refused.text
        assert await status("new-key") == 200  # still a key
        assert await status("file-key") == 429  # still revoked: its 403s have used up the address's 3


async def test_a_key_over_256_characters_goes_in_the_query_string_or_a_bearer_header(tmp_path: Path) -> None:
    """README: a key over 256 characters can be sent in Authorization: Bearer or ?api_key=, not in a body. In the
    query string it was refused (422, "at most 256 characters") unless a JSON body came with it."""
    long = "k" * 300
    path = tmp_path / "keys"
    path.write_text(f"{long}\n")
    form = {"content-type": "application/x-www-form-urlencoded"}
    async with serve(api_keys_file=str(path)) as (client, _):
        no_body = await client.post(f"/translate?q=Hello&source=en&target=de&api_key={long}")
        beside_form = await client.post(
            f"/translate?api_key={long}", content=b"q=Hello&source=en&target=de", headers=form
        )
        over_form = await client.post(
            f"/translate?api_key={long}", content=b"q=Hello&source=en&target=de&api_key=wrong", headers=form
        )  # the query's key wins over the form's, as before
        detect = await client.post(f"/detect?q=Hallo&api_key={long}")
        bearer = await client.post(
            "/translate", json={"q": "Hello", **EN_DE}, headers={"Authorization": f"Bearer {long}"}
        )
        in_body = await client.post("/translate", json={"q": "Hello", **EN_DE, "api_key": long})
    assert [r.status_code for r in (no_body, beside_form, over_form, detect, bearer)] == [200] * 5
    assert in_body.status_code == 422 and "at most 256 characters" in in_body.text


async def test_without_a_key_file_one_model_has_nothing_to_reload() -> None:
    async with serve(admin_key="root-key") as (client, _):
        r = await client.post("/admin/reload", headers=ADMIN)
        assert r.status_code == 409 and "or a key file (TRANSDUCE_API_KEYS_FILE)" in r.json()["error"]


def test_sighup_reads_the_key_file_again(tiny_model_dir: Path, tmp_path: Path) -> None:
    """`transduce serve` with one model: SIGHUP was logged and ignored; with a key file it reads the keys again."""
    keys = tmp_path / "keys"
    keys.write_text("old-key\n")
    env = serve_env(TRANSDUCE_MODEL_DIR=str(tiny_model_dir), TRANSDUCE_API_KEYS_FILE=str(keys))
    log = tmp_path / "serve.log"
    with serve_process(env, log) as (proc, url):
        assert "API keys: required (1 configured)" in log.read_text()

        def status(key: str) -> int:
            return httpx.post(f"{url}/translate", json={"q": "Hello.", **EN_DE, "api_key": key}).status_code

        assert (status("old-key"), status("new-key")) == (200, 403)
        keys.write_text("new-key\n")
        proc.send_signal(signal.SIGHUP)
        wait_for_line(log, "api keys re-read from")
        assert (status("old-key"), status("new-key")) == (403, 200)
        keys.write_text("new-key 5 extra\n")
        proc.send_signal(signal.SIGHUP)
        wait_for_line(log, "SIGHUP: nothing reloaded")
        assert proc.poll() is None and status("new-key") == 200  # a bad file: the keys as they were
    text = log.read_text()
    assert f"api keys re-read from {keys}: 1 keys, 1 added, 1 removed, 0 limits_changed" in text
    assert f"SIGHUP: nothing reloaded, the API keys read before stay: api_keys_file {keys} line 1" in text
    assert "old-key" not in text and "new-key" not in text


@pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")  # (the models' Marian one)
def test_a_bad_key_file_at_sighup_reloads_no_model(models_dir: Path, tiny_fr_model_dir: Path, tmp_path: Path) -> None:
    """Several models and a key file: SIGHUP with a key file that cannot be used reloads nothing, as POST
    /admin/reload does (the models were rescanned anyway); once the file is right again, the next SIGHUP does both."""
    shutil.rmtree(models_dir / "fr")
    keys = tmp_path / "keys"
    keys.write_text("some-key\n")
    env = serve_env(TRANSDUCE_MODELS=str(models_dir), TRANSDUCE_API_KEYS_FILE=str(keys))
    log = tmp_path / "serve.log"
    with serve_process(env, log) as (proc, url):

        def languages() -> set[str]:
            return {lang["code"] for lang in httpx.get(f"{url}/languages").json()}

        assert "fr" not in languages()
        shutil.copytree(tiny_fr_model_dir, models_dir / "fr")
        keys.write_text("some-key 5 extra\n")
        proc.send_signal(signal.SIGHUP)
        wait_for_line(log, "SIGHUP: nothing reloaded, the API keys read before stay")
        assert "fr" not in languages() and "models reloaded" not in log.read_text()
        keys.write_text("some-key 5\n")
        proc.send_signal(signal.SIGHUP)
        wait_for_line(log, "models reloaded: added fr")
        assert "fr" in languages() and "0 added, 0 removed, 1 limits_changed" in log.read_text()
