"""A small Qwen-1 implementation, served by the stand-in hub as the repositories' remote code.

Same module names and parameter names as the real Qwen-1 checkpoints (``transformer.wte``,
``transformer.h.{i}.{ln_1,attn.c_attn,attn.c_proj,ln_2,mlp.w1,mlp.w2,mlp.c_proj}``,
``transformer.ln_f``, ``lm_head``): pre-norm blocks with RMSNorm, rotary position embeddings,
a SwiGLU MLP whose width is half of ``intermediate_size``, and untied input and output
embeddings. As in the real code, ``hidden_states`` holds the input of every block plus the
final normed output (``num_hidden_layers + 1`` entries). No key/value cache: the stand-in
scores and extracts, it does not generate.
"""

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import (
    BaseModelOutputWithPast,
    CausalLMOutputWithPast,
)

from .configuration_qwen import QWenConfig


class QWenRMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.to(x.dtype) * self.weight


def rotate(x, positions, base, rotary_dim):
    """Rotary embedding on the first ``rotary_dim`` channels of ``x`` [batch, heads, time, head_dim]."""
    inv_freq = 1.0 / (base ** (torch.arange(0, rotary_dim, 2, device=x.device, dtype=torch.float32) / rotary_dim))
    angles = positions[:, None, :, None].float() * inv_freq  # [batch, 1, time, rotary_dim / 2]
    cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()
    rot, rest = x[..., :rotary_dim].float(), x[..., rotary_dim:]
    half = rotary_dim // 2
    rotated_half = torch.cat([-rot[..., half:], rot[..., :half]], -1)
    return torch.cat([(rot * cos + rotated_half * sin).to(x.dtype), rest], -1)


class QWenAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.kv_channels
        self.rotary_dim = int(self.head_dim * config.rotary_pct)
        self.base = config.rotary_emb_base
        self.dropout = config.attn_dropout_prob
        projection = self.num_heads * self.head_dim
        self.c_attn = nn.Linear(config.hidden_size, 3 * projection, bias=True)
        self.c_proj = nn.Linear(projection, config.hidden_size, bias=not config.no_bias)

    def forward(self, x, positions, mask):
        batch, time, _ = x.shape
        q, k, v = (
            t.view(batch, time, self.num_heads, self.head_dim).transpose(1, 2)
            for t in self.c_attn(x).chunk(3, dim=-1)
        )
        q, k = rotate(q, positions, self.base, self.rotary_dim), rotate(k, positions, self.base, self.rotary_dim)
        dropout = self.dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
        return self.c_proj(out.transpose(1, 2).reshape(batch, time, -1))


class QWenMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        width = config.intermediate_size // 2
        self.w1 = nn.Linear(config.hidden_size, width, bias=not config.no_bias)
        self.w2 = nn.Linear(config.hidden_size, width, bias=not config.no_bias)
        self.c_proj = nn.Linear(width, config.hidden_size, bias=not config.no_bias)

    def forward(self, x):
        return self.c_proj(self.w1(x) * F.silu(self.w2(x)))


class QWenBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = QWenRMSNorm(config.hidden_size, config.layer_norm_epsilon)
        self.attn = QWenAttention(config)
        self.ln_2 = QWenRMSNorm(config.hidden_size, config.layer_norm_epsilon)
        self.mlp = QWenMLP(config)

    def forward(self, x, positions, mask):
        x = x + self.attn(self.ln_1(x), positions, mask)
        return x + self.mlp(self.ln_2(x))


class QWenPreTrainedModel(PreTrainedModel):
    config_class = QWenConfig
    base_model_prefix = "transformer"
    _no_split_modules = ["QWenBlock"]
    supports_gradient_checkpointing = False


def attention_mask_4d(attention_mask, batch, time, device):
    """Causal mask combined with the padding mask, True where a query may attend. Every query
    keeps its own position, so a padded row never attends to nothing (which would give NaN)."""
    causal = torch.ones(time, time, dtype=torch.bool, device=device).tril()
    if attention_mask is None:
        return causal[None, None].expand(batch, 1, time, time)
    keys = attention_mask.to(device=device, dtype=torch.bool)[:, None, None, :]
    return (causal[None, None] & keys) | torch.eye(time, dtype=torch.bool, device=device)[None, None]


class QWenModel(QWenPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.wte = nn.Embedding(config.vocab_size, config.hidden_size)
        self.drop = nn.Dropout(config.emb_dropout_prob)
        self.h = nn.ModuleList(QWenBlock(config) for _ in range(config.num_hidden_layers))
        self.ln_f = QWenRMSNorm(config.hidden_size, config.layer_norm_epsilon)
        self.post_init()

    def get_input_embeddings(self):
        return self.wte

    def set_input_embeddings(self, value):
        self.wte = value

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, inputs_embeds=None,
                output_hidden_states=None, return_dict=None, **kwargs):
        hidden = self.wte(input_ids) if inputs_embeds is None else inputs_embeds
        batch, time, _ = hidden.shape
        if position_ids is None:
            if attention_mask is None:
                position_ids = torch.arange(time, device=hidden.device)[None].expand(batch, time)
            else:  # left padding: positions count real tokens only
                position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0).to(hidden.device)
        mask = attention_mask_4d(attention_mask, batch, time, hidden.device)
        hidden = self.drop(hidden)
        output_hidden_states = (output_hidden_states if output_hidden_states is not None
                                else self.config.output_hidden_states)
        all_hidden = []
        for block in self.h:
            all_hidden.append(hidden)
            hidden = block(hidden, position_ids, mask)
        hidden = self.ln_f(hidden)
        all_hidden.append(hidden)
        return BaseModelOutputWithPast(
            last_hidden_state=hidden, hidden_states=tuple(all_hidden) if output_hidden_states else None
        )


class QWenLMHeadModel(QWenPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.transformer = QWenModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.transformer.wte

    def set_input_embeddings(self, value):
        self.transformer.wte = value

    def get_output_embeddings(self):
        return self.lm_head

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, inputs_embeds=None, labels=None,
                output_hidden_states=None, return_dict=None, **kwargs):
        out = self.transformer(
            input_ids, attention_mask=attention_mask, position_ids=position_ids, inputs_embeds=inputs_embeds,
            output_hidden_states=output_hidden_states,
        )
        logits = self.lm_head(out.last_hidden_state)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(
                logits[:, :-1].reshape(-1, logits.size(-1)).float(), labels[:, 1:].reshape(-1), ignore_index=-100
            )
        return CausalLMOutputWithPast(loss=loss, logits=logits, hidden_states=out.hidden_states)
