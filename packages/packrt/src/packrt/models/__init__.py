"""``packrt.models``: reference transformers written only with packrt's public API.

- :class:`BertEncoder` / :class:`EncoderConfig`: a BERT-style post-LN encoder (token,
  position and token-type embeddings; multi-head attention with a padding mask; GELU MLP).
- :class:`RobertaEncoder`: the same encoder with RoBERTa's position numbering (padding offset).
- :class:`SequenceClassifier`: an encoder under a sequence classification head (cross-encoder rerankers),
  scoring pairs through :class:`CrossEncoder` (``predict``, ``rank``).
- :class:`CausalDecoder` / :class:`DecoderConfig`: a small Llama-like decoder (RMSNorm,
  rotary causal attention, SiLU-gated MLP, LM head optionally tied to the embedding).

:func:`describe` says what a path holds (encoder or causal LM, its family and head), the one answer
``packrt serve``, packrt-ray and :func:`from_pretrained` read. :func:`from_pretrained` serves a Hugging
Face directory or a GGUF file (the causal families:
:class:`GPT2LMHeadModel`, :class:`LlamaForCausalLM`, :class:`Qwen3ForCausalLM`, :class:`Gemma3ForCausalLM`,
:class:`Qwen3MoeForCausalLM`, :class:`Phi3ForCausalLM`, :class:`MinistralForCausalLM`, :class:`SmolLM3ForCausalLM`,
:class:`GraniteForCausalLM`, :class:`Gemma2ForCausalLM`,
:class:`Olmo2ForCausalLM`, :class:`GptOssForCausalLM`); :func:`load_tokenizer` gives the
``tokenizers.Tokenizer`` of either (a GGUF file's is built from its metadata).
:class:`BatchDecoder` decodes several sequences of a causal LM together, each as it is alone, with its own
sampling, stop rules and logits processor (:class:`Penalties`: OpenAI's presence and frequency penalties;
:class:`LogitBias`: its logit_bias).

Both are meant to be declared under :func:`packrt.meta_init` (no weight storage) and bound
to a checkpoint with ``packrt.io.load_checkpoint(model, path, assign=True)``, so the weights
live once, memory-mapped or packed as each layer's residency says. Their parameter names
are listed in :mod:`packrt.models.encoder` and :mod:`packrt.models.decoder`; they mirror a
plain torch module tree built the same way, so ``state_dict`` keys carry over one to one.
"""

from packrt.models.attention import KVCache
from packrt.models.batch_decode import BatchDecoder, Emitted
from packrt.models.classifier import SequenceClassifier
from packrt.models.config_schema import ConfigError
from packrt.models.cross_encoder import CrossEncoder, RankError
from packrt.models.decoder import CausalDecoder, DecoderConfig
from packrt.models.encoder import BertEncoder, EncoderConfig
from packrt.models.gemma2 import Gemma2ForCausalLM
from packrt.models.gemma3 import Gemma3ForCausalLM
from packrt.models.generation import CausalLM
from packrt.models.gguf_tokenizer import load_tokenizer
from packrt.models.gpt2 import GPT2LMHeadModel
from packrt.models.gpt_oss import GptOssForCausalLM
from packrt.models.granite import GraniteForCausalLM
from packrt.models.kinds import ModelDescription, PromptNameError, describe
from packrt.models.layers import MultiHeadAttention
from packrt.models.llama import LlamaForCausalLM
from packrt.models.logits_processing import LogitBias, LogitsProcessor, Penalties
from packrt.models.ministral import MinistralForCausalLM
from packrt.models.olmo2 import Olmo2ForCausalLM
from packrt.models.phi3 import Phi3ForCausalLM
from packrt.models.pretrained import UnsupportedModelError, from_pretrained, supported
from packrt.models.qwen3 import Qwen3ForCausalLM
from packrt.models.qwen3_moe import Qwen3MoeForCausalLM
from packrt.models.roberta import RobertaEncoder
from packrt.models.rotary import RotaryEmbedding, rotary_tables, rotate_half
from packrt.models.sentence import BatchSizeError, SentenceEncoder, TextTypeError
from packrt.models.smollm3 import SmolLM3ForCausalLM

__all__ = [
    "BatchDecoder",
    "BatchSizeError",
    "BertEncoder",
    "CausalDecoder",
    "CausalLM",
    "ConfigError",
    "CrossEncoder",
    "GPT2LMHeadModel",
    "GptOssForCausalLM",
    "GraniteForCausalLM",
    "Gemma2ForCausalLM",
    "Gemma3ForCausalLM",
    "KVCache",
    "LlamaForCausalLM",
    "MinistralForCausalLM",
    "ModelDescription",
    "PromptNameError",
    "RankError",
    "Olmo2ForCausalLM",
    "Phi3ForCausalLM",
    "Qwen3ForCausalLM",
    "Qwen3MoeForCausalLM",
    "SmolLM3ForCausalLM",
    "RobertaEncoder",
    "SentenceEncoder",
    "SequenceClassifier",
    "TextTypeError",
    "UnsupportedModelError",
    "describe",
    "from_pretrained",
    "load_tokenizer",
    "supported",
    "Emitted",
    "LogitBias",
    "LogitsProcessor",
    "Penalties",
    "DecoderConfig",
    "EncoderConfig",
    "MultiHeadAttention",
    "RotaryEmbedding",
    "rotary_tables",
    "rotate_half",
]
