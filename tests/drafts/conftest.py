from tests.decoding.conftest import _one_thread  # noqa: F401  (one torch thread, as the decoding tests)
