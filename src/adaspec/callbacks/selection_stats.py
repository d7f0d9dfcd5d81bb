"""Which tokens stage 3 trains on: the most often selected and the most often filtered answer tokens.

Counts every answer token of every training batch by its label id, split by whether the selection kept
it (the step's `SelectionRecord`, handed to the callbacks by SelectiveDistill.step), and at the end of
training writes the top `top_n` of each to `<out_dir>/selected_tokens.json` and `.md` and, when a W&B logger is attached, logs
them as the tables `selection/most_selected` and `selection/most_filtered`.
"""

from __future__ import annotations

import json
from pathlib import Path

import lightning.pytorch as pl
import torch
from lightning.pytorch.loggers import WandbLogger
from transformers import PreTrainedTokenizerBase

from adaspec.distill.token_classes import CLASS_NAMES, classify_text

STATS_NAME = "selected_tokens"
COLUMNS = ("rank", "token", "id", "class", "selected", "filtered", "selected_share")


class SelectionStats(pl.Callback):
    def __init__(self, tokenizer: PreTrainedTokenizerBase, out_dir: Path | str, top_n: int = 30):
        self.tokenizer = tokenizer
        self.out_dir = Path(out_dir)
        self.top_n = top_n
        self.selected = torch.zeros(len(tokenizer), dtype=torch.long)
        self.filtered = torch.zeros(len(tokenizer), dtype=torch.long)

    def _add(self, counts: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        new = torch.bincount(ids.cpu(), minlength=len(counts))
        if len(new) > len(counts):  # an id beyond the tokenizer: keep it rather than fail
            counts = torch.cat([counts, counts.new_zeros(len(new) - len(counts))])
        counts[: len(new)] += new
        return counts

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        record = (outputs or {}).get("selection")
        if record is None:
            return
        ids, selected = record.answer_ids, record.selected
        self.selected = self._add(self.selected, ids[selected])
        self.filtered = self._add(self.filtered, ids[~selected])

    def state_dict(self) -> dict:
        return {"selected": self.selected.clone(), "filtered": self.filtered.clone()}

    def load_state_dict(self, state_dict: dict) -> None:  # a resumed run keeps counting
        self.selected, self.filtered = state_dict["selected"].clone(), state_dict["filtered"].clone()

    def rows(self, by: torch.Tensor, selected: torch.Tensor, filtered: torch.Tensor) -> list[dict]:
        order = torch.sort(by, descending=True, stable=True).indices[: self.top_n]
        rows = []
        for rank, i in enumerate(order.tolist(), start=1):
            if int(by[i]) == 0:
                break
            text = self.tokenizer.decode([i], clean_up_tokenization_spaces=False)
            s, f = int(selected[i]), int(filtered[i])
            rows.append(
                {"rank": rank, "token": text, "id": i, "class": CLASS_NAMES[classify_text(text)[0]],
                 "selected": s, "filtered": f, "selected_share": round(s / (s + f), 4)}
            )
        return rows

    def report(self, selected: torch.Tensor, filtered: torch.Tensor, steps: int, k: float | None) -> dict:
        n_sel, n_filt = int(selected.sum()), int(filtered.sum())
        return {
            "steps": steps,
            "k": k,
            "answer_tokens": n_sel + n_filt,
            "selected_tokens": n_sel,
            "selected_frac": round(n_sel / max(n_sel + n_filt, 1), 4),
            "most_selected": self.rows(selected, selected, filtered),
            "most_filtered": self.rows(filtered, selected, filtered),
        }

    def on_train_end(self, trainer, pl_module) -> None:
        width = max(len(self.selected), len(self.filtered))  # on-policy samples may hold padding ids
        counts = torch.stack([torch.cat([c, c.new_zeros(width - len(c))]) for c in (self.selected, self.filtered)])
        counts = counts.to(pl_module.device)
        counts = trainer.strategy.reduce(counts, reduce_op="sum").cpu()  # summed over data-parallel ranks
        if not trainer.is_global_zero:
            return
        report = self.report(counts[0], counts[1], trainer.global_step, getattr(pl_module, "k", None))
        self.out_dir.mkdir(parents=True, exist_ok=True)
        (self.out_dir / f"{STATS_NAME}.json").write_text(json.dumps(report, indent=2, ensure_ascii=False))
        (self.out_dir / f"{STATS_NAME}.md").write_text(to_markdown(report))
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                for key in ("most_selected", "most_filtered"):
                    data = [[row[c] for c in COLUMNS] for row in report[key]]
                    logger.log_table(key=f"selection/{key}", columns=list(COLUMNS), data=data)


def _cell(text: str) -> str:
    return "`" + json.dumps(text, ensure_ascii=False)[1:-1].replace("|", "\\|").replace("`", "\\`") + "`"


def to_markdown(report: dict) -> str:
    lines = [
        f"# Stage-3 token selection (k = {report['k']}, {report['steps']} steps)",
        "",
        f"{report['selected_tokens']} of {report['answer_tokens']} answer tokens selected "
        f"({100 * report['selected_frac']:.1f} %).",
    ]
    for key, title in (("most_selected", "Most often selected"), ("most_filtered", "Most often filtered")):
        lines += ["", f"## {title}", "", "| # | token | id | class | selected | filtered | selected share |",
                  "|---|---|---|---|---|---|---|"]
        lines += [
            f"| {r['rank']} | {_cell(r['token'])} | {r['id']} | {r['class']} | {r['selected']} | {r['filtered']} "
            f"| {100 * r['selected_share']:.1f} % |"
            for r in report[key]
        ]
    return "\n".join(lines) + "\n"
