"""Exceptions raised by the engine; the service maps them to HTTP statuses."""


class UnsupportedLanguageError(ValueError):
    """A language or language pair the model does not translate."""


class InputTooLongError(ValueError):
    """A sentence longer than the model (or a configured limit) accepts."""


class ModelLoadError(RuntimeError):
    """The model directory is missing, corrupt or inconsistent."""
