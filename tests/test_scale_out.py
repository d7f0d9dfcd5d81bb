"""Scale-out and GPU path on CPU: trainer groups, precision plugins, a real 2-process DDP run (gloo),
the SLURM launcher config, attention selection, the 8-bit draft and `make gpu-check` without a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest
import torch
from lightning.pytorch.plugins.precision import MixedPrecision
from transformers import AutoModelForCausalLM

from adaspec.artefacts import paths
from adaspec.artefacts.store import provenance
from adaspec.config.rules import validate
from adaspec.errors import UserError
from adaspec.models.attention import resolve_attn_implementation
from adaspec.stages.draft_init import ensure_draft_init
from adaspec.stages.stage_run import StageRun
from adaspec.training.pipeline import run_stage
from adaspec.training.trainer import build_trainer, total_steps, world_size
from tests.conftest import CONF, REPO, TINY, compose_config

STRATEGIES = {
    "cpu": "auto",
    "gpu": "auto",
    "ddp": "ddp",
    "fsdp": "fsdp",
    "deepspeed_zero1": "deepspeed_stage_1",
    "deepspeed_zero2": "deepspeed_stage_2",
    "deepspeed_zero3": "deepspeed_stage_3",
}


@pytest.mark.parametrize("group, strategy", STRATEGIES.items())
def test_trainer_groups_name_lightning_strategies(group, strategy):
    cfg = validate(compose_config(f"trainer={group}", "trainer.num_nodes=2"))
    assert cfg.trainer._target_ == "lightning.pytorch.Trainer"
    assert cfg.trainer.strategy == strategy and cfg.trainer.num_nodes == 2
    assert cfg.trainer.precision == ("32-true" if group == "cpu" else "bf16-mixed")
    assert cfg.stage.gradient_clip_val == 1.0


def test_fp16_mixed_starts_the_loss_scale_at_128_and_clips_at_1(tiny_cfg, tmp_path):
    cfg = tiny_cfg("trainer.precision=16-mixed")
    trainer = build_trainer(cfg.stage, cfg.trainer, tmp_path, n_train=64)
    plugin = trainer.precision_plugin
    assert isinstance(plugin, MixedPrecision) and plugin.precision == "16-mixed"
    assert plugin.scaler.get_scale() == 128.0
    assert trainer.gradient_clip_val == 1.0
    custom_cfg = tiny_cfg("trainer.precision=16-mixed", "trainer.fp16_init_scale=1024")
    custom = build_trainer(custom_cfg.stage, custom_cfg.trainer, tmp_path, 64)
    assert custom.precision_plugin.scaler.get_scale() == 1024.0
    bf16_cfg = tiny_cfg("trainer.precision=bf16-mixed")
    bf16 = build_trainer(bf16_cfg.stage, bf16_cfg.trainer, tmp_path, 64).precision_plugin
    assert bf16.precision == "bf16-mixed" and getattr(bf16, "scaler", None) is None


def test_steps_per_epoch_count_every_process(tiny_cfg):
    cfg = tiny_cfg("trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2", "trainer.num_nodes=3",
                   "stage.max_steps=-1", "stage.max_epochs=1")
    assert world_size(cfg.trainer) == 6
    assert total_steps(cfg.stage, 480, world_size(cfg.trainer)) == 10  # 480 / 6 processes / batch 8
    assert total_steps(cfg.stage, 480) == 60


def test_ddp_two_cpu_processes_write_the_artefact_once(tiny_trained, tmp_path):
    """stage 3 under strategy=ddp with 2 gloo processes, through the real entry point (Lightning re-runs
    it for rank 1); dL is all-gathered for a global quantile."""
    cfg = tiny_trained("stage=draft", "distill.global_quantile=true")
    overrides = [*TINY, f"paths.root={tmp_path / 'outputs'}", "stage=draft", "trainer=ddp", "trainer.accelerator=cpu",
                 "trainer.devices=2", "trainer.precision=32-true", "distill.global_quantile=true",
                 "stage.monitor_prompts=2", f"hydra.run.dir={tmp_path / 'hydra'}"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, "-m", "adaspec.commands.train", *overrides], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Starting with 2 processes" in proc.stdout + proc.stderr
    assert proc.stdout.count("[adaspec] draft: done") == 1  # rank 1 trained too, but prints nothing
    final = paths.final(paths.of(cfg).draft_dir())
    folder = final.parent
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == []  # no temp folders left
    metrics = json.loads((final / "metrics.json").read_text())
    assert metrics["steps"] == 4 and 0 < metrics["train/selected_frac"] < 1
    model = AutoModelForCausalLM.from_pretrained(str(final))
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_non_zero_ranks_wait_for_the_draft_init_instead_of_writing_it(tiny_cfg, monkeypatch):
    """Two threads stand in for two ranks: the main thread is a non-zero rank and must wait; the other is rank
    zero and writes only once the main thread is waiting (an event orders them, not a sleep)."""
    from adaspec.data.tokenizer import train_bpe_tokenizer
    from adaspec.stages import draft_init

    cfg = tiny_cfg("stage=ref")
    tokenizer = train_bpe_tokenizer(["1 + 2 = 3", "4 * 5 = 20"] * 20, 300)
    folder = paths.final(paths.of(cfg).draft_init_dir())
    rank_zero_thread = threading.Thread(target=lambda: writes.append(rank_zero()))
    waiting = threading.Event()
    wait_for = draft_init.wait_for

    def waiting_rank(path, what):
        waiting.set()
        wait_for(path, what, timeout_s=600, poll_s=0.05)

    monkeypatch.setattr(draft_init, "is_global_zero", lambda: threading.current_thread() is rank_zero_thread)
    monkeypatch.setattr(draft_init, "wait_for", waiting_rank)
    writes = []

    def rank_zero():
        assert waiting.wait(timeout=600), "the non-zero rank never started waiting"
        assert not (folder / "meta.json").exists()  # nobody wrote it before rank zero
        return ensure_draft_init(StageRun.of(cfg).init_spec, tokenizer, provenance(cfg, "draft_init"))

    rank_zero_thread.start()
    assert ensure_draft_init(StageRun.of(cfg).init_spec, tokenizer, provenance(cfg, "draft_init")) == folder  # returns once rank 0 has written it
    rank_zero_thread.join()
    assert waiting.is_set() and writes == [folder] and (folder / "meta.json").is_file()


def test_slurm_launcher_composes_with_hydra_submitit():
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["hydra/launcher=slurm", "hydra.launcher.partition=gpu"],
                      return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_ == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert launcher.partition == "gpu" and launcher.gpus_per_node == 1 and launcher.timeout_min > 0


CUDA = torch.cuda.is_available()


MISSING = [(False, False), (False, True), (True, False)]  # (flash-attn installed, CUDA GPU): what is absent


def pretend(monkeypatch, module, **present: bool) -> None:
    """This machine as if it had (or lacked) each of `present`: the project's own probes answer so, whatever is
    installed here, so the same test runs on a CPU machine and on a GPU machine with every optional package."""
    for probe, value in present.items():
        monkeypatch.setattr(module, probe, lambda value=value: value)


@pytest.mark.parametrize(("flash", "cuda"), MISSING)
def test_attention_auto_is_sdpa_unless_both_and_flash_attention_2_names_what_is_missing(flash, cuda, tiny_cfg,
                                                                                     monkeypatch):
    from adaspec.models import attention

    pretend(monkeypatch, attention, flash_attn_installed=flash, cuda_available=cuda)
    assert resolve_attn_implementation("auto", half_precision=True) == "sdpa"
    with pytest.raises(UserError, match="flash_attention_2 needs ") as refused:
        run_stage(tiny_cfg("stage=target", "model.attn_implementation=flash_attention_2"))
    message = str(refused.value).split(", which")[0]
    assert ("the flash-attn package" in message) != flash and ("a CUDA GPU" in message) != cuda
    assert not paths.of(tiny_cfg()).target_dir().exists()  # refused before anything was built


def test_attention_auto_is_flash_attention_2_with_both_in_half_precision_only(monkeypatch):
    from adaspec.models import attention

    pretend(monkeypatch, attention, flash_attn_installed=True, cuda_available=True)
    assert resolve_attn_implementation("auto", half_precision=True) == "flash_attention_2"
    assert resolve_attn_implementation("auto", half_precision=False) == "sdpa"  # no float32 kernels


def test_bf16_mixed_with_gradient_checkpointing_trains_stage_3(tiny_trained):
    cfg = tiny_trained("stage=draft", "trainer.precision=bf16-mixed", "model.gradient_checkpointing=true",
                       "stage.max_steps=2", "stage.monitor_prompts=0")
    final = run_stage(cfg)
    assert json.loads((final / "metrics.json").read_text())["steps"] == 2
    model = AutoModelForCausalLM.from_pretrained(str(final))
    assert next(model.parameters()).dtype == torch.float32  # mixed precision keeps float32 weights


@pytest.mark.parametrize(("bitsandbytes", "cuda"), MISSING)
def test_8bit_draft_names_what_is_missing_of_cuda_and_bitsandbytes(bitsandbytes, cuda, tmp_path, monkeypatch):
    from adaspec.decoding import quant

    pretend(monkeypatch, quant, bitsandbytes_installed=bitsandbytes, cuda_available=cuda)
    assert not quant.can_load_8bit()
    with pytest.raises(UserError, match="8-bit draft inference .* needs ") as refused:
        quant.load_draft_8bit(tmp_path)
    message = str(refused.value).split(";")[0]
    assert ("the bitsandbytes package" in message) != bitsandbytes and ("a CUDA GPU" in message) != cuda


def test_gpu_check_without_a_gpu_says_so_and_exits_0(capsys, monkeypatch):
    from adaspec.commands import gpu_check

    pretend(monkeypatch, gpu_check, gpu_available=False)
    assert gpu_check.main([]) == 0
    assert "no CUDA GPU" in capsys.readouterr().out


def run_gpu_check_on_the_cpu(tmp_path, *flags: str) -> dict:
    from adaspec.commands import gpu_check

    figures = tmp_path / "gpu-check.json"
    assert gpu_check.main(["--device", "cpu", "--steps", "2", "--prompts", "2", "--max-new-tokens", "8",
                           "--json", str(figures), "--head-overrides", "model=tiny", *flags]) == 0
    return json.loads(figures.read_text())


def test_gpu_check_trains_a_head_and_times_it_beside_the_target_alone_chain_and_tree(tmp_path):
    """`make gpu-check`'s whole path, on the CPU (the head on model=tiny here, model=small on a GPU), eager."""
    figures = run_gpu_check_on_the_cpu(tmp_path)
    assert figures["compiled"] is False and "ref (model=small, EAGLE-3 head)" in figures["stages"]
    rows = figures["small_head"]
    assert list(rows) == ["target eager", "target bfloat16-static", "head chain gamma 5", "head tree k4-d4-n16"]
    fastest = max(rows["target eager"]["tokens_per_s"], rows["target bfloat16-static"]["tokens_per_s"])
    for figure in rows.values():
        assert figure["speedup"] == pytest.approx(figure["tokens_per_s"] / fastest, abs=2e-3)
        assert 0 <= figure["mismatches"] <= 2


@pytest.mark.slow
def test_gpu_check_compiles_the_target_and_the_heads_steps(tmp_path):
    figures = run_gpu_check_on_the_cpu(tmp_path, "--compile")
    assert figures["compiled"] is True and "target bfloat16-compiled" in figures["small_head"]


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (`make gpu-check` on a GPU machine)")
def test_gpu_check_on_a_gpu_trains_and_decodes(capsys):
    from adaspec.commands.gpu_check import main

    assert main([]) == 0
    printed = capsys.readouterr().out
    assert "no CUDA GPU" not in printed and "tokens/s" in printed


def test_fsdp_wraps_each_transformer_block_and_scales_fp16_from_128(tiny_cfg):
    """FSDP needs a GPU to run; here only the strategy and plugin Lightning gets are checked."""
    from lightning.pytorch.plugins.precision import FSDPPrecision
    from lightning.pytorch.strategies import FSDPStrategy
    from omegaconf import OmegaConf
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
    from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXLayer

    from adaspec.training.trainer import _strategy_and_plugins
    from tests.stage_helpers import model, tokenizer_and_batch

    cfg = tiny_cfg("trainer=fsdp", "trainer.precision=16-mixed")
    student = model(cfg, tokenizer_and_batch(cfg)[0], "target", seed=0)
    kwargs = OmegaConf.to_container(cfg.trainer)
    strategy, plugins = _strategy_and_plugins(kwargs, 128.0, student)
    assert isinstance(strategy, FSDPStrategy) and strategy._state_dict_type == "full"
    assert strategy.kwargs["auto_wrap_policy"]._module_classes == {GPTNeoXLayer}
    scaler = plugins[0].scaler
    assert isinstance(plugins[0], FSDPPrecision) and isinstance(scaler, ShardedGradScaler)
    if scaler.is_enabled():  # a GradScaler disables itself where there is no CUDA
        assert scaler.get_scale() == 128.0
    assert kwargs["precision"] is None  # carried by the plugin
