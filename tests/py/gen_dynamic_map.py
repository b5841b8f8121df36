"""Generator of the 8-bit signed dynamic map table in kernels/lq_formats.c (k_dynamic_map).

Run: python3 tests/py/gen_dynamic_map.py   (needs bitsandbytes; output pasted into lq_formats.c)
The values come from bitsandbytes' own create_dynamic_map(signed=True), the code bitsandbytes
uses to compress NF4 absmax under double quant; tests/py/test_format_compat.py re-checks them.
"""
import bitsandbytes.functional as F

m = F.create_dynamic_map(signed=True).tolist()
assert len(m) == 256
def hexf(v):
    """C hex-float literal of a float32 value, trailing zero nibbles dropped."""
    h = float(v).hex()
    mant, exp = h.split("p")
    if "." in mant:
        mant = mant.rstrip("0").rstrip(".")
    return mant + "p" + exp + "f"


lines = []
for i in range(0, 256, 4):
    lines.append("    " + " ".join(hexf(v) + "," for v in m[i:i + 4]))
print("\n".join(lines))
