"""Process-wide thread limits that concurrent fits can share."""

import contextlib
import threading


class SharedLimit:
    """A process-wide thread limit held by any number of threads at once.

    Thread counts belong to the process, not to a thread. Pairs of limit and
    restore that overlap in time (fits in a threading joblib backend)
    restore each other's limit and can leave the library on one thread for
    the rest of the process; here the first holder to enter records the
    counts and limits them, and the last to leave restores them.

    Parameters
    ----------
    limit : callable
        ``limit() -> restore``: sets the limit, returns what undoes it.
    """

    def __init__(self, limit):
        self._limit = limit
        self._lock = threading.Lock()
        self._holders = 0
        self._restore = None

    @contextlib.contextmanager
    def hold(self):
        with self._lock:
            if self._holders == 0:
                self._restore = self._limit()
            self._holders += 1
        try:
            yield
        finally:
            with self._lock:
                self._holders -= 1
                if self._holders == 0:
                    self._restore()
                    self._restore = None
