"""An EAGLE-3 draft head (Li et al., 2025; SafeAILab/EAGLE `eagle/traineagle3/cnets.py`), in plain sight.

The head reads the target's hidden states instead of re-encoding the text. Its inputs are pairs: pair i is
the target's feature of position i-1 (the hidden states of a low, a middle and a high layer, concatenated:
3H) and the token at position i; its output predicts the token at position i+1, like a causal LM's logits
at position i. Pair 0 has no feature before it and reads zeros. For each pair:

    feature  = fc([h_low ; h_mid ; h_high])                           3H -> H (the target's features only)
    x        = [input_layernorm(embed(token)) ; hidden_norm(feature)]  2H
    out      = feature + attention(x);  out = out + mlp(post_attention_layernorm(out))
    logits   = lm_head(norm(out))                                      over the draft vocabulary

Decoding proposes the first token from the target's features; every later one from the head's own `out`
at the previous position, which takes the feature's place (no fc). The token embedding is the target's,
copied and frozen. Parameter names follow EAGLE's (`fc`, `midlayer.*`, `norm`, `lm_head`, `embed_tokens`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import PretrainedConfig, PreTrainedModel


class Eagle3Config(PretrainedConfig):
    model_type = "adaspec_eagle3"

    def __init__(self, hidden_size: int = 64, intermediate_size: int = 128, num_attention_heads: int = 4,
                 num_key_value_heads: int = 4, head_dim: int | None = None, rms_norm_eps: float = 1e-5,
                 rope_theta: float = 10000.0, vocab_size: int = 256, draft_vocab_size: int = 256,
                 target_layers: tuple[int, ...] | list[int] = (1, 1, 1), **kwargs):
        self.hidden_size, self.intermediate_size = hidden_size, intermediate_size
        self.num_attention_heads, self.num_key_value_heads = num_attention_heads, num_key_value_heads
        self.head_dim = head_dim or hidden_size // num_attention_heads
        self.rms_norm_eps, self.rope_theta = rms_norm_eps, rope_theta
        self.vocab_size, self.draft_vocab_size = vocab_size, draft_vocab_size
        self.target_layers = list(target_layers)  # indices into the target's `hidden_states` (0: embeddings)
        super().__init__(**kwargs)


def eagle3_layers(num_hidden_layers: int) -> list[int]:
    """EAGLE-3's choice: the inputs of layers 2, N/2 and N-3 (`hidden_states[i]` is the input of layer i),
    kept inside 1..N for small targets."""
    n = num_hidden_layers
    return sorted(min(max(i, 1), n) for i in (2, n // 2, n - 3))


def config_for_target(target: PretrainedConfig, draft_vocab_size: int, layers: list[int] | None = None) -> Eagle3Config:
    """One decoder layer at the target's width, heads and MLP size; its output head over `draft_vocab_size`."""
    return Eagle3Config(
        hidden_size=target.hidden_size, intermediate_size=target.intermediate_size,
        num_attention_heads=target.num_attention_heads,
        num_key_value_heads=getattr(target, "num_key_value_heads", None) or target.num_attention_heads,
        head_dim=getattr(target, "head_dim", None), rms_norm_eps=getattr(target, "rms_norm_eps", 1e-5),
        rope_theta=_rope_theta(target), vocab_size=target.vocab_size, draft_vocab_size=draft_vocab_size,
        target_layers=layers or eagle3_layers(target.num_hidden_layers),
    )


def _final_norm(target: PreTrainedModel) -> nn.Module:
    """The target's norm before its output layer (Llama's `model.norm`, GPT-NeoX's `final_layer_norm`)."""
    base = target.base_model
    norm = getattr(base, "norm", None) or getattr(base, "final_layer_norm", None)
    if norm is None:
        raise ValueError(f"{type(target).__name__} has no final norm to start an EAGLE-3 head's output from")
    return norm


def _rope_theta(config: PretrainedConfig) -> float:
    rope = getattr(config, "rope_parameters", None) or {}
    return float(rope.get("rope_theta", getattr(config, "rope_theta", 10000.0)))


class KVCache:
    """The head's keys and values `[1, kv_heads, pairs, head_dim]`; cropping is slicing."""

    def __init__(self) -> None:
        self.k: Tensor | None = None
        self.v: Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        self.k = k if self.k is None else torch.cat([self.k, k], dim=2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=2)
        return self.k, self.v

    def crop(self, length: int) -> None:
        if self.k is not None and length < len(self):
            self.k, self.v = self.k[:, :, :length], self.v[:, :, :length]


class StaticKVCache:
    """The head's keys and values preallocated for `capacity` pairs `[1, kv_heads, capacity, head_dim]`, written in
    place, so that a compiled step (`Eagle3Head.decode_step`) keeps its shapes and addresses from call to call (CUDA
    graphs replay on the same tensors). `len` counts the pairs kept, on the host; cropping only lowers it, and
    later steps overwrite what lies beyond."""

    def __init__(self, config: Eagle3Config, capacity: int, dtype: torch.dtype, device: torch.device):
        shape = (1, config.num_key_value_heads, capacity, config.head_dim)
        with torch.inference_mode(False):  # normal tensors: decoding writes them in inference mode, a replay outside
            self.keys = torch.zeros(shape, dtype=dtype, device=device)
            self.values = torch.zeros(shape, dtype=dtype, device=device)
        torch._dynamo.mark_static_address(self.keys)
        torch._dynamo.mark_static_address(self.values)
        self.capacity, self.length = capacity, 0

    def __len__(self) -> int:
        return self.length

    def crop(self, length: int) -> None:
        self.length = min(self.length, length)


class _SlotWriter:
    """What `Attention` appends to in a `decode_step`: the static buffers, written at `slots`."""

    def __init__(self, keys: Tensor, values: Tensor, slots: Tensor):
        self.keys, self.values, self.slots = keys, values, slots

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        self.keys.index_copy_(2, self.slots, k)
        self.values.index_copy_(2, self.slots, v)
        return self.keys, self.values


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    """Llama attention whose queries, keys and values read the 2H-wide pair and whose output is H wide."""

    def __init__(self, config: Eagle3Config):
        super().__init__()
        h, d = config.hidden_size, config.head_dim
        self.heads, self.kv_heads, self.head_dim = config.num_attention_heads, config.num_key_value_heads, d
        self.q_proj = nn.Linear(2 * h, self.heads * d, bias=False)
        self.k_proj = nn.Linear(2 * h, self.kv_heads * d, bias=False)
        self.v_proj = nn.Linear(2 * h, self.kv_heads * d, bias=False)
        self.o_proj = nn.Linear(self.heads * d, h, bias=False)
        self.rope_theta = config.rope_theta  # frequencies computed per call: a buffer would load as garbage

    def forward(self, x: Tensor, positions: Tensor, mask: Tensor, cache: KVCache | None) -> Tensor:
        return self.attend(x, positions, x, positions, mask, cache)

    def attend(self, x: Tensor, positions: Tensor, x_kv: Tensor, kv_positions: Tensor, mask: Tensor,
               cache: KVCache | None) -> Tensor:
        """Queries of the pairs `x` at `positions`, keys and values of the pairs `x_kv` at `kv_positions` (the same
        pairs but in training's pass 0 on answer windows, which needs every position's keys and few queries)."""
        b, t, _ = x.shape
        s = x_kv.shape[1]
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x_kv).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x_kv).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        rope = self._rope(positions, q.dtype)  # once for both where they are the same pairs (decoding's every step)
        kv_rope = rope if kv_positions is positions else self._rope(kv_positions, k.dtype)
        q, k = _rotate(q, *rope), _rotate(k, *kv_rope)
        if cache is not None:
            k, v = cache.append(k, v)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=self.heads != self.kv_heads)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))

    def _rope(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        d = self.head_dim
        inv_freq = 1.0 / self.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32, device=positions.device) / d)
        angles = positions.float()[..., None] * inv_freq
        cos, sin = torch.cat([angles.cos()] * 2, -1).to(dtype), torch.cat([angles.sin()] * 2, -1).to(dtype)
        if positions.dim() == 2:  # positions of each row `[B, T]` (training's answer windows): the same for every head
            cos, sin = cos[:, None], sin[:, None]
        return cos, sin


class RMSNorm(nn.RMSNorm):
    """RMSNorm that normalises an input of another dtype than its weight in the weight's and returns the input's:
    under bfloat16 autocast (training) a bfloat16 input would miss the fused kernel (torch warns and normalises op
    by op, in float32, to the same bfloat16 result)."""

    def forward(self, x: Tensor) -> Tensor:
        if x.dtype == self.weight.dtype:
            return super().forward(x)
        return super().forward(x.to(self.weight.dtype)).to(x.dtype)


class MLP(nn.Module):
    def __init__(self, config: Eagle3Config):
        super().__init__()
        h, i = config.hidden_size, config.intermediate_size
        self.gate_proj, self.up_proj = nn.Linear(h, i, bias=False), nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, config: Eagle3Config):
        super().__init__()
        h, eps = config.hidden_size, config.rms_norm_eps
        self.hidden_norm, self.input_layernorm = RMSNorm(h, eps=eps), RMSNorm(h, eps=eps)
        self.self_attn, self.mlp = Attention(config), MLP(config)
        self.post_attention_layernorm = RMSNorm(h, eps=eps)

    def forward(self, embeds: Tensor, features: Tensor, positions: Tensor, mask: Tensor,
                cache: KVCache | None, window: Tensor | None = None) -> Tensor:
        """The pairs' outputs; with `window [B, W]` (training's pass 0 on answer windows) the keys and values of
        every pair go into `cache` and the rest (queries, attention, MLP) runs at those positions only."""
        x = torch.cat([self.input_layernorm(embeds), self.hidden_norm(features)], dim=-1)
        if window is None:
            out = features + self.self_attn(x, positions, mask, cache)
        else:
            out = _pick(features, window) + self.self_attn.attend(_pick(x, window), window, x, positions, mask, cache)
        return out + self.mlp(self.post_attention_layernorm(out))


def _pick(values: Tensor, window: Tensor) -> Tensor:
    """`values [B, T, F]` at each row's positions `window [B, W]`: `[B, W, F]`."""
    return values.gather(1, window[..., None].expand(-1, -1, values.shape[-1]))


class Eagle3Head(PreTrainedModel):
    config_class = Eagle3Config
    base_model_prefix = "eagle3"
    _no_split_modules = ["DecoderLayer"]

    def __init__(self, config: Eagle3Config):
        super().__init__(config)
        h = config.hidden_size
        self.embed_tokens = nn.Embedding(config.vocab_size, h)
        self.embed_tokens.weight.requires_grad_(False)  # the target's, frozen (`from_target`)
        self.fc = nn.Linear(len(config.target_layers) * h, h, bias=False)
        self.midlayer = DecoderLayer(config)
        self.norm = RMSNorm(h, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(h, config.draft_vocab_size, bias=False)
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=1 / math.sqrt(module.in_features))
        elif isinstance(module, nn.RMSNorm):
            nn.init.ones_(module.weight)

    @classmethod
    def from_pretrained(cls, *args, **kwargs) -> Eagle3Head:
        head = super().from_pretrained(*args, **kwargs)
        head.embed_tokens.weight.requires_grad_(False)  # loading makes every parameter trainable again
        return head

    @classmethod
    def from_target(cls, target: PreTrainedModel, draft_vocab_size: int, layers: list[int] | None = None,
                    output_rows: Tensor | None = None) -> Eagle3Head:
        """A head at the target's width, its embedding the target's. `output_rows [draft vocab]` (target ids):
        its final norm and output layer start as the target's at those ids, as vllm-project/speculators starts
        them, instead of at random."""
        head = cls(config_for_target(target.config, draft_vocab_size, layers))
        head.embed_tokens.weight.data.copy_(target.get_input_embeddings().weight.detach().float())
        if output_rows is not None:
            head.lm_head.weight.data.copy_(target.get_output_embeddings().weight.detach().float()[output_rows])
            head.norm.weight.data.copy_(_final_norm(target).weight.detach().float())
        return head.to(next(target.parameters()).dtype)

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.parameters() if p.requires_grad]

    def project(self, target_features: Tensor) -> Tensor:
        """The target's concatenated hidden states `[..., 3H]` as head features `[..., H]`."""
        return self.fc(target_features)

    def forward(self, features: Tensor, input_ids: Tensor, cache: KVCache | None = None,
                attention_mask: Tensor | None = None, positions: Tensor | None = None,
                tree_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """(out `[B, T, H]`, logits `[B, T, draft vocab]`) of the pairs (`features [B, T, H]`, already
        projected or the head's own outputs; `input_ids [B, T]` target ids) at the positions after `cache`.
        `attention_mask [B, T]` (1: a real token) masks padded keys when training without a cache. A tree
        expansion gives the pairs' `positions [T]` and which cached and new pairs each sees (`tree_mask`,
        bool `[T, len(cache) + T]`) instead."""
        start, t = (len(cache) if cache is not None else 0), input_ids.shape[1]
        if tree_mask is not None:
            out = self.midlayer(self.embed_tokens(input_ids), features, positions, tree_mask[None, None], cache)
            return out, self.lm_head(self.norm(out))
        positions = torch.arange(start, start + t, device=input_ids.device)
        keys = torch.arange(start + t, device=input_ids.device)
        mask = (keys[None, :] <= positions[:, None])[None, None]  # [1, 1, T, start + T]: causal
        if attention_mask is not None:  # padded keys are hidden; a padded row still sees itself (no NaN)
            mask = (mask & attention_mask.bool()[:, None, None, :]) | (keys[None, :] == positions[:, None])
        out = self.midlayer(self.embed_tokens(input_ids), features, positions, mask, cache)
        return out, self.lm_head(self.norm(out))


    def decode_step(self, features: Tensor, input_ids: Tensor, positions: Tensor, slots: Tensor, mask: Tensor,
                    keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """`forward` at inference on a `StaticKVCache`'s buffers `keys`/`values`, with every shape fixed by the
        pairs T and the capacity and every index a tensor, so that one compiled graph serves every position: the
        pairs are written at `slots [T]`, sit at `positions [T]` and see the keys `mask [T, capacity]` (bool)."""
        cache = _SlotWriter(keys, values, slots)
        out = self.midlayer(self.embed_tokens(input_ids), features, positions, mask[None, None], cache)
        return out, self.lm_head(self.norm(out))

    def unrolled(self, features: Tensor, input_ids: Tensor, steps: int, attention_mask: Tensor | None = None,
                 rows: Tensor | None = None) -> list[Tensor]:
        """EAGLE-3's training-time test: logits `[B, T, draft vocab]` of `steps` passes over every pair. Pass 0
        reads `features` (projected); pass k reads the head's own output of pass k-1 at the position before,
        as decoding's k-th proposal after a block's start does. Its pair at position j attends to pass 0's
        pairs up to j-k and to pass m's pair at j-(k-m) (1 <= m <= k): the keys a proposal sees at decoding.
        `rows [B, T]` (bool): only those positions' logits, `[N, draft vocab]` in row-major order: the output
        layer, the larger half of a pass, then runs where the loss reads it (training: the answer positions), and
        the passes run on each row's answer window only (`_unrolled_on_windows`)."""
        t = input_ids.shape[1]
        positions = torch.arange(t, device=input_ids.device)
        embeds, cache, logits = self.embed_tokens(input_ids), KVCache(), []
        keep = None if attention_mask is None else attention_mask.bool()[:, None, None, :]
        if rows is not None:
            return self._unrolled_on_windows(embeds, features, rows, keep, steps)
        for k in range(steps):
            blocks = [positions[None, :] <= positions[:, None] - k]  # pass 0: causal, k positions back
            blocks += [positions[None, :] == positions[:, None] - (k - m) for m in range(1, k + 1)]
            masks = [b[None, None] if keep is None else b[None, None] & keep for b in blocks]
            mask = torch.cat(masks, dim=-1)
            mask[..., -t:] |= torch.eye(t, dtype=torch.bool, device=mask.device)  # a padded row sees itself
            out = self.midlayer(embeds, features, positions, mask, cache)
            logits.append(self.lm_head(self.norm(out)))
            features = torch.cat([torch.zeros_like(out[:, :1]), out[:, :-1]], dim=1)
        return logits

    def _unrolled_on_windows(self, embeds: Tensor, features: Tensor, rows: Tensor, keep: Tensor | None,
                             steps: int) -> list[Tensor]:
        """`unrolled` with `rows`, run on each row's window `[a - (steps - 1), z]` (a, z: its first and last row)
        instead of every position. Pass k's row j reads pass k-1 at j-1 and the keys of pass m at j-(k-m), so
        going back from the last pass at the rows, pass k is needed from a-(steps-1-k) on and nothing reads a
        pass before the window; only pass 0's keys and values are needed everywhere. The prompt and the padding
        (half the positions or more) are skipped but for those. Each row's window starts at its own position: the
        pairs are gathered into `[B, W]` with per-row positions, the rest of a short window masked out."""
        b, t = rows.shape
        device = rows.device
        at = torch.arange(t, device=device).expand(b, t)
        anywhere = rows.any(dim=1)
        first_row = torch.where(rows, at, t).amin(dim=1).where(anywhere, 0)
        last_row = torch.where(rows, at, -1).amax(dim=1).where(anywhere, 0)
        start = (first_row - (steps - 1)).clamp(min=0)
        width = int((last_row - start).max()) + 1
        window = start[:, None] + torch.arange(width, device=device)  # [B, W] positions
        valid = (window <= last_row[:, None]) & anywhere[:, None]
        window = window.clamp(max=t - 1)  # past a row's window: a copy of its last position, masked out
        embeds_w, rows_w = _pick(embeds, window), rows.gather(1, window) & valid
        keys0 = torch.arange(t, device=device)
        own = torch.eye(width, dtype=torch.bool, device=device)
        cache, logits = KVCache(), []
        for k in range(steps):
            blocks = [(keys0[None, None, :] <= window[:, :, None] - k)
                      & (True if keep is None else keep[:, 0])]  # [B, W, T]: pass 0's keys
            blocks += [(window[:, None, :] == window[:, :, None] - (k - m)) & valid[:, None, :]
                       for m in range(1, k + 1)]  # [B, W, W]: pass m's pair at j-(k-m)
            blocks[-1] = blocks[-1] | (own if k else (keys0[None, None, :] == window[:, :, None]))  # no empty row
            mask = torch.cat(blocks, dim=-1)[:, None]
            if k == 0:
                out = self.midlayer(embeds, features, keys0, mask, cache, window=window)
            else:  # pass k-1 at j-1: within the window, but at its first position (never read: see above)
                features = torch.cat([torch.zeros_like(out[:, :1]), out[:, :-1]], dim=1)
                out = self.midlayer(embeds_w, features, window, mask, cache)
            logits.append(self.lm_head(self.norm(out[rows_w])))
        return logits


def target_features(outputs_hidden_states: tuple[Tensor, ...], layers: list[int]) -> Tensor:
    """The head's input from a target forward run with `output_hidden_states=True`: `[..., T, 3H]`."""
    return torch.cat([outputs_hidden_states[i] for i in layers], dim=-1)


def shift_features(features: Tensor) -> Tensor:
    """Pair i reads the feature of position i-1: `[B, T, F]` shifted right by one, zeros first."""
    return torch.cat([torch.zeros_like(features[:, :1]), features[:, :-1]], dim=1)
