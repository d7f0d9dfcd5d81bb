"""One line per event: what the entry points do to third-party logging before a stage trains.

`lightning` installs a console handler of its own (`INFO: ...`) and still propagates to the root logger,
which Hydra gives a console and a file handler: every Lightning message was printed twice. Where the root
logger has handlers, Lightning's own is removed, so each message is printed once and kept in Hydra's log.
transformers' progress bars for loading and writing a few small weight files (two lines per artefact) are
turned off; the project's own bars (training, generation, caches) stay.
"""

from __future__ import annotations

import logging
import warnings

ADVERTISEMENT = "try installing [litlogger]"


class _DropAdvertisement(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return ADVERTISEMENT not in record.getMessage()


def one_line_per_event() -> None:
    """Idempotent; call before building a Trainer."""
    lightning = logging.getLogger("lightning")
    if logging.getLogger().hasHandlers():
        for handler in [h for h in lightning.handlers if type(h) is logging.StreamHandler]:
            lightning.removeHandler(handler)
    # Lightning's logger connector advertises a cloud logger on every Trainer (rank_zero_info)
    rank_zero = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if not any(isinstance(f, _DropAdvertisement) for f in rank_zero.filters):
        rank_zero.addFilter(_DropAdvertisement())
    # Lightning's own pytree helper calls an API torch 2.13 deprecates; harmless until torch removes it, and
    # nothing a user of this project can change
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
    # imported here: the entry points call this before their task, and a config error must not wait for it
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
