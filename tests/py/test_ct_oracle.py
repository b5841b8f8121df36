"""compressed-tensors output checked by the compressed-tensors package and transformers.

1. Layout: every GPTQ / AWQ case of `test_format_io --dump` in the pack-quantized layout
   ("<case>_ct"), decompressed by compressed-tensors' own PackedQuantizationCompressor, equals
   llmquant's dequantization (dequant_ref) bit for bit in the fp16 model dtype.
2. Pipeline: `llmquant {gptq,awq,rtn} --format compressed-tensors` on a random Llama (GPTQ
   symmetric and asymmetric, 3-bit, act-order as actorder "weight", a mixed-precision plan whose
   8-bit linears become a config group of their own; RTN 8-bit per channel; AWQ): for every
   quantized linear, the scheme compressed-tensors itself assigns it (apply_quantization_config
   over the written config) decompresses the written tensors to what llmquant reads back from
   the same directory (`test_format_io --read`), bit for bit in fp16.
3. Symmetric checkpoints load in transformers (AutoModelForCausalLM, CPU, float32): every linear
   weight equals llmquant's dequantization exactly, and the logits equal those of the float
   model carrying llmquant's weights. compressed-tensors 0.20 cannot load asymmetric
   pack-quantized checkpoints in transformers (its meta-device compression leaves the packed zero
   point unpacked: a shape mismatch for any writer's file, llm-compressor's included), so those
   are checked by decompression (2) alone.
4. `llmquant ppl` reads the output back.
"""
import json
import os
import subprocess
import sys
import tempfile

import lq_oracle  # tests/py/lq_oracle.py: SKIP, or FAIL when oracles are required

try:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.quantization import QuantizationConfig, apply_quantization_config
except ImportError as e:  # pragma: no cover
    lq_oracle.skip("%s" % e)

lq_bin = os.environ.get("LQ_BIN", "")
if not os.path.exists(lq_bin):
    lq_oracle.skip("LQ_BIN not set")
fmt_io = os.path.join(os.path.dirname(lq_bin), "tests", "test_format_io")
if not os.path.exists(fmt_io):
    lq_oracle.skip("test_format_io not built next to LQ_BIN")
src = os.environ.get("LQ_SRC", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
tok = os.path.join(src, "examples", "stories260K", "tokenizer.model")

failures = []
nchecks = [0]


def check(cond, msg):
    nchecks[0] += 1
    print(("ok   " if cond else "FAIL ") + msg)
    if not cond:
        failures.append(msg)


def decompress(sd, prefix, scheme):
    sub = {k[len(prefix) + 1:]: v for k, v in sd.items() if k.startswith(prefix + ".")}
    return PackedQuantizationCompressor.decompress(sub, scheme)["weight"]


def same_f16(theirs, mine_f32, what):
    mine = mine_f32.to(torch.float16)
    ok = torch.equal(theirs.to(torch.float16), mine)
    if not ok:
        d = (theirs.float() - mine.float()).abs()
        what += " (max |diff| %.3g)" % d.max().item()
    check(ok, what)


def layout_cases(root):
    subprocess.run([fmt_io, "--dump", root], check=True, stdout=subprocess.DEVNULL)
    prefix = "model.layers.0.self_attn.q_proj"
    n = 0
    for d in sorted(os.listdir(root)):
        if not d.endswith("_ct"):
            continue
        dd = os.path.join(root, d)
        qc = QuantizationConfig.model_validate(
            json.load(open(os.path.join(dd, "config.json")))["quantization_config"])
        w = decompress(load_file(os.path.join(dd, "model.safetensors")), prefix,
                       qc.config_groups["group_0"])
        ref = load_file(os.path.join(dd, "ref", "model.safetensors"))["w"]
        same_f16(w, ref, "%s: compressed-tensors decompress == llmquant dequant_ref" % d)
        n += 1
    check(n == 5, "layout cases: %d written (gptq 2/3/4/8-bit, awq)" % n)


def random_llama(d):
    torch.manual_seed(1)
    cfg = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      pad_token_id=0, bos_token_id=1, eos_token_id=2)
    m = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            p.fill_(1.0) if "norm" in name else p.normal_(0.0, 0.08)
    m.save_pretrained(d, safe_serialization=True)


def pipeline_case(tmp, model, label, args, sym):
    out = os.path.join(tmp, label)
    r = subprocess.run([lq_bin] + args[:1] + [model, "-o", out, "-q", "--format",
                                               "compressed-tensors"] + args[1:],
                       capture_output=True, text=True)
    check(r.returncode == 0, "%s: llmquant exit %d %s" % (label, r.returncode, r.stderr.strip()))
    if r.returncode:
        return
    qcj = json.load(open(os.path.join(out, "config.json")))["quantization_config"]
    check(qcj["quant_method"] == "compressed-tensors" and qcj["format"] == "pack-quantized",
          "%s: quantization_config names compressed-tensors pack-quantized" % label)
    r = subprocess.run([fmt_io, "--read", out, out + "_deq"], capture_output=True, text=True)
    check(r.returncode == 0, "%s: llmquant reads it back: %s" % (label, r.stderr.strip()))
    if r.returncode:
        return
    ours = load_file(os.path.join(out + "_deq", "model.safetensors"))
    # the scheme compressed-tensors assigns each module from the written config
    qc = QuantizationConfig.model_validate(qcj)
    skel = LlamaForCausalLM.from_pretrained(model)
    apply_quantization_config(skel, qc)
    sd = load_file(os.path.join(out, "model.safetensors"))
    schemes = {name: getattr(mod, "quantization_scheme", None) for name, mod in skel.named_modules()}
    quantized = sorted(k[:-len(".weight_packed")] for k in sd if k.endswith(".weight_packed"))
    check(quantized == sorted(ours), "%s: %d quantized linears, llmquant reads the same %d"
          % (label, len(quantized), len(ours)))
    bad = []
    for name in quantized:
        sch = schemes.get(name)
        if sch is None:
            bad.append(name + " (no scheme)")
            continue
        w = decompress(sd, name, sch)
        if not torch.equal(w.to(torch.float16), ours[name].to(torch.float16)):
            bad.append(name)
    check(not bad, "%s: compressed-tensors decompress == llmquant's dequant for %d linears%s"
          % (label, len(quantized), (": " + ", ".join(bad[:4])) if bad else ""))
    for name, mod in skel.named_modules():  # nothing compressed-tensors would quantize is float
        if getattr(mod, "quantization_scheme", None) is not None and name not in ours:
            bad.append(name)
    check(not bad, "%s: every module the config targets is stored quantized" % label)
    if sym:
        load_in_transformers(model, out, ours, label)
    ppl = subprocess.run([lq_bin, "ppl", out, "--tokenizer", tok, "--data", os.path.join(
        src, "examples", "data", "tinystories_sample.txt"), "-q", "--json"],
        capture_output=True, text=True)
    check(ppl.returncode == 0 and "ppl" in ppl.stdout,
          "%s: llmquant ppl reads it: %s" % (label, (ppl.stderr or ppl.stdout).strip()[-200:]))


def load_in_transformers(model, out, ours, label):
    torch.manual_seed(0)
    ids = torch.randint(3, 512, (1, 64))
    q = AutoModelForCausalLM.from_pretrained(out, device_map="cpu", dtype=torch.float32)
    with torch.no_grad():
        b = q(ids).logits  # the first forward decompresses
    qsd = q.state_dict()
    ok = all(torch.equal(qsd[k + ".weight"].float(), v) for k, v in ours.items())
    check(ok, "%s: transformers' decompressed weights == llmquant's dequant (float32)" % label)
    ref = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    sd = ref.state_dict()
    with torch.no_grad():
        for k, v in qsd.items():  # embeddings, norms, lm_head as written
            if k in sd:
                sd[k].copy_(v)
        for k, v in ours.items():
            sd[k + ".weight"].copy_(v)
        a = ref(ids).logits
    err = ((a - b).norm() / a.norm()).item()
    check(err < 1e-6, "%s: transformers logits vs the float model with llmquant's weights: "
          "relative difference %.3g" % (label, err))


def main():
    base = os.environ.get("LQ_TMP")
    if base:
        os.makedirs(base, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        layout_cases(os.path.join(tmp, "dump"))
        model = os.path.join(tmp, "rnd")
        random_llama(model)
        cal = ["--tokenizer", tok, "--nsamples", "16", "--seqlen", "128"]
        cases = [
            ("gptq4_sym_g32", ["gptq", "--group-size", "32"] + cal, True),
            ("gptq4_asym_g64", ["gptq", "--group-size", "64", "--no-sym"] + cal, False),
            ("gptq3_actorder", ["gptq", "--bits", "3", "--group-size", "32", "--desc-act"] + cal,
             True),
            ("gptq_mixed", ["gptq", "--group-size", "32", "--target-bpw", "5"] + cal, True),
            ("rtn8_channel", ["rtn", "--bits", "8", "--group-size", "-1"], True),
            ("awq4_g32", ["awq", "--group-size", "32"] + cal, False),
        ]
        for label, args, sym in cases:
            pipeline_case(tmp, model, label, args, sym)
        # what has no pack-quantized form is refused by name, with nothing written
        out = os.path.join(tmp, "nf4")
        r = subprocess.run([lq_bin, "nf4", model, "-o", out, "-q", "--format",
                            "compressed-tensors"], capture_output=True, text=True)
        check(r.returncode != 0 and "compressed-tensors" in r.stderr and not os.path.exists(out),
              "nf4 --format compressed-tensors refused: %s" % r.stderr.strip())
    if failures:
        print("test_ct_oracle: %d of %d checks FAILED" % (len(failures), nchecks[0]))
        return 1
    print("test_ct_oracle: all %d checks passed" % nchecks[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
