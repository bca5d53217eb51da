"""The Triton kernels of ``triton_dispersion`` (whose docstring says what they compute).

Imported by ``triton_dispersion`` on first use, so that the package imports without Triton. Under
``TRITON_INTERPRET=1`` Triton's ``jit`` makes them interpreted functions that run on a CPU.
"""

import triton
import triton.language as tl


@triton.jit
def acos(x):
    # Cephes acosf: acos(x) = pi/2 - asin(x) for |x| <= 1/2, else 2 asin(sqrt((1 - |x|) / 2))
    # (x > 0) or pi minus that (x < 0); asin(s) = s + s z P(z) with z = s^2 <= 1/4.
    ax = tl.abs(x)
    big = ax > 0.5
    z = tl.where(big, 0.5 * (1.0 - ax), x * x)
    s = tl.where(big, tl.sqrt(z), ax)
    p = (((4.2163199048e-2 * z + 2.4181311049e-2) * z + 4.5470025998e-2) * z + 7.4953002686e-2) * z
    asin_s = s + s * (p + 1.6666752422e-1) * z
    small = 1.5707963267948966 - tl.where(x < 0, -asin_s, asin_s)
    large = tl.where(x > 0, 2.0 * asin_s, 3.141592653589793 - 2.0 * asin_s)
    return tl.where(big, large, small)

@triton.jit
def _operand(x, INTERPRETED: tl.constexpr):
    # a bf16 operand as tl.dot takes it. Triton's interpreter (3.8) gets tl.dot of bf16 operands
    # wrong: there it is upcast, the same products (a product of two bf16 values is exact in
    # float32), as kernels._product computes them on a CPU
    if INTERPRETED:
        return x.to(tl.float32)
    return x


@triton.jit
def _bf16(x, INTERPRETED: tl.constexpr):
    # float32 -> a bf16 operand, rounded to nearest even as on a GPU; the interpreter (3.8) neither
    # rounds so nor multiplies bf16 (above), so there the rounding is done on the bits, in float32
    if INTERPRETED:
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return bits.to(tl.float32, bitcast=True)
    return x.to(tl.bfloat16)


@triton.jit
def cosines(hi_ptr, lo_ptr, rows, cols, num_tokens, features, BF16: tl.constexpr, INTERPRETED: tl.constexpr,
            BLOCK: tl.constexpr, BLOCK_K: tl.constexpr):
    # [BLOCK, BLOCK] cosines of rows x cols of one sequence (pointers at its first row), float32 sums
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    row_ok = rows[:, None] < num_tokens
    col_ok = cols[None, :] < num_tokens
    for k in range(0, features, BLOCK_K):
        ks = k + tl.arange(0, BLOCK_K)
        a_off = rows[:, None] * features + ks[None, :]
        b_off = cols[None, :] * features + ks[:, None]
        a_ok = row_ok & (ks[None, :] < features)
        b_ok = col_ok & (ks[:, None] < features)
        a = tl.load(hi_ptr + a_off, mask=a_ok, other=0.0)
        b = tl.load(hi_ptr + b_off, mask=b_ok, other=0.0)
        if BF16:
            # the unit rows' bf16 rounding and its remainder: hi hi^T + hi lo^T + lo hi^T (kernels._tile_weights)
            a = _operand(a, INTERPRETED)
            b = _operand(b, INTERPRETED)
            acc = tl.dot(a, b, acc)
            acc = tl.dot(a, _operand(tl.load(lo_ptr + b_off, mask=b_ok, other=0.0), INTERPRETED), acc)
            acc = tl.dot(_operand(tl.load(lo_ptr + a_off, mask=a_ok, other=0.0), INTERPRETED), b, acc)
        else:
            acc = tl.dot(a, b, acc, input_precision="ieee")  # not TF32, Triton's default for float32
    return acc


@triton.jit
def pair_tile(hi_ptr, lo_ptr, rows, cols, num_tokens, features, clamp, BF16: tl.constexpr,
              INTERPRETED: tl.constexpr, BLOCK: tl.constexpr, BLOCK_K: tl.constexpr):
    # the tile both kernels read: its cosines clamped (the slope is taken there: straight-through)
    # and which entries are pairs (both tokens in the sequence, i != j)
    cos = cosines(hi_ptr, lo_ptr, rows, cols, num_tokens, features, BF16, INTERPRETED, BLOCK, BLOCK_K)
    cos = tl.minimum(tl.maximum(cos, -1.0 + clamp), 1.0 - clamp)
    pair = (rows[:, None] < num_tokens) & (cols[None, :] < num_tokens) & (rows[:, None] != cols[None, :])
    return cos, pair


@triton.jit
def forward_kernel(hi_ptr, lo_ptr, peak_ptr, total_ptr, num_tokens, features, logit_scale, clamp,
                    BF16: tl.constexpr, INTERPRETED: tl.constexpr, BLOCK: tl.constexpr, BLOCK_K: tl.constexpr):
    sequence = tl.program_id(0)
    row_start = tl.program_id(1) * BLOCK
    hi_ptr += sequence * num_tokens * features
    lo_ptr += sequence * num_tokens * features
    rows = row_start + tl.arange(0, BLOCK)
    peak = tl.full((BLOCK,), float("-inf"), dtype=tl.float32)
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for col_start in range(row_start, num_tokens, BLOCK):
        cols = col_start + tl.arange(0, BLOCK)
        cos, pair = pair_tile(hi_ptr, lo_ptr, rows, cols, num_tokens, features, clamp, BF16, INTERPRETED, BLOCK,
                              BLOCK_K)
        # right of the diagonal block each entry also stands for its mirror pair (j, i)
        mirror = tl.where(col_start > row_start, 0.6931471805599453, 0.0)
        logit = tl.where(pair, logit_scale * acos(cos) + mirror, float("-inf"))
        new_peak = tl.maximum(peak, tl.max(logit, axis=1))
        shift = tl.where(new_peak == float("-inf"), 0.0, new_peak)  # a row with no pair yet sums nothing
        total = total * tl.exp(peak - shift) + tl.sum(tl.exp(logit - shift[:, None]), axis=1)
        peak = new_peak
    out = sequence * num_tokens + rows
    tl.store(peak_ptr + out, peak, mask=rows < num_tokens)
    tl.store(total_ptr + out, total, mask=rows < num_tokens)


@triton.jit
def backward_kernel(hi_ptr, lo_ptr, lse_ptr, grad_ptr, num_tokens, features, logit_scale, clamp,
                     BF16: tl.constexpr, INTERPRETED: tl.constexpr, BLOCK: tl.constexpr, BLOCK_K: tl.constexpr):
    sequence = tl.program_id(0)
    row_start = tl.program_id(1) * BLOCK
    hi_ptr += sequence * num_tokens * features
    lo_ptr += sequence * num_tokens * features
    grad_ptr += sequence * num_tokens * features
    lse = tl.load(lse_ptr + sequence)
    rows = row_start + tl.arange(0, BLOCK)
    row_ok = rows[:, None] < num_tokens
    for col_start in range(0, num_tokens, BLOCK):
        cols = col_start + tl.arange(0, BLOCK)
        cos, pair = pair_tile(hi_ptr, lo_ptr, rows, cols, num_tokens, features, clamp, BF16, INTERPRETED, BLOCK,
                              BLOCK_K)
        # the pair's softmax weight times arccos' slope at the clamped cosine (straight-through)
        weight = tl.exp(logit_scale * acos(cos) - lse)
        slope = 1.0 / tl.sqrt((1.0 - cos) * (1.0 + cos))
        g = tl.where(pair, weight * slope, 0.0)
        if BF16:
            g = _bf16(g, INTERPRETED)
        col_ok = cols[:, None] < num_tokens
        for k in range(0, features, BLOCK_K):
            ks = k + tl.arange(0, BLOCK_K)
            z = tl.load(hi_ptr + cols[:, None] * features + ks[None, :], mask=col_ok & (ks[None, :] < features),
                        other=0.0)
            out = grad_ptr + rows[:, None] * features + ks[None, :]
            out_ok = row_ok & (ks[None, :] < features)
            partial = tl.load(out, mask=out_ok, other=0.0)
            if BF16:
                partial = tl.dot(g, _operand(z, INTERPRETED), partial)
            else:
                partial = tl.dot(g, z, partial, input_precision="ieee")
            tl.store(out, partial, mask=out_ok)
