/* lq_gguf_hf.h -- the Hugging Face view of a GGUF model: which architectures map onto a
 * transformers model, the tensor names and llama.cpp's q/k row permutation, config.json, and the
 * tokenizer files rebuilt from the GGUF vocabulary.
 *
 * One table row per architecture (lq_gguf_hf.c k_archs); one per BPE pre-tokenizer
 * (k_pretok). Everything else is derived. */
#ifndef LQ_GGUF_HF_H
#define LQ_GGUF_HF_H

#include "lq_gguf.h"

typedef struct lq_gguf_arch {
    const char *gguf;       /* general.architecture */
    const char *model_type; /* config.json model_type */
    const char *hf_class;   /* config.json architectures[0] */
    int         permute_qk; /* convert_hf_to_gguf.py interleaved the q/k rows per head */
    int         qkv_bias;   /* attn_q/k/v carry biases (config.json has no key for it) */
    int         qk_norm;    /* attn_q_norm / attn_k_norm per head (qwen3, gemma3) */
    int         gemma;      /* post norms, ffn_norm = pre_feedforward_layernorm, norm weights
                               stored as 1 + w, Gemma hyper-parameters in config.json */
    int fused;              /* attn_qkv and a gate+up ffn_up (phi3); rope_factors_short / long
                               tensors are LongRoPE's lists, which go to config.json */
    int moe;                /* experts stacked in ffn_{gate,up,down}_exps [E, n, k], a router
                               ffn_gate_inp: 1 Mixtral's names (a llama with expert_count),
                               2 Qwen's (and their shared expert *_shexp) */
} lq_gguf_arch;

/* Architecture of g (a llama with llama.expert_count > 0 is Mixtral); LQ_ERR_UNSUPPORTED_ARCH
 * "unsupported architecture gemma3 (supported: llama, qwen2)" otherwise, LQ_ERR_GGUF_FORMAT when
 * general.architecture is missing. */
lq_status lq_gguf_hf_arch(const lq_gguf *g, const lq_gguf_arch **out, lq_err *err);

/* Hugging Face name of a GGUF tensor ("blk.3.attn_q.weight" ->
 * "model.layers.3.self_attn.q_proj.weight"). *perm_heads > 0: the rows were permuted by
 * llama.cpp over that many heads (undo on read). Returns false for a name with no counterpart. */
bool lq_gguf_hf_tensor_name(const lq_gguf *g, const lq_gguf_arch *a, const char *gguf_name,
                            char *hf, size_t cap, int *perm_heads);
/* For the experts' stacked tensors the name from lq_gguf_hf_tensor_name holds one '*' where the
 * expert's index goes ("model.layers.3.mlp.experts.*.gate_proj.weight"): each expert's [n, k]
 * slice of the [E, n, k] tensor is a Hugging Face tensor of its own. */
bool lq_gguf_hf_is_stacked(const char *hf);
/* Whether a GGUF tensor holds configuration, not weights (phi3's rope_factors_*: config.json's
 * LongRoPE factor lists); such tensors have no Hugging Face tensor. */
bool lq_gguf_hf_tensor_is_config(const lq_gguf_arch *a, const char *gguf_name);

/* What llama.cpp added to the tensor of Hugging Face name hf_name (Gemma's norm weights are
 * stored as 1 + w); readers subtract it. 0 for every other tensor. */
float lq_gguf_hf_shift(const lq_gguf_arch *a, const char *hf_name);

/* Undo llama.cpp's permute(): rows [n, k] of n / heads rows per head, where llama.cpp stored HF
 * row h*hd + j*hd/2 + i at h*hd + 2*i + j. In place (scratch: one head's rows). false: NOMEM. */
bool lq_gguf_unpermute_rows(float *w, int64_t n, int64_t k, int heads);

/* config.json text (malloc'd) for g: sizes, RoPE, norms, vocabulary, special token ids,
 * tie_word_embeddings (no output.weight), torch_dtype. */
lq_status lq_gguf_hf_config(const lq_gguf *g, const lq_gguf_arch *a, const char *torch_dtype,
                            char **json, int64_t *len, lq_err *err);

/* Side file `name` of the HF layout rebuilt from the GGUF metadata: "tokenizer.json" (BPE
 * vocabularies, "gpt2": vocab, merges, added tokens, the pre-tokenizer of tokenizer.ggml.pre),
 * "tokenizer.model" (SentencePiece vocabularies, "llama": a SentencePiece BPE model proto with
 * the pieces, scores and types), "tokenizer_config.json", "special_tokens_map.json",
 * "generation_config.json". LQ_ERR_NOT_FOUND when g implies no such file (tokenizer.model of a
 * BPE vocabulary); LQ_ERR_GGUF_TOKENIZER naming a vocabulary or pre-tokenizer llmquant cannot
 * rebuild. *data is malloc'd. */
lq_status lq_gguf_hf_file(const lq_gguf *g, const char *name, char **data, int64_t *len,
                          lq_err *err);
/* The names lq_gguf_hf_file can produce, in the order a checkpoint lists them (NULL-ended). */
extern const char *const lq_gguf_hf_file_names[];

/* SentencePiece model proto (sentencepiece_model.proto fields) from pieces, scores and types
 * (1 NORMAL, 2 UNKNOWN, 3 CONTROL, 4 USER_DEFINED, 5 UNUSED, 6 BYTE): model_type BPE, the
 * identity normalizer. Shared by the GGUF rebuild and tools that convert other vocabularies. */
typedef struct lq_spm_spec {
    int     add_dummy_prefix, remove_extra_whitespaces, byte_fallback;
    int32_t unk_id, bos_id, eos_id, pad_id; /* -1: none */
} lq_spm_spec;
lq_status lq_spm_model_write(const char *const *pieces, const int64_t *piece_lens,
                             const float *scores, const int32_t *types, int64_t n,
                             const lq_spm_spec *spec, char **data, int64_t *len, lq_err *err);

#endif
