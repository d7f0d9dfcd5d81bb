"""A CSV metrics log that stays one continuous log across a resume.

Lightning's CSV writer deletes `metrics.csv` when it starts. Resuming, this one keeps the rows the
checkpoint had reached (logged at steps below the checkpoint's step) and drops those the killed run
logged after its last checkpoint, which the resumed run logs again.
"""

from __future__ import annotations

import csv
from pathlib import Path

from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter


def rows_before(path: Path, step: int) -> tuple[list[str], list[dict[str, str]]]:
    """(header, rows logged before `step`) of a metrics.csv; nothing when it does not exist."""
    if not path.is_file():
        return [], []
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        rows = [row for row in reader if row.get("step") not in (None, "") and int(row["step"]) < step]
        return list(reader.fieldnames or []), rows


class ResumableCSVLogger(CSVLogger):
    def __init__(self, *args, resume_step: int | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.resume_step = resume_step

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is not None:
            return self._experiment
        path = Path(self.log_dir) / ExperimentWriter.NAME_METRICS_FILE
        header, kept = rows_before(path, self.resume_step) if self.resume_step is not None else ([], [])
        self._fs.makedirs(self.root_dir, exist_ok=True)
        self._experiment = ExperimentWriter(log_dir=self.log_dir)  # deletes metrics.csv
        if header:
            with open(path, "w", newline="") as fh:
                writer = csv.DictWriter(fh, fieldnames=header)
                writer.writeheader()
                writer.writerows(kept)
            self._experiment.metrics_keys = sorted(header)
        return self._experiment
