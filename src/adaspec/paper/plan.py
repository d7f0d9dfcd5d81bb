"""What `make paper` runs, in order: a list of steps, each a stage, the teacher cache or an evaluation
with the Hydra overrides that compose its config from `experiments/paper/<task>*.yaml`.

Per task: stage 1 once (target_seed 0, shared by all seeds) and its teacher cache; per seed the
reference, the equal-budget drafts (arm a), the budget-matched drafts (arms b and c) and one timed
evaluation of all of them. Then, on the first seed, the k sweep and the gamma sweep, which reuse that
seed's target and reference. Main results of every task come before any sweep, so a run cut short
still has the comparison.
"""

from __future__ import annotations

from dataclasses import dataclass

K_SWEEP = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0)
GAMMA_SWEEP = (1, 2, 3, 5, 8)
SWEEP_PROMPTS = "eval.n_prompts=20"  # the sweeps' 7 evaluations per task on fewer prompts than the main one
# TaskPlan.sampled_eval: arms (a)-(c) at temperature 1; real sampled runs cost ~10 s per prompt and draft on
# two cores with the real target, hence 10 prompts and no sampled sweep over gamma (7 more runs each)
def _sampled_eval(draft_tags: str, n_prompts: int) -> tuple[str, ...]:
    return ("decode.temperature=1.0", f"eval.draft_tags={draft_tags}", f"eval.n_prompts={n_prompts}",
            "eval.gamma_sweep_prompts=0", "eval.name=t1")


SAMPLED_EVAL = _sampled_eval("['',matched]", 10)
# the capacity experiment's: its three losses' arms on the 20 prompts issue 31 asks for
CAPACITY_SAMPLED_EVAL = _sampled_eval("['',nla,lk]", 20)


@dataclass(frozen=True)
class Step:
    kind: str  # pretrain | train | cache | eval
    overrides: tuple[str, ...]

    def command(self) -> str:
        """The same step as a standalone command."""
        module = {"train": "train", "pretrain": "train", "cache": "cache", "eval": "evaluate"}[self.kind]
        return f"python -m adaspec.commands.{module} " + " ".join(self.overrides)


@dataclass(frozen=True)
class TaskPlan:
    name: str  # experiments/paper/<name>.yaml and <name>_matched.yaml
    draft_ks: tuple[float, ...]  # the arm-(a) drafts: the AdaSPEC k(s) and 1.0
    matched_ks: tuple[float, ...]  # the arm-(b/c) drafts
    pretrain: bool = False  # stage 0 on the standard library's source (MBPP): the target and each draft
    # stage 0 of a pretrained target (pretrain=distill in the task's config): each seed's draft distils it
    draft_stage0: bool = False
    target_config: str = ""  # experiments/paper/<target_config>.yaml for stage 1; "": <name>.yaml
    # more arms, each (file suffix, its ks): experiments/paper/<name><suffix>.yaml trains those drafts
    # against the seed's reference, e.g. ("_optimal", (0.4, 1.0))
    extra_arms: tuple[tuple[str, tuple[float, ...]], ...] = ()
    sweeps: bool = True  # the k and gamma sweeps on the first seed
    # the overrides of an evaluation at temperature 1 after the greedy one (eval.name=t1); (): none
    sampled_eval: tuple[str, ...] = ()
    # file suffixes of extra arms that read another teacher cache (other answers), built after the task's own
    extra_caches: tuple[str, ...] = ()
    versus_arm_a: bool = False  # also compare every extra arm with arm (a) at the same k (issue 15's arms)
    # tasks that share config files and differ by the draft (the capacity sweep's sizes): config is the files'
    # <name> ("": the task's name); draft_overrides follow `paper=<config><suffix>` on every step of the draft's
    # (stage 0, stages 2-3, evaluation), never on the target's and its cache's, which all sizes share
    config: str = ""
    draft_overrides: tuple[str, ...] = ()
    # paths.root of every step, the target's and its cache's too, when not the config files' (the same drafts
    # on another target: the fine-tuned one); "": the files'
    root: str = ""

    @property
    def files(self) -> str:
        """The <name> of the task's experiments/paper/<name>*.yaml."""
        return self.config or self.name

    @property
    def root_override(self) -> tuple[str, ...]:
        return (f"paths.root={self.root}",) if self.root else ()

    def args(self, suffix: str = "") -> tuple[str, ...]:
        """The overrides that compose this task's draft-side config, or its arm's from <config><suffix>.yaml."""
        return (f"paper={self.files}{suffix}", *self.draft_overrides, *self.root_override)


def _k(k: float) -> str:
    return f"k={k:g}"


def main_steps(task: TaskPlan, seeds: list[int]) -> list[Step]:
    base, matched = task.args(), task.args("_matched")
    shared = f"paper={task.files}"  # the target's side, which every draft size shares
    steps: list[Step] = []
    if task.pretrain:
        steps.append(Step("pretrain", (shared, "stage=pretrain_target")))
    target = f"paper={task.target_config}" if task.target_config else shared
    root = task.root_override
    steps += [Step("train", (target, "stage=target", *root)), Step("cache", (shared, *root))]
    # composed as the arm's drafts are (stage=draft): its stage.tag names the drafts, not another target
    steps += [Step("cache", (f"{shared}{suffix}", "stage=draft", *root)) for suffix in task.extra_caches]
    for seed in seeds:
        s = f"seed={seed}"
        if task.pretrain or task.draft_stage0:
            steps.append(Step("pretrain", (*base, "stage=pretrain_draft", s)))
        steps.append(Step("train", (*base, "stage=ref", s)))
        steps += [Step("train", (*base, "stage=draft", s, _k(k))) for k in task.draft_ks]
        steps += [Step("train", (*matched, "stage=draft", s, _k(k))) for k in task.matched_ks]
        for suffix, ks in task.extra_arms:
            steps += [Step("train", (*task.args(suffix), "stage=draft", s, _k(k))) for k in ks]
        steps.append(Step("eval", (*base, s)))
        if task.sampled_eval:
            steps.append(Step("eval", (*base, s, *task.sampled_eval)))
    return steps


def sweep_steps(task: TaskPlan, seed: int) -> list[Step]:
    base, s = task.args(), f"seed={seed}"
    ks = ",".join(f"{k:g}" for k in K_SWEEP)
    ada_k = task.draft_ks[0]
    steps = [Step("train", (*base, "stage=draft", s, _k(k))) for k in K_SWEEP]
    only = (s, "eval.draft_tags=['']", SWEEP_PROMPTS)
    steps.append(Step("eval", (*base, *only, f"eval.draft_ks=[{ks}]", "eval.name=ksweep")))
    pair = f"eval.draft_ks=[{ada_k:g},1.0]"
    steps += [Step("eval", (*base, *only, pair, f"gamma={g}", "eval.name=gsweep")) for g in GAMMA_SWEEP]
    steps.append(Step("eval", (*base, *only, pair, "decode=adaptive", "eval.name=gsweep")))
    return steps


def task_steps(tasks: list[TaskPlan], seeds: list[int], sweeps: bool = True) -> list[tuple[TaskPlan, Step]]:
    """The plan's steps in order, each with the task whose plan made it."""
    steps = [(task, step) for task in tasks for step in main_steps(task, seeds)]
    if sweeps:
        steps += [(task, step) for task in tasks if task.sweeps for step in sweep_steps(task, seeds[0])]
    return steps


def paper_plan(tasks: list[TaskPlan], seeds: list[int], sweeps: bool = True) -> list[Step]:
    return [step for _, step in task_steps(tasks, seeds, sweeps)]


REAL_ARMS = (("_optimal", (0.4, 1.0)), ("_domain", (0.4, 1.0)))
# the cached arms (1-2 min a draft on two cores) before the on-policy ones (8-12 min): a run cut short has more
BEYOND_ARMS = (
    ("_dataset", (0.4, 1.0)), ("_jsd", (0.4, 1.0)), ("_kschedule", (0.4,)), ("_onpolicy", (0.4, 1.0)),
    ("_combined", (0.4, 1.0)),
)
TASKS = {
    "gsm8k": TaskPlan("gsm8k", draft_ks=(0.4, 1.0), matched_ks=(0.4, 1.0)),
    "mbpp": TaskPlan(
        "mbpp", draft_ks=(0.33, 0.4, 1.0), matched_ks=(0.33, 1.0), pretrain=True, target_config="mbpp_target"
    ),
    # the real target (issue 14): make models first; not in the default run (two CPU cores: hours per seed)
    "smollm2_gsm8k": TaskPlan(
        "smollm2_gsm8k", draft_ks=(0.4, 1.0), matched_ks=(0.4, 1.0), target_config="smollm2_gsm8k_target",
        extra_arms=REAL_ARMS, sweeps=False, sampled_eval=SAMPLED_EVAL, draft_stage0=True,
    ),
    # the domain ablation on code is the note's k = 0.33 with whitespace kept; its DistillSpec is arm (a)'s
    "smollm2_mbpp": TaskPlan(
        "smollm2_mbpp", draft_ks=(0.4, 1.0), matched_ks=(0.4, 1.0), target_config="smollm2_mbpp_target",
        extra_arms=(("_optimal", (0.4, 1.0)), ("_domain", (0.33,))), sweeps=False, sampled_eval=SAMPLED_EVAL,
        draft_stage0=True,
    ),
    # issue 15 on the paper run's target, answers, cache, reference and arm (a): data, divergence, k schedule
    "smollm2_gsm8k_beyond": TaskPlan(
        "smollm2_gsm8k_beyond", draft_ks=(0.4, 1.0), matched_ks=(), target_config="smollm2_gsm8k_target",
        extra_arms=BEYOND_ARMS, extra_caches=("_dataset",), sweeps=False, versus_arm_a=True, draft_stage0=True,
    ),
    # issue 46 item 5: AdaSPEC against DistillSpec for demo-real's head on every answer of the target, with the
    # forward KL and with the LK hybrid, equal steps; greedy on 40 test prompts, temperature 1 on 20
    "smollm2_gsm8k_head": TaskPlan(
        "smollm2_gsm8k_head", draft_ks=(0.4, 1.0), matched_ks=(), target_config="smollm2_gsm8k_head_target",
        extra_arms=(("_lk", (0.4, 1.0)),), sweeps=False, versus_arm_a=True,
        sampled_eval=_sampled_eval("['',lk]", 20),
    ),
}
# Issue 31's capacity experiment (and issue 30's sweep): one config, one target, several drafts (each a task);
# sizes from the preset's Llama 128x4 (1.9M parameters at the 8,192-token vocabulary) to 384x8 (18.5M), and
# the EAGLE-3 head (9.8M, no stage 0) as demo-real trains it
CAPACITY_ARMS = (("_nla", (0.4, 1.0)), ("_lk", (0.4, 1.0)))


def _capacity(name: str, *draft_overrides: str, stage0: bool = True, target: str = "") -> TaskPlan:
    """One draft size of the capacity experiment; target "": the instruct model as it is (outputs/capacity-real),
    "ft": fine-tuned on GSM8K first (experiments/paper/smollm2_gsm8k_capacity_ft_target.yaml; outputs/capacity-ft)."""
    prefix = f"smollm2_gsm8k_capacity_{target + '_' if target else ''}"
    return TaskPlan(
        f"{prefix}{name}", draft_ks=(0.4, 1.0), matched_ks=(), config="smollm2_gsm8k_capacity",
        target_config=f"{prefix}target",
        extra_arms=CAPACITY_ARMS, sweeps=False, versus_arm_a=True, sampled_eval=CAPACITY_SAMPLED_EVAL,
        draft_stage0=stage0, draft_overrides=draft_overrides, root=f"outputs/capacity-{target}" if target else "",
    )


def _llama(width: int, layers: int) -> tuple[str, ...]:
    return (f"model.draft.hidden_size={width}", f"model.draft.num_hidden_layers={layers}",
            f"model.draft.num_attention_heads={width // 64}", f"model.draft.intermediate_size={3 * width}",
            f"model.draft_name=h{width}x{layers}")


def _capacity_sizes(target: str = "") -> tuple[TaskPlan, ...]:
    return (
        _capacity("h128", target=target),  # the preset's own draft: no overrides, its folders unnamed
        _capacity("h256", *_llama(256, 6), target=target),
        _capacity("h384", *_llama(384, 8), target=target),
        _capacity("head", "model.draft_kind=eagle3", "pretrain=none", "distill.ttt_passes=3", stage0=False,
                  target=target),
    )


CAPACITY, CAPACITY_FT = _capacity_sizes(), _capacity_sizes("ft")

# Issue 30: is the preset's draft data- or capacity-limited? Its DistillSpec draft after stage 0 on a quarter,
# all (the capacity experiment's h128 task itself) and twice the code and task prompts, and with no stage 0
def _stage0_share(share: float) -> TaskPlan:
    only_distillspec = ("eval.draft_ks=[1.0]", "eval.draft_tags=['']")
    if share == 0:
        name, more = "none", ("pretrain=none",)
    else:
        name, more = f"x{share:g}", (f"pretrain.max_chars={int(400_000 * share)}",
                                     f"pretrain.task_prompts={int(2000 * share)}")
    return TaskPlan(
        f"smollm2_gsm8k_stage0_{name}", draft_ks=(1.0,), matched_ks=(), config="smollm2_gsm8k_capacity",
        target_config="smollm2_gsm8k_capacity_target", sweeps=False, draft_stage0=share > 0,
        draft_overrides=(*more, f"model.draft_name=stage0-{name}", *only_distillspec),
    )


STAGE0_TOKENS = (_stage0_share(0), _stage0_share(0.25), CAPACITY[0], _stage0_share(2))
TASKS.update({task.name: task for task in (*CAPACITY, *CAPACITY_FT, *STAGE0_TOKENS)})
# --tasks names that stand for several tasks
CAPACITY_GROUP, CAPACITY_FT_GROUP = "smollm2_gsm8k_capacity", "smollm2_gsm8k_capacity_ft"
STAGE0_GROUP = "smollm2_gsm8k_stage0_tokens"
GROUPS = {
    CAPACITY_GROUP: tuple(task.name for task in CAPACITY),
    CAPACITY_FT_GROUP: tuple(task.name for task in CAPACITY_FT),
    STAGE0_GROUP: tuple(task.name for task in STAGE0_TOKENS),
}
CAPACITY_TITLES = {  # the capacity groups' plots
    CAPACITY_GROUP: "Where selection wins: AdaSPEC - DistillSpec by draft size (greedy alpha)",
    CAPACITY_FT_GROUP: "Where selection wins, fine-tuned target: AdaSPEC - DistillSpec by draft size (greedy alpha)",
}
DEFAULT_TASKS = ("gsm8k", "mbpp")
