"""Compatibility oracle, both directions: checkpoints written by llmquant read by the reference
libraries' own code (installed from PyPI, not re-implemented here), and checkpoints the reference
libraries write (Linear4bit / Linear8bitLt state_dicts, WQLinear_GEMM.from_linear, AutoGPTQ
QuantLinear.pack) read by llmquant's public loader; dequantizations compared bit for bit.

  bitsandbytes  create_dynamic_map / get_4bit_type tables bit for bit; NF4 via
                Params4bit.from_prequantized + dequantize_4bit (bit-exact in fp16) and
                Linear4bit.forward; double-quant packing vs quantize_blockwise; LLM.int8 via
                Linear8bitLt.load_state_dict (weight_format hook) + forward (bnb semantics)
  autoawq       awq.utils.packing_utils.dequantize_gemm (bit-exact in fp16) and
                WQLinear_GEMM.from_linear packing (bit-exact qweight/qzeros)
  auto-gptq     nn_modules.qlinear.qlinear_cuda QuantLinear: torch forward (g_idx aware, bit-exact
                dequant in fp16) and pack (bit-exact qweight/qzeros, 2/3/4/8 bits)

The reference modules are loaded from the installed packages without their package __init__
(which pulls in datasets / an old transformers API): same code, fewer dependencies.
Each package is optional: missing -> "SKIP part: <package>: ..." lines; all missing -> exit 77
(with LQ_REQUIRE_ORACLES=1 any missing package fails the test: tests/py/lq_oracle.py).
Files come from `test_format_io --dump DIR` (the build tree's tests/ next to $LQ_BIN).

pip packages that make this test run everything: bitsandbytes autoawq auto-gptq accelerate
(install autoawq and auto-gptq with --no-deps; BUILD_CUDA_EXT=0 for auto-gptq).
"""
import importlib.util
import json
import os
import subprocess
import sys

import tempfile
import types
import lq_oracle  # tests/py/lq_oracle.py: SKIP, or FAIL when oracles are required

PREFIX = "model.layers.0.self_attn.q_proj"

try:
    import torch
    from safetensors.torch import load_file
except ImportError as e:  # pragma: no cover
    lq_oracle.skip("%s" % e)

failures = []
ran = []
nchecks = [0]


def check(cond, msg):
    nchecks[0] += 1
    if not cond:
        failures.append(msg)
        print("FAIL: " + msg)


def find_dump_tool():
    exe = os.environ.get("LQ_TEST_FORMAT_IO")
    if not exe and os.environ.get("LQ_BIN"):
        exe = os.path.join(os.path.dirname(os.environ["LQ_BIN"]), "tests", "test_format_io")
    return exe if exe and os.path.exists(exe) else None


def load_ref_module(pkg, modname):
    """Import pkg/relpath from the installed package without running pkg/__init__.py."""
    spec = importlib.util.find_spec(pkg)
    if spec is None or not spec.submodule_search_locations:
        return None
    if pkg not in sys.modules:
        stub = types.ModuleType(pkg)
        stub.__path__ = list(spec.submodule_search_locations)
        stub.__spec__ = spec
        sys.modules[pkg] = stub
    return importlib.import_module(modname)


def case(root, name):
    d = os.path.join(root, name)
    sd = load_file(os.path.join(d, "model.safetensors"))
    ref = load_file(os.path.join(d, "ref", "model.safetensors"))
    cfg = json.load(open(os.path.join(d, "config.json")))
    sub = {k[len(PREFIX) + 1:]: v for k, v in sd.items() if k.startswith(PREFIX + ".")}
    return sub, ref, cfg.get("quantization_config"), d


def exact_f16(mine_f32, theirs, what):
    mine = mine_f32.to(torch.float16)
    same = torch.equal(mine, theirs.to(torch.float16))
    if not same:
        diff = (mine.float() - theirs.float()).abs()
        what += " (max |diff| %.3g at %s)" % (diff.max().item(), divmod(int(diff.argmax()), diff.shape[-1]))
    check(same, what)


def close(mine, theirs, rtol, what):
    mine, theirs = mine.double(), theirs.double()
    err = ((mine - theirs).norm() / theirs.norm()).item()
    check(err <= rtol, "%s: relative error %.3g > %.3g" % (what, err, rtol))
    return err


# ---------------------------------------------------------------------------------------------
def test_bnb(root):
    try:
        import bitsandbytes as bnb
        import bitsandbytes.functional as F
    except ImportError as e:
        lq_oracle.skip_part("bitsandbytes: %s" % e)
        return
    ran.append("bitsandbytes %s" % bnb.__version__)

    # NF4
    for name in ("nf4_b64", "nf4_b64_dq_bias"):
        sub, ref, qc, _ = case(root, name)
        check(torch.equal(sub["weight.quant_map"], F.get_4bit_type("nf4", device="cpu")),
              name + ": quant_map != bitsandbytes get_4bit_type('nf4')")
        if "weight.nested_quant_map" in sub:
            check(torch.equal(sub["weight.nested_quant_map"], F.create_dynamic_map(signed=True)),
                  name + ": nested_quant_map != create_dynamic_map(signed=True)")
        stats = {k: v for k, v in sub.items() if k.startswith("weight.")}
        stats = {k[len("weight."):]: v for k, v in stats.items()}
        p = bnb.nn.Params4bit.from_prequantized(data=sub["weight"], quantized_stats=stats,
                                                requires_grad=False, device="cpu")
        qs = p.quant_state
        check(list(qs.shape) == list(ref["w"].shape), name + ": quant_state shape")
        check(qs.quant_type == "nf4" and qs.blocksize == 64, name + ": quant_state type/blocksize")
        w = F.dequantize_4bit(p.data, qs)
        exact_f16(ref["w"], w, name + ": bitsandbytes dequantize_4bit != llmquant dequant_ref")
        # the module forward, as transformers would run it
        n, k = ref["w"].shape
        lin = bnb.nn.Linear4bit(k, n, bias="bias" in sub, compute_dtype=torch.float32,
                                quant_type="nf4", device="cpu")
        lin.weight = p
        if "bias" in sub:
            lin.bias = torch.nn.Parameter(sub["bias"].float(), requires_grad=False)
        with torch.no_grad():
            y = lin(ref["x"])
        close(ref["y"], y.float(), 1e-5, name + ": Linear4bit.forward vs gemm_ref")

    # double quant packing: same input absmax and offset -> the nearest 8-bit code. Our packer
    # follows bitsandbytes' torch implementation (bucketize against midpoints); its C++ CPU
    # kernel may pick the other neighbour when the two distances differ in the 6th digit.
    dq = load_file(os.path.join(root, "double_quant", "model.safetensors"))
    off = dq["nested_offset"]
    xin = dq["absmax_in"] - off
    q2, st2 = F.quantize_blockwise(xin, blocksize=256)
    check(torch.equal(st2.absmax, dq["nested_absmax"]), "double quant: nested absmax differs")
    code = F.create_dynamic_map(signed=True)
    blk = torch.arange(xin.numel()) // 256
    scaled = xin / dq["nested_absmax"][blk]
    d_ours = (scaled - code[dq["qabsmax"].long()]).abs()
    d_bnb = (scaled - code[q2.long()]).abs()
    nmis = int((q2 != dq["qabsmax"]).sum())
    check(bool((d_ours <= d_bnb + 1e-7).all()), "double quant: a code is not the nearest")
    check(nmis <= 2, "double quant: %d of %d codes differ from quantize_blockwise" % (nmis, q2.numel()))
    close(off, dq["absmax_in"].mean().reshape(1), 1e-6, "double quant: offset = mean(absmax)")

    # LLM.int8
    for name in ("int8_plain", "int8_outliers_bias"):
        sub, ref, qc, _ = case(root, name)
        n, k = sub["weight"].shape
        has_bias = "bias" in sub
        thr = qc["llm_int8_threshold"]
        # the loading path bitsandbytes documents: quantize (move to a device), then load
        lin = bnb.nn.Linear8bitLt(k, n, bias=has_bias, has_fp16_weights=False, threshold=thr).to("cpu")
        sd = {kk: v for kk, v in sub.items() if kk in ("weight", "SCB", "weight_format", "bias")}
        missing, unexpected = lin.load_state_dict(sd, strict=False)
        check(not missing and not unexpected, name + ": Linear8bitLt keys %s %s" % (missing, unexpected))
        cb, scb = lin.weight.data, lin.weight.SCB
        check(torch.equal(cb, sub["weight"]) and torch.equal(scb, sub["SCB"]), name + ": CB/SCB load")
        wq = torch.ops.bitsandbytes.int8_vectorwise_dequant(cb, scb)
        mine = ref["w"].clone()
        x = ref["x"].half()
        if "outlier_idx" in sub:  # bnb knows nothing of llmquant's stored fp16 columns
            cols = sub["outlier_idx"].long()
            check(torch.equal(mine[:, cols], sub["outlier_weight"].float()),
                  name + ": dequant of stored outlier columns != outlier_weight")
            keep = torch.ones(k, dtype=torch.bool)
            keep[cols] = False
            mine, wq = mine[:, keep], wq[:, keep]
        check(torch.equal(mine, wq.float()), name + ": int8_vectorwise_dequant != dequant_ref")
        if "outlier_idx" in sub:
            continue
        # LLM.int8 semantics = bitsandbytes' ops as MatMul8bitLt chains them (the CUDA path):
        # row-wise int8 activations with threshold outliers, int32 product, mixed fp16 part
        ca, sca, ocols = torch.ops.bitsandbytes.int8_vectorwise_quant(x.clone(), thr)
        check(ocols is not None and ocols.numel() > 0, name + ": dump has no runtime outliers")
        bias = sub["bias"] if has_bias else None
        y, _ = torch.ops.bitsandbytes.int8_mixed_scaled_mm(x, ca, cb, sca, scb, ocols, bias)
        close(ref["y"], y.float(), 1e-3, name + ": bnb int8 ops (vectorwise_quant + "
              "mixed_scaled_mm) vs gemm_ref")
        # the CPU module forward skips activation quantization (MatMul8bitFp): looser
        with torch.no_grad():
            ym = lin(x)
        close(ref["y"], ym.float(), 2e-2, name + ": Linear8bitLt.forward (CPU) vs gemm_ref")


# ---------------------------------------------------------------------------------------------
def test_awq(root):
    if importlib.util.find_spec("awq") is None:
        lq_oracle.skip_part("autoawq: not installed")
        return
    try:
        pu = load_ref_module("awq", "awq.utils.packing_utils")
    except Exception as e:  # noqa: BLE001 - any import failure means "not usable here"
        lq_oracle.skip_part("autoawq: %s" % e)
        return
    ran.append("autoawq")
    name = "awq_g64_bias"
    sub, ref, qc, _ = case(root, name)
    check(qc == {"quant_method": "awq", "zero_point": True, "group_size": 64, "bits": 4,
                 "version": "gemm", "modules_to_not_convert": None}, name + ": config %s" % qc)
    gs = qc["group_size"]
    w = pu.dequantize_gemm(sub["qweight"], sub["qzeros"], sub["scales"], 4, gs)  # [k, n]
    exact_f16(ref["w"].t(), w, name + ": AutoAWQ dequantize_gemm != llmquant dequant_ref")
    try:
        gemm = load_ref_module("awq", "awq.modules.linear.gemm")
    except Exception as e:  # noqa: BLE001
        lq_oracle.skip_part("autoawq WQLinear_GEMM.from_linear: %s" % e)
        return
    iw, iz = pu.unpack_awq(sub["qweight"], sub["qzeros"], 4)
    iw, iz = pu.reverse_awq_order(iw, iz, 4)
    iz = torch.bitwise_and(iz, 15)
    n, k = ref["w"].shape
    lin = torch.nn.Linear(k, n, bias=True)
    lin.weight.data = ref["w"].clone()
    lin.bias.data = sub["bias"].float()
    q = gemm.WQLinear_GEMM.from_linear(lin, 4, gs, scales=sub["scales"].float(), zeros=iz.float())
    check(torch.equal(q.qweight, sub["qweight"]), name + ": WQLinear_GEMM.from_linear qweight differs")
    check(torch.equal(q.qzeros, sub["qzeros"]), name + ": WQLinear_GEMM.from_linear qzeros differs")


# ---------------------------------------------------------------------------------------------
def test_gptq(root):
    if importlib.util.find_spec("auto_gptq") is None:
        lq_oracle.skip_part("auto-gptq: not installed")
        return
    try:
        ql = load_ref_module("auto_gptq",
                             "auto_gptq.nn_modules.qlinear.qlinear_cuda")
    except Exception as e:  # noqa: BLE001
        lq_oracle.skip_part("auto-gptq: %s" % e)
        return
    ran.append("auto-gptq (qlinear_cuda torch path)")
    for name in ("gptq4_g32_bias", "gptq4_actorder", "gptq3_g64", "gptq2_g32", "gptq8_perchannel"):
        sub, ref, qc, d = case(root, name)
        qf = json.load(open(os.path.join(d, "quantize_config.json")))
        check(qf == qc, name + ": quantize_config.json != config.json quantization_config")
        bits, gs = qc["bits"], qc["group_size"]
        n, k = ref["w"].shape
        m = ql.QuantLinear(bits, gs, k, n, bias=False, trainable=True)
        sd = {kk: sub[kk] for kk in ("qweight", "qzeros", "scales", "g_idx")}
        m.load_state_dict(sd, strict=True)
        with torch.no_grad():  # x = I: the forward returns its dequantized W^T exactly
            wt = m(torch.eye(k, dtype=torch.float16))
        exact_f16(ref["w"].t(), wt, name + ": AutoGPTQ QuantLinear dequant != llmquant dequant_ref")
        # pack(): AutoGPTQ's packer fed W, scales and the integer zeros must give our bytes.
        # Zeros for its input are read from qzeros by the v1 layout (b-bit fields along n, LSB
        # first, stored z - 1); a wrong layout would show up as different qweight codes.
        words = sub["qzeros"].to(torch.int64) & 0xFFFFFFFF
        zl = []
        for row in words.tolist():
            stream = sum(wv << (32 * wi) for wi, wv in enumerate(row))
            zl.append([((stream >> (bits * j)) & ((1 << bits) - 1)) + 1 for j in range(n)])
        zeros_int = torch.tensor(zl, dtype=torch.float32)
        g = sub["g_idx"].long()
        lin = torch.nn.Linear(k, n, bias=False)
        lin.weight.data = ref["w"].clone()
        m2 = ql.QuantLinear(bits, gs, k, n, bias=False, trainable=True)
        m2.pack(lin, sub["scales"].float().t().contiguous(), zeros_int.t().contiguous(), g.int())
        check(torch.equal(m2.qweight, sub["qweight"]), name + ": AutoGPTQ pack qweight differs")
        check(torch.equal(m2.qzeros, sub["qzeros"]), name + ": AutoGPTQ pack qzeros differs")
        check(torch.equal(m2.g_idx.int(), sub["g_idx"]), name + ": g_idx differs")


# ---------------------------------------------------------------------------------------------
# The other direction: checkpoints the reference tools write, read by llmquant's public loader
# (test_format_io --read runs lq_checkpoint_open / lq_checkpoint_get_linear / dequant_ref).
def write_ckpt(d, tensors, qc):
    from safetensors.torch import save_file
    os.makedirs(d, exist_ok=True)
    save_file({PREFIX + "." + k: v.contiguous() for k, v in tensors.items()},
              os.path.join(d, "model.safetensors"))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"model_type": "llama", "torch_dtype": "float16", "quantization_config": qc}, f)


def read_ours(exe, d):
    out = d + "_ours"
    r = subprocess.run([exe, "--read", d, out], capture_output=True, text=True)
    check(r.returncode == 0, "%s: llmquant could not load it: %s" % (d, r.stderr.strip()))
    if r.returncode != 0:
        return None
    return load_file(os.path.join(out, "model.safetensors"))[PREFIX]


def ref_written_bnb(exe, root):
    try:
        import bitsandbytes as bnb
        import bitsandbytes.functional as F
        from transformers import BitsAndBytesConfig
    except ImportError as e:
        lq_oracle.skip_part("bitsandbytes (reference-written): %s" % e)
        return
    n, k = 96, 256
    w = torch.randn(n, k) * 0.05
    for dq in (False, True):
        lin = bnb.nn.Linear4bit(k, n, bias=True, compute_dtype=torch.float32,
                                compress_statistics=dq, quant_type="nf4")
        lin.weight = bnb.nn.Params4bit(w.clone(), requires_grad=False, compress_statistics=dq,
                                       quant_type="nf4")
        lin = lin.to("cpu")
        qc = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                bnb_4bit_use_double_quant=dq).to_dict()
        d = os.path.join(root, "bnb_nf4_dq%d" % dq)
        write_ckpt(d, lin.state_dict(), qc)
        mine = read_ours(exe, d)
        if mine is not None:
            theirs = F.dequantize_4bit(lin.weight.data, lin.weight.quant_state)
            check(torch.equal(mine, theirs.float()),
                  d + ": llmquant dequant of a bitsandbytes NF4 file != dequantize_4bit")
    l8 = bnb.nn.Linear8bitLt(k, n, bias=True, has_fp16_weights=False, threshold=6.0)
    l8.weight = bnb.nn.Int8Params(w.clone(), requires_grad=False, has_fp16_weights=False)
    l8 = l8.to("cpu")
    d = os.path.join(root, "bnb_int8")
    write_ckpt(d, l8.state_dict(), BitsAndBytesConfig(load_in_8bit=True).to_dict())
    mine = read_ours(exe, d)
    if mine is not None:
        theirs = torch.ops.bitsandbytes.int8_vectorwise_dequant(l8.weight.data, l8.weight.SCB)
        check(torch.equal(mine, theirs.float()),
              d + ": llmquant dequant of a bitsandbytes LLM.int8 file != int8_vectorwise_dequant")


def ref_written_awq(exe, root):
    if importlib.util.find_spec("awq") is None:
        lq_oracle.skip_part("autoawq (reference-written): not installed")
        return
    try:
        pu = load_ref_module("awq", "awq.utils.packing_utils")
        gemm = load_ref_module("awq", "awq.modules.linear.gemm")
    except Exception as e:  # noqa: BLE001
        lq_oracle.skip_part("autoawq (reference-written): %s" % e)
        return
    n, k, gs = 128, 256, 64
    G = k // gs
    s = (torch.rand(G, n) * 0.01 + 0.001).half().float()
    z = torch.randint(0, 16, (G, n)).float()
    q = torch.randint(0, 16, (n, k)).float()
    gi = torch.arange(k) // gs
    lin = torch.nn.Linear(k, n, bias=True)
    lin.weight.data = (q - z[gi].t()) * s[gi].t()
    lin.bias.data = lin.bias.data.half().float()
    m = gemm.WQLinear_GEMM.from_linear(lin, 4, gs, scales=s, zeros=z)
    m.half()
    d = os.path.join(root, "awq_ref")
    write_ckpt(d, {kk: v for kk, v in m.state_dict().items()},
               {"quant_method": "awq", "zero_point": True, "group_size": gs, "bits": 4,
                "version": "gemm", "modules_to_not_convert": None})
    mine = read_ours(exe, d)
    if mine is not None:
        theirs = pu.dequantize_gemm(m.qweight, m.qzeros, m.scales, 4, gs)
        exact_f16(mine.t(), theirs, d + ": llmquant dequant of an AutoAWQ file != dequantize_gemm")


def ref_written_gptq(exe, root):
    if importlib.util.find_spec("auto_gptq") is None:
        lq_oracle.skip_part("auto-gptq (reference-written): not installed")
        return
    try:
        ql = load_ref_module("auto_gptq",
                             "auto_gptq.nn_modules.qlinear.qlinear_cuda")
    except Exception as e:  # noqa: BLE001
        lq_oracle.skip_part("auto-gptq (reference-written): %s" % e)
        return
    n, k = 64, 256
    for bits, gs, act in ((4, 32, True), (3, 128, False), (8, -1, False), (2, 64, True)):
        g = k if gs == -1 else gs
        G = (k + g - 1) // g
        s = (torch.rand(n, G) * 0.01 + 0.001).half().float()
        z = torch.randint(1, 2 ** bits, (n, G)).float()  # v1 keeps zeros >= 1 portable
        if act:
            perm = torch.randperm(k)
            gi = torch.empty(k, dtype=torch.int64)
            gi[perm] = torch.arange(k) // g
        else:
            gi = torch.arange(k) // g
        q = torch.randint(0, 2 ** bits, (n, k)).float()
        lin = torch.nn.Linear(k, n, bias=True)
        lin.weight.data = (q - z[:, gi]) * s[:, gi]
        lin.bias.data = lin.bias.data.half().float()
        m = ql.QuantLinear(bits, gs, k, n, bias=True, trainable=True)
        m.pack(lin, s, z, gi.int())
        m.half()  # fp16 scales and bias, as AutoGPTQ saves an fp16 model
        d = os.path.join(root, "gptq_ref_b%d_g%d_act%d" % (bits, gs, act))
        write_ckpt(d, {kk: v for kk, v in m.state_dict().items()},
                   {"bits": bits, "group_size": gs, "damp_percent": 0.01, "desc_act": act,
                    "static_groups": False, "sym": True, "true_sequential": True,
                    "model_name_or_path": None, "model_file_base_name": "model",
                    "is_marlin_format": False, "quant_method": "gptq"})
        mine = read_ours(exe, d)
        if mine is not None:
            m.bias = None
            with torch.no_grad():
                wt = m(torch.eye(k, dtype=torch.float16))
            exact_f16(mine.t(), wt, d + ": llmquant dequant of an AutoGPTQ file != its forward")


def main():
    exe = find_dump_tool()
    if not exe:
        lq_oracle.skip("test_format_io binary not found (set LQ_BIN or LQ_TEST_FORMAT_IO)")
    base = os.environ.get("LQ_TMP")
    if base:
        os.makedirs(base, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=base) as root:
        subprocess.run([exe, "--dump", root], check=True, stdout=subprocess.DEVNULL)
        torch.manual_seed(0)
        test_bnb(root)
        test_awq(root)
        test_gptq(root)
        ref_written_bnb(exe, root)
        ref_written_awq(exe, root)
        ref_written_gptq(exe, root)
    if not ran:
        lq_oracle.skip("none of bitsandbytes / autoawq / auto-gptq is installed")
    print("reference libraries exercised: " + ", ".join(ran))
    if failures:
        print("%d check(s) FAILED" % len(failures))
        return 1
    print("test_format_compat: all %d checks passed" % nchecks[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
