"""Interoperability with other toolkits' model formats (Hugging Face Marian / OPUS-MT, CTranslate2 via HF)."""
