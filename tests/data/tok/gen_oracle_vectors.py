#!/usr/bin/env python3
"""Generate the oracle vectors of tests/test_tokenizer.c in tests/data/tok/ (cases.txt, *.ids).

Command (from the repository root; needs sentencepiece, tokenizers, protobuf):
    python3 tests/data/tok/gen_oracle_vectors.py /work/shared

Writes
  cases.txt            one test string per line, UTF-8 hex-encoded ("" for the empty string)
  small_spm.model      a 600-piece SentencePiece BPE model trained here (user-defined symbols,
                       byte fallback, remove_extra_whitespaces on)
  llama2_hf.json       the Llama-2 tokenizer.model converted to tokenizer.json the way
                       transformers' LlamaConverter (legacy) does it: Prepend+Replace normalizer,
                       BPE with merges ordered by piece score, byte_fallback, fuse_unk
  gpt2style.json       byte-level BPE (ByteLevel pre-tokenizer with the GPT-2 regex, prefix space)
                       trained on wiki.valid.tokens, with non-special added tokens
  qwenstyle.json       byte-level BPE, NFC normalizer, Split with the Llama-3 regex, ByteLevel
                       without regex, ignore_merges, BOS template
  <name>.ids           expected ids, one line per case (space separated, no BOS); names:
                       llama2_spm (shared tokenizer.model), small_spm, llama2_hf, llama2_meta
                       (llama2_hf with a Metaspace prepend_scheme=first pre-tokenizer instead of
                       the normalizer, built in memory by the C test too), gpt2style, qwenstyle
Special added tokens are not parsed from the text (encode_special_tokens = True): text is text.
The reference libraries are driven through load_refs(), shared with tests/py/test_tok_oracle.py.
"""
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
             r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def edge_strings():
    s = ["", " ", "  ", "   ", "a", " a", "  a", "a ", "a  ", "a  b", "a   b  c   ", "\n", "\n\n",
         " \n ", "\t", "\t\tx", "\r\n", "a\r\nb", "hello world", "Hello, World!", "HELLO wOrLd",
         "12345678", "3.14159", "1,000,000", "2024-01-01", "x=y+z*2", "don't I'll we've they're",
         "DON'T YOU'D", "it's", "'s", "''", "\"quoted\"", "(parens) [brackets] {braces}",
         "日本語のテキスト", "中文字符", "한국어 텍스트", "Ελληνικά", "русский язык", "עברית",
         "العربية", "हिन्दी", "ไทย", "🦙 llama 🤗", "👨‍👩‍👧‍👦", "🏳️‍🌈", "e\u0301", "\u00e9", "Å",
         "\ufb01", "\u2460", "\u00bd", "x\u00a0y", "a\u3000b", "a\u2028b", "\u200b", "\u0000",
         "\u0001\u0002", "\u007f", "\u0085", "\ue000", "\ufffd", "\U0001F9EC", "\U00010348",
         "ꙮ", "<s>", "</s>", "<unk>", "<0x0A>", "<|endoftext|>", "<|begin_of_text|>", "▁",
         "▁▁hello", "▁ ▁", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "the the the the",
         "    indented code", "def f(x):\n    return x\n", "@-@", "a @-@ b", " @,@ ",
         "Valkyria Chronicles", "hello world!", "xhello worldx", "<ns1><ns1>", "a<ns1>b",
         " the end", "the end", "THE END", "Hello\u0301", "\u0041\u030a", "ﬁsh",
         "tab\there", "multi\n\nline\n\n\ntext", "   leading", "trailing   ", "mixed 中 english",
         "numbers 123 4567 89012", "10000000000", "٣٤٥", "١٢٣", "Ⅻ"]
    rng = random.Random(1234)
    pools = ["abcdefghijklmnopqrstuvwxyz", "ABCXYZ", "0123456789", " ", "  \n\t", ".,;:!?'\"-()@",
             "éüßçñ", "日本中文한", "🦙🤗👍", "\u0301\u00a0\u200b", "▁<>/|"]
    for _ in range(300):
        n = rng.randint(1, 40)
        s.append("".join(rng.choice(rng.choice(pools)) for _ in range(n)))
    return s


def cases(shared):
    with open(os.path.join(shared, "data/wikitext2/wiki.test.raw"), encoding="utf-8") as f:
        lines = f.read().split("\n")[:200]
    return lines + ["\n".join(lines)] + edge_strings()


def build_llama2_hf(model_path):
    """transformers' LlamaConverter (legacy=True) without transformers."""
    from sentencepiece import sentencepiece_model_pb2 as pb
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, processors
    m = pb.ModelProto()
    m.ParseFromString(open(model_path, "rb").read())
    vocab = {p.piece: i for i, p in enumerate(m.pieces)}
    score = {p.piece: p.score for p in m.pieces}
    merges = []
    for piece in vocab:
        local = [(piece[:k], piece[k:], score[piece]) for k in range(1, len(piece))
                 if piece[:k] in vocab and piece[k:] in vocab]
        local.sort(key=lambda x: (vocab[x[0]], vocab[x[1]]))
        merges.extend(local)
    merges.sort(key=lambda x: x[2], reverse=True)
    merges = [(a, b) for a, b, _ in merges]
    tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.add_special_tokens([AddedToken(p, normalized=False, special=True)
                            for p in ("<unk>", "<s>", "</s>")])
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", 1)])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    return tok


def metaspace_variant(js):
    """llama2_hf with the non-legacy converter layout (no normalizer, Metaspace first)."""
    j = json.loads(js)
    j["normalizer"] = None
    j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                          "split": False}
    return json.dumps(j, ensure_ascii=False)


def train_bytelevel(shared, style):
    from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                            pre_tokenizers, processors, trainers)
    with open(os.path.join(shared, "data/wikitext2/wiki.valid.tokens"), encoding="utf-8") as f:
        text = f.read()[:300000]
    lines = text.split("\n")
    if style == "gpt2":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
        special = ["<|endoftext|>"]
        vs = 900
    else:
        tok = Tokenizer(models.BPE(ignore_merges=True))
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_RE), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        special = ["<|begin_of_text|>", "<|end_of_text|>"]
        vs = 1100
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vs, special_tokens=special, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(lines, trainer)
    tok.add_tokens([AddedToken("<ns1>", normalized=False),
                    AddedToken("hello world", normalized=True),
                    AddedToken("@-@", single_word=True, normalized=False),
                    AddedToken(" the end", normalized=False, lstrip=False),
                    AddedToken("Valkyria", normalized=True, rstrip=True)])
    tok.add_special_tokens([AddedToken("<|pad|>", special=True, normalized=False)])
    if style == "gpt2":
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    else:
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.TemplateProcessing(
            single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A $B",
            special_tokens=[("<|begin_of_text|>", bos)])
    return tok


def train_small_spm(shared, out_path):
    import io
    import sentencepiece as spm
    with open(os.path.join(shared, "data/wikitext2/wiki.valid.tokens"), encoding="utf-8") as f:
        lines = [x for x in f.read()[:200000].split("\n") if x.strip()]
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=buf,
                                   model_type="bpe", vocab_size=600, byte_fallback=True,
                                   character_coverage=0.9995, normalization_rule_name="identity",
                                   remove_extra_whitespaces=True, split_digits=True,
                                   user_defined_symbols=["@-@", "<ns1>", "hello world"],
                                   control_symbols=["<ctl>"], num_threads=1, minloglevel=2)
    with open(out_path, "wb") as f:
        f.write(buf.getvalue())


def load_refs(shared, data_dir):
    """name -> encode(str) -> list[int] for every vector set."""
    import sentencepiece as spm
    from tokenizers import Tokenizer
    refs = {}
    llama = os.path.join(shared, "tokenizers/llama2/tokenizer.model")
    if os.path.exists(llama):
        sp = spm.SentencePieceProcessor(model_file=llama)
        refs["llama2_spm"] = lambda s, sp=sp: sp.encode(s)
    sp2 = spm.SentencePieceProcessor(model_file=os.path.join(data_dir, "small_spm.model"))
    refs["small_spm"] = lambda s, sp=sp2: sp.encode(s)
    for name, src in (("llama2_hf", "llama2_hf.json"), ("llama2_meta", "llama2_hf.json"),
                      ("gpt2style", "gpt2style.json"), ("qwenstyle", "qwenstyle.json")):
        js = open(os.path.join(data_dir, src), encoding="utf-8").read()
        if name == "llama2_meta":
            js = metaspace_variant(js)
        tok = Tokenizer.from_str(js)
        tok.encode_special_tokens = True
        refs[name] = lambda s, tok=tok: tok.encode(s, add_special_tokens=False).ids
    return refs


def read_cases(data_dir):
    with open(os.path.join(data_dir, "cases.txt")) as f:
        return [bytes.fromhex(x.strip()).decode("utf-8") for x in f.read().split("\n")[:-1]]


def main():
    shared = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("LQ_SHARED", "/work/shared")
    cs = cases(shared)
    with open(os.path.join(HERE, "cases.txt"), "w") as f:
        for c in cs:
            f.write(c.encode("utf-8").hex() + "\n")
    train_small_spm(shared, os.path.join(HERE, "small_spm.model"))
    llama = build_llama2_hf(os.path.join(shared, "tokenizers/llama2/tokenizer.model"))
    with open(os.path.join(HERE, "llama2_hf.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(json.loads(llama.to_str()), ensure_ascii=False, separators=(",", ":")))
    for style in ("gpt2", "qwen"):
        tok = train_bytelevel(shared, style)
        with open(os.path.join(HERE, style + "style.json"), "w", encoding="utf-8") as f:
            f.write(json.dumps(json.loads(tok.to_str()), ensure_ascii=False, indent=1))
    assert read_cases(HERE) == cs
    for name, enc in load_refs(shared, HERE).items():
        with open(os.path.join(HERE, name + ".ids"), "w") as f:
            for c in cs:
                f.write(" ".join(map(str, enc(c))) + "\n")
        print(name, "ok")


if __name__ == "__main__":
    main()
