"""An existing, published LibreTranslate client library works against the server unchanged."""

from __future__ import annotations

from tests.service.harness import live_server
from transduce.engine.options import SERVED_NO_REPEAT_NGRAM_SIZE, DecodeOptions
from transduce.engine.translator import Translator


def test_libretranslatepy_client(tiny_translator: Translator) -> None:
    from libretranslatepy import LibreTranslateAPI

    expected = tiny_translator.translate(
        ["The cat sees the dog."],
        source_lang="en",
        target_lang="de",
        options=DecodeOptions(no_repeat_ngram_size=SERVED_NO_REPEAT_NGRAM_SIZE),
    )[0].hypotheses[0]
    with live_server(tiny_translator) as url:
        client = LibreTranslateAPI(url + "/")
        assert client.translate("The cat sees the dog.", "en", "de") == expected
        codes = {lang["code"]: lang["targets"] for lang in client.languages()}
        assert codes == {"de": ["en"], "en": ["de"]}
        detected = client.detect("Guten Morgen, wie geht es dir?")
        assert [d["language"] for d in detected] == ["de", "en"] and detected[0]["confidence"] > 90
