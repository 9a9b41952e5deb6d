"""``packrt.models``: reference transformers written only with packrt's public API.

- :class:`BertEncoder` / :class:`EncoderConfig`: a BERT-style post-LN encoder (token,
  position and token-type embeddings; multi-head attention with a padding mask; GELU MLP).
- :class:`CausalDecoder` / :class:`DecoderConfig`: a small Llama-like decoder (RMSNorm,
  rotary causal attention, SiLU-gated MLP, LM head optionally tied to the embedding).

Both are meant to be declared under :func:`packrt.meta_init` (no weight storage) and bound
to a checkpoint with ``packrt.io.load_checkpoint(model, path, assign=True)``, so the weights
live once, memory-mapped or packed as each layer's residency says. Their parameter names
are listed in :mod:`packrt.models.encoder` and :mod:`packrt.models.decoder`; they mirror a
plain torch module tree built the same way, so ``state_dict`` keys carry over one to one.
"""

from packrt.models.attention import KVCache
from packrt.models.decoder import CausalDecoder, DecoderConfig
from packrt.models.encoder import BertEncoder, EncoderConfig
from packrt.models.generation import CausalLM
from packrt.models.gpt2 import GPT2LMHeadModel
from packrt.models.layers import MultiHeadAttention
from packrt.models.llama import LlamaForCausalLM
from packrt.models.pretrained import UnsupportedModelError, from_pretrained, supported
from packrt.models.rotary import RotaryEmbedding, rotary_tables, rotate_half
from packrt.models.sentence import BatchSizeError, SentenceEncoder, TextTypeError

__all__ = [
    "BatchSizeError",
    "BertEncoder",
    "CausalDecoder",
    "CausalLM",
    "GPT2LMHeadModel",
    "KVCache",
    "LlamaForCausalLM",
    "SentenceEncoder",
    "TextTypeError",
    "UnsupportedModelError",
    "from_pretrained",
    "supported",
    "DecoderConfig",
    "EncoderConfig",
    "MultiHeadAttention",
    "RotaryEmbedding",
    "rotary_tables",
    "rotate_half",
]
