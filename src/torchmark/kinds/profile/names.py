"""Short, readable names for GPU kernels (tables only; the trace and the store keep the full
name).

CUPTI reports a kernel by its demangled C++ signature: ``void at::native::
batch_norm_backward_kernel<c10::BFloat16, float, float, int>(GenericPackedTensorAccessor<...>,
...)`` runs to ~1,500 characters on an H100, and cuDNN/cuBLAS name theirs by every tuning
parameter (``sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64
_warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn``). ``short_name`` keeps what
tells kernels apart to a reader: the function's own name, the functor or lambda it applies,
and for library GEMMs the library, operation, dtype and tile.

Pure string functions: imported by reports of stored runs, which import no torch.
"""

from __future__ import annotations

import re

# Names shorter than this with no C++ syntax are left alone (aten::addmm, Memcpy HtoD (...)).
LONG = 40

# Template arguments that say nothing a reader needs: dtypes, sizes, flags, enum casts.
_PLAIN_TYPE = re.compile(
    r"^(?:const\s+)?(?:unsigned\s+|signed\s+)?(?:(?:c10|at|std|cutlass)::)?"
    r"(?:bool|char|short|int|long|long long|float|double|half|Half|BFloat16|__half|__nv_bfloat16"
    r"|__nv_fp8_\w+|Float8_\w+|complex<\w+>|int\d+_t|uint\d+_t|size_t|bfloat16_t|half_t"
    r"|(?:float|int|uint|half|double|char|short|long|__half|__nv_bfloat16)[1-4]"
    r"|array<.*>|tuple<.*>|pair<.*>)\s*[*&]*\s*(?:const)?$"
    r"|^-?\d+[uUlL]*$|^true$|^false$|^\(\w+\)-?\d+[uUlL]*$|^nullptr$"
)
# A functor or op struct names the operation (CUDAFunctor_add, MeanOps, FusedAdamMathFunctor)
_FUNCTOR = re.compile(r"Functor|functor|Ops?$")
# ... except those that wrap around the one that does (BinaryFunctor<..., MulFunctor<float>>).
_GENERIC_FUNCTOR = re.compile(
    r"^(?:Binary|Unary|AUnary|BUnary|Opaque|Compare|Ternary)\w*Functor$|^func_wrapper_t$"
    r"|^ReduceOp$|^Op$"
)
_IDENT = re.compile(r"[A-Za-z_~][A-Za-z0-9_]*")
# Library GEMM/convolution kernels named by their tuning parameters.
_LIB_OP = re.compile(r"(fprop|dgrad|wgrad|gemv|gemm|conv\w*?)(?=_|$|\d)", re.I)
_DTYPE = re.compile(
    r"(?<![a-z])(bf16|fp16|f16|h|tf32|fp32|f32|s|fp8|e4m3|e5m2|i8|s8|int8)(?=[_\d]|$)"
)
_DTYPE_NAMES = {"h": "fp16", "f16": "fp16", "s": "fp32", "f32": "fp32", "s8": "int8", "i8": "int8"}
_TILE = re.compile(r"tilesize(\d+x\d+(?:x\d+)?)|(?<![a-z\d])(\d+x\d+(?:x\d+)?)(?=_|$)")


def short_name(name: str) -> str:
    """A kernel's name for a table; an op name (``aten::addmm``) is returned unchanged."""
    if name.startswith("_Z"):
        return _mangled(name)
    cpp = name.startswith("void ") or "<" in name or ("::" in name and "(" in name)
    if not cpp:
        library = " " not in name and (len(name) > LONG or name.startswith("nvjet_"))
        return _library(name) if library else name
    text = name.replace("(anonymous namespace)", "anon")
    if text.startswith("void "):
        text = text[5:]
    head, targs = _split_call(text)
    base = _last_component(head)
    if targs is None:
        return base
    args = _split_args(targs)
    # cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_nn_align2>
    if re.fullmatch(r"[Kk]ernel\d*|device_kernel", base) and args:
        lib = _library(args[0].strip())
        info = _describe(args)
        return lib if lib != args[0].strip() else f"{base}<{info}>" if info else base
    info = _describe(args)
    return f"{base}<{info}>" if info else base


def _library(token: str) -> str:
    """``cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_nn_align2`` -> ``cutlass gemm
    bf16 256x128``; a long name that is no library GEMM or convolution is kept."""
    low = token.lower()
    nvjet = re.match(r"nvjet_\w*?_(\d+x\d+)_.*_([NT]{3})$", token)
    if nvjet:  # cuBLAS's Hopper GEMMs: tile and operand layouts
        return f"nvjet gemm {nvjet.group(1)} {nvjet.group(2)}"
    op = _LIB_OP.search(token)
    if not op:
        return token
    family = next(
        (f for f in ("cudnn", "cublaslt", "cublas", "cutlass", "xmma", "nvjet") if f in low),
        token.split("_")[0],
    )
    kind = op.group(1).lower()
    # cuDNN's convolution passes: forward, backward to the data, backward to the weights
    kind = f"conv {kind}" if kind in ("fprop", "dgrad", "wgrad") else kind
    if kind.startswith("conv") and " " not in kind:
        kind = "conv"
    dtype = _DTYPE.search(low)
    tile = _TILE.search(low)
    parts = [family, kind]
    if dtype:
        parts.append(_DTYPE_NAMES.get(dtype.group(1), dtype.group(1)))
    if tile:
        parts.append(tile.group(1) or tile.group(2))
    layout = re.search(r"_(nn|nt|tn|tt)_align", low)  # cutlass: operand layouts
    if layout:
        parts.append(layout.group(1))
    return " ".join(parts)


def _mangled(name: str) -> str:
    """A name CUPTI left mangled (``_ZN17cutlass__5x_cudnn6KernelINS_4conv6kernel23Implicit
    GemmConvolution...``, ~3,000 characters): its identifiers read from their length prefixes,
    summed up as a library kernel when they name one, else its last identifier."""
    idents, i = [], 2
    while i < len(name):
        m = re.match(r"(\d+)", name[i:])
        if not m:
            i += 1
            continue
        n, j = int(m.group(1)), i + len(m.group(1))
        word = name[j : j + n]
        if n and re.fullmatch(r"[A-Za-z_]\w*", word):
            idents.append(word)
            i = j + n
        else:
            i = j
    text = "_".join(idents)
    low = text.lower()
    op = re.search(r"(fprop|dgrad|wgrad)", low)
    kind = (
        f"conv {op.group(1)}"
        if op
        else "conv"
        if "conv" in low
        else "gemm"
        if "gemm" in low
        else ""
    )
    if not kind:
        return idents[-1] if idents else name[:LONG]
    family = next((f for f in ("cudnn", "cublas", "cutlass") if f in low), idents[0])
    dtype = next(
        (
            d
            for w, d in (("bfloat16", "bf16"), ("half_t", "fp16"), ("tfloat32", "tf32"))
            if w in low
        ),
        None,
    )
    tile = re.search(r"GemmShapeILi(\d+)ELi(\d+)ELi(\d+)E", name)
    parts = [family, kind, dtype or "", "x".join(tile.groups()) if tile else ""]
    return " ".join(p for p in parts if p)


def _split_call(text: str) -> tuple[str, str | None]:
    """``ns::f<args>(params) const`` -> (``ns::f``, ``args``); no template: (``ns::f``,
    None). Only the outermost template argument list and parameter list count."""
    depth = 0
    start = None
    for i, ch in enumerate(text):
        if ch in "<({[":
            if depth == 0 and ch == "(":
                return text[:i] if start is None else text[:start], (
                    None if start is None else text[start + 1 : _close(text, start)]
                )
            if depth == 0 and ch == "<" and start is None and not text[:i].endswith("operator"):
                start = i
            depth += 1
        elif ch in ">)}]":
            depth -= 1
    if start is None:
        return text, None
    return text[:start], text[start + 1 : _close(text, start)]


def _close(text: str, start: int) -> int:
    depth = 0
    for i in range(start, len(text)):
        if text[i] in "<({[":
            depth += 1
        elif text[i] in ">)}]":
            depth -= 1
            if depth == 0:
                return i
    return len(text)


def _split_args(targs: str) -> list[str]:
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in targs:
        if ch in "<({[":
            depth += 1
        elif ch in ">)}]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur).strip())
    return [a for a in out if a]


def _last_component(qualified: str) -> str:
    """``at::native::anon::f`` -> ``f`` (the ``::`` outside any brackets)."""
    depth, cut = 0, 0
    for i, ch in enumerate(qualified):
        if ch in "<({[":
            depth += 1
        elif ch in ">)}]":
            depth -= 1
        elif depth == 0 and qualified.startswith("::", i):
            cut = i + 2
    return qualified[cut:].strip()


def _describe(args: list[str]) -> str:
    """What the template arguments tell a reader: the operation's functor (first one that is
    not a generic wrapper), else the function whose lambda is applied, else the first
    argument that is no dtype, size or flag; nothing if all are."""
    informative = [a.strip() for a in args if not _PLAIN_TYPE.match(a.strip())]
    functors = [i for a in informative for i in _IDENT.findall(a) if _FUNCTOR.search(i)]
    specific = [f for f in functors if not _GENERIC_FUNCTOR.match(f)]
    if specific:
        return specific[0]
    for arg in informative:
        if "{lambda" in arg:
            # f(params)::{lambda()#1}: the function is the identifier before its parameters
            before = arg[: arg.index("{lambda")]
            owners = re.findall(r"([A-Za-z_]\w*)(?:<[^()<>]*>)?\([^()]*\)(?:\s*const)?::$", before)
            owners = owners or [m for m in re.findall(r"([A-Za-z_]\w*)\(", before)]
            return f"{owners[0]} lambda" if owners else "lambda"
    if functors:
        return functors[0]
    for arg in informative:
        head, _ = _split_call(arg)
        last = _last_component(head)
        if last and not _PLAIN_TYPE.match(last):
            return last
    return ""


def op_labels(names: list[str]) -> list[str]:
    """Each op's short name, numbered where two share one (75 kernels of resnet50 train on
    an H100 gave 69 short names: cuDNN variants, FillFunctor per dtype)."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        short = short_name(name)
        seen[short] = seen.get(short, 0) + 1
        out.append(short if seen[short] == 1 else f"{short} #{seen[short]}")
    return out
