"""Exceptions raised by the engine; the service maps them to HTTP statuses."""


class UnsupportedLanguageError(ValueError):
    """A language or language pair the model does not translate."""


class InputTooLongError(ValueError):
    """A sentence longer than the model (or a configured limit) accepts."""


class ModelLoadError(RuntimeError):
    """The model directory is missing, corrupt or inconsistent."""


# the queues' errors (the batcher's and the step scheduler's alike)
class QueueFullError(Exception):
    """The queue has no room for the request's items (the service answers 503 with Retry-After)."""


class DeadlineExceededError(Exception):
    """The request's deadline passed before its items were processed (504)."""


class RequestTooLargeError(ValueError):
    """A request with more items than the queue can ever hold (the service answers 413)."""

    def __init__(self, items: int, limit: int) -> None:
        super().__init__(
            f"a request of {items} items can never fit the queue (max_queue_items={limit}); "
            "split it or raise max_queue_items"
        )
        self.items, self.limit = items, limit


class BatcherClosedError(Exception):
    """The batcher is not running (not started, stopping or stopped) and takes no new work (503)."""
