"""Write tests/fixtures/broken/: small damaged copies of real pnnx exports, one per way a
model file can be broken (``tests/graphexec/test_broken_corpus.py`` says what each must raise).

Every case starts from a real export: ``tests/fixtures/format/m.pnnx.*`` (a convolution,
batch norm, linear layer and friends, whose bin is the zip64 archive pnnx wrote) or one of
the per-operator fixtures, and damages it in one way. The output is deterministic, so a
test can check that the committed corpus is what this script writes. Usage::

    python tools/make_broken_corpus.py            # rewrite tests/fixtures/broken/
    python tools/make_broken_corpus.py OUT_DIR    # write the corpus elsewhere
"""

from __future__ import annotations

import io
import struct
import sys
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BROKEN = ROOT / "tests" / "fixtures" / "broken"
FORMAT = ROOT / "tests" / "fixtures" / "format"
OPS = ROOT / "tests" / "fixtures" / "ops"

#: A case gives the param bytes and the bin bytes (None: no bin file at all).
Files = tuple[bytes, "bytes | None"]


def _real(folder: Path, stem: str) -> tuple[str, bytes]:
    return (folder / f"{stem}.pnnx.param").read_text("utf-8"), (folder / f"{stem}.pnnx.bin").read_bytes()


M_PARAM, M_BIN = _real(FORMAT, "m")
UPSAMPLE_PARAM, UPSAMPLE_BIN = _real(OPS / "resize" / "upsample_nearest_x2", "model")
EXPAND_PARAM, EXPAND_BIN = _real(OPS / "shape" / "expand", "model")
RELU_PARAM, RELU_BIN = _real(OPS / "activation" / "relu", "model")
INDEX_PARAM, INDEX_BIN = _real(OPS / "indexing" / "index_constant_bool_mask", "model")
MASKED_PARAM, MASKED_BIN = _real(OPS / "attention" / "mha_float_mask", "model")
EMPTY_PARAM, EMPTY_BIN = _real(OPS / "creation" / "empty_filled", "model")
POOL_PARAM, POOL_BIN = _real(OPS / "pooling" / "maxpool2d_3x3s2_ceil", "model")


# --------------------------------------------------------------------------------------
# editing the param text
# --------------------------------------------------------------------------------------
def replace(text: str, old: str, new: str) -> str:
    """``text`` with the one occurrence of ``old`` replaced (it must occur exactly once)."""
    if text.count(old) != 1:
        raise AssertionError(f"{old!r} occurs {text.count(old)} times")
    return text.replace(old, new)


def edit_operator(text: str, name: str, edit: Callable[[list[str]], list[str]]) -> str:
    """``text`` with the tokens of operator ``name``'s line passed through ``edit``."""
    lines = text.split("\n")
    found = [i for i, line in enumerate(lines) if len(line.split()) > 1 and line.split()[1] == name]
    if len(found) != 1:
        raise AssertionError(f"operator {name} is on {len(found)} lines")
    lines[found[0]] = " ".join(edit(lines[found[0]].split()))
    return "\n".join(lines)


def retype(tokens: list[str], new_type: str) -> list[str]:
    return [new_type, *tokens[1:]]


def m(text: str) -> Files:
    """A damaged m.pnnx.param with the real bin."""
    return text.encode("utf-8"), M_BIN


# --------------------------------------------------------------------------------------
# editing the zip
# --------------------------------------------------------------------------------------
def central_records(raw: bytes) -> dict[str, int]:
    """Entry name -> offset of its central directory record."""
    offset = zipfile.ZipFile(io.BytesIO(raw)).start_dir
    records = {}
    while raw[offset : offset + 4] == b"PK\x01\x02":
        name_len, extra_len, comment_len = struct.unpack("<HHH", raw[offset + 28 : offset + 34])
        records[raw[offset + 46 : offset + 46 + name_len].decode("utf-8")] = offset
        offset += 46 + name_len + extra_len + comment_len
    return records


def zip64_field(raw: bytes, entry: str, index: int) -> int:
    """Offset of field ``index`` (0 size, 1 compressed size, 2 header offset) of ``entry``'s
    zip64 extra in the central directory (pnnx writes every entry with one)."""
    record = central_records(raw)[entry]
    name_len = struct.unpack("<H", raw[record + 28 : record + 30])[0]
    extra = record + 46 + name_len
    tag, _size = struct.unpack("<HH", raw[extra : extra + 4])
    if tag != 0x0001:
        raise AssertionError(f"{entry} has no zip64 extra")
    return extra + 4 + 8 * index


def poke(raw: bytes, offset: int, fmt: str, value: int) -> bytes:
    damaged = bytearray(raw)
    struct.pack_into(fmt, damaged, offset, value)
    return bytes(damaged)


def rewrite_zip(raw: bytes, *, method: int = zipfile.ZIP_STORED, twice: str = "") -> bytes:
    """The archive written again by zipfile (fixed dates), optionally compressed or with
    entry ``twice`` stored a second time."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(raw)) as zin, zipfile.ZipFile(out, "w") as zout, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of a duplicate name: the point of that case
        for info in zin.infolist() + [i for i in zin.infolist() if i.filename == twice]:
            new = zipfile.ZipInfo(info.filename, date_time=(1980, 1, 1, 0, 0, 0))
            new.compress_type = method
            zout.writestr(new, zin.read(info))
    return out.getvalue()


def drop_entry(raw: bytes, entry: str) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(raw)) as zin, zipfile.ZipFile(out, "w") as zout:
        for info in zin.infolist():
            if info.filename != entry:
                new = zipfile.ZipInfo(info.filename, date_time=(1980, 1, 1, 0, 0, 0))
                zout.writestr(new, zin.read(info))
    return out.getvalue()


def local_header(raw: bytes, entry: str) -> int:
    return zipfile.ZipFile(io.BytesIO(raw)).getinfo(entry).header_offset


def rename_entry(raw: bytes, entry: str, new: str) -> bytes:
    """The archive written again with ``entry`` stored under the name ``new``."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(raw)) as zin, zipfile.ZipFile(out, "w") as zout:
        for info in zin.infolist():
            renamed = zipfile.ZipInfo(new if info.filename == entry else info.filename, date_time=(1980, 1, 1, 0, 0, 0))
            zout.writestr(renamed, zin.read(info))
    return out.getvalue()


def end_record(raw: bytes, zip64: bool = False) -> int:
    """Offset of the archive's end of central directory record (the zip64 one if asked)."""
    return raw.rfind(b"PK\x06\x06" if zip64 else b"PK\x05\x06")


# --------------------------------------------------------------------------------------
# the cases
# --------------------------------------------------------------------------------------
ABSURD_WEIGHT = (  # a 10^12-element weight declared in about 200 bytes
    "7767517\n3 2\n"
    "pnnx.Input in 0 1 0 #0=(1,8)f32\n"
    "nn.Linear {name} 1 1 0 1 bias=False in_features=1000000 out_features=1000000 @weight=(1000000,1000000)f32\n"
    "pnnx.Output out 1 0 1\n"
)


def _cycle(tokens: list[str]) -> list[str]:
    # c reads what bn (which reads c's output) writes: c -> bn -> c
    tokens[4] = "2"
    return [t for t in tokens if not t.startswith("#0=")]


def _without_output(text: str) -> tuple[list[str], str]:
    """The param lines of ``text`` but the header and the pnnx.Output line, and that line."""
    lines = [line for line in text.split("\n")[2:] if line]
    output = next(line for line in lines if line.startswith("pnnx.Output"))
    return [line for line in lines if line is not output], output


def doubling_tuples(levels: int) -> str:
    """m's output tuple packed with itself, that with itself, ...: 2^levels tensors."""
    body, output = _without_output(M_PARAM)
    last = "11"  # what prim::TupleConstruct pnnx_29 packs for pnnx.Output
    for k in range(levels):
        body.append(f"prim::TupleConstruct dbl{k} 2 1 {last} {last} d{k}")
        last = f"d{k}"
    body.append(output.replace(" 1 0 11", f" 1 0 {last}"))
    return "\n".join(["7767517", f"{len(body)} {12 + levels}", *body]) + "\n"


def deep_tuples(levels: int) -> str:
    """m's output tensor packed with the linear layer's, that tuple with it again, ...,
    and the result unpacked again: tuples nested ``levels`` deep as values of the plan."""
    body, output = _without_output(M_PARAM)
    body = [line for line in body if not line.startswith("prim::TupleConstruct")]
    last = "9"
    for k in range(levels):
        body.append(f"prim::TupleConstruct deep{k} 2 1 {last} 10 n{k}")
        last = f"n{k}"
    body.append(f"prim::ListUnpack unpack 1 2 {last} a b")
    body.append("pnnx.Output pnnx_output_0 1 0 b")
    return "\n".join(["7767517", f"{len(body)} {11 + levels + 2}", *body]) + "\n"


def _unproduced(tokens: list[str]) -> list[str]:
    tokens[4] = "99"
    return [t.replace("$input=1", "$input=99") for t in tokens if not t.startswith("#1=")]


CASES: dict[str, Callable[[], Files]] = {
    # the bin
    "truncated_bin": lambda: (M_PARAM.encode(), M_BIN[: len(M_BIN) // 2]),
    "truncated_bin_tail": lambda: (M_PARAM.encode(), M_BIN[:-10]),
    "empty_bin": lambda: (M_PARAM.encode(), b""),
    "no_bin": lambda: (M_PARAM.encode(), None),
    "bin_is_text": lambda: (M_PARAM.encode(), M_PARAM.encode()),
    "deflated_entries": lambda: (M_PARAM.encode(), rewrite_zip(M_BIN, method=zipfile.ZIP_DEFLATED)),
    "duplicate_entry": lambda: (M_PARAM.encode(), rewrite_zip(M_BIN, twice="c.bias")),
    "missing_entry": lambda: (M_PARAM.encode(), drop_entry(M_BIN, "bn.running_var")),
    "zip_directory_lies_about_size": lambda: (
        M_PARAM.encode(),
        poke(poke(M_BIN, zip64_field(M_BIN, "c.weight", 0), "<Q", 928), zip64_field(M_BIN, "c.weight", 1), "<Q", 928),
    ),
    "zip_directory_claims_a_huge_entry": lambda: (
        M_PARAM.encode(),
        poke(poke(M_BIN, zip64_field(M_BIN, "l.weight", 0), "<Q", 4 * 10**12),
             zip64_field(M_BIN, "l.weight", 1), "<Q", 4 * 10**12),
    ),
    "zip_directory_sizes_differ": lambda: (M_PARAM.encode(), poke(M_BIN, zip64_field(M_BIN, "c.bias", 1), "<Q", 31)),
    "zip_header_offset_lies": lambda: (M_PARAM.encode(), poke(M_BIN, zip64_field(M_BIN, "c.weight", 2), "<Q", 101)),
    "zip_local_header_names_another_entry": lambda: (
        M_PARAM.encode(), poke(M_BIN, local_header(M_BIN, "c.weight") + 30 + 7, "<B", ord("x")),
    ),
    "zip_entry_encrypted": lambda: (M_PARAM.encode(), poke(M_BIN, central_records(M_BIN)["bn.bias"] + 8, "<H", 1)),
    "zip_two_records_one_entry": lambda: (
        M_PARAM.encode(), poke(M_BIN, zip64_field(M_BIN, "c.bias", 2), "<Q", local_header(M_BIN, "c.weight"))),
    "zip_entry_named_up_the_tree": lambda: (M_PARAM.encode(), rename_entry(M_BIN, "c.bias", "../../c.bias")),
    "zip_extra_field_length_lies": lambda: (M_PARAM.encode(), poke(M_BIN, central_records(M_BIN)["c.bias"] + 30, "<H", 0xFFFF)),
    "zip_local_name_length_lies": lambda: (M_PARAM.encode(), poke(M_BIN, local_header(M_BIN, "c.bias") + 26, "<H", 0xFFFF)),
    "zip_crc_wrong": lambda: (M_PARAM.encode(), poke(M_BIN, central_records(M_BIN)["c.bias"] + 16, "<I", 0)),
    "zip_needs_version_9_9": lambda: (M_PARAM.encode(), poke(M_BIN, central_records(M_BIN)["c.bias"] + 6, "<H", 99)),
    "zip_directory_size_huge": lambda: (M_PARAM.encode(), poke(M_BIN, end_record(M_BIN, zip64=True) + 40, "<Q", 2**60)),
    # the param file as a whole
    "empty_param": lambda: (b"", M_BIN),
    "param_is_zip": lambda: (M_BIN, M_BIN),
    "non_utf8_param": lambda: (replace(M_PARAM, "padding_mode=zeros", "padding_mode=zXXros").encode().replace(b"XX", b"\xe9"), M_BIN),
    "bad_magic": lambda: m(replace(M_PARAM, "7767517\n", "7767518\n")),
    "operator_count_enormous": lambda: m(replace(M_PARAM, "\n13 12\n", "\n99999999999999999999 12\n")),
    "operator_count_disagrees": lambda: m(replace(M_PARAM, "\n13 12\n", "\n14 12\n")),
    "operand_count_disagrees": lambda: m(replace(M_PARAM, "\n13 12\n", "\n13 11\n")),
    # one operator line
    "input_count_disagrees": lambda: m(edit_operator(M_PARAM, "l", lambda t: [*t[:2], "2", *t[3:]])),
    "input_count_enormous": lambda: m(edit_operator(M_PARAM, "l", lambda t: [*t[:2], "99999999999999999999", *t[3:]])),
    "expression_nested_too_deep": lambda: m(edit_operator(M_PARAM, "pnnx_expr_7", lambda t: [
        "expr=" + "add(" * 300 + "@0" + ",1)" * 300 if x.startswith("expr=") else x for x in t])),
    "output_count_disagrees": lambda: m(edit_operator(M_PARAM, "F.relu_5", lambda t: [*t[:3], "9", *t[4:]])),
    "negative_dim": lambda: m(replace(M_PARAM, "0 1 0 #0=(1,3,8,8)f32", "0 1 0 #0=(1,-3,8,8)f32")),
    "negative_weight_dim": lambda: m(replace(M_PARAM, "@weight=(8,3,3,3)f32", "@weight=(8,-3,3,3)f32")),
    "unknown_weight_dtype": lambda: m(replace(M_PARAM, "@weight=(8,3,3,3)f32", "@weight=(8,3,3,3)f33")),
    "unknown_operand_dtype": lambda: m(edit_operator(M_PARAM, "c", lambda t: [x.replace(")f32", ")q8") if x.startswith("#1=") else x for x in t])),
    "weight_rank_past_64": lambda: m(replace(M_PARAM, "@bias=(4)f32", "@bias=(" + ",".join(["1"] * 64 + ["4"]) + ")f32")),
    "weight_dims_all_past_int32": lambda: m(replace(M_PARAM, "@bias=(4)f32", "@bias=(" + ",".join(["4294967296"] * 64) + ")f32")),
    "weight_size_disagrees": lambda: m(edit_operator(M_PARAM, "c", lambda t: [x.replace("@bias=(8)f32", "@bias=(9)f32") for x in t])),
    "weight_dtype_changed": lambda: m(edit_operator(M_PARAM, "c", lambda t: [x.replace("@bias=(8)f32", "@bias=(8)f64") for x in t])),
    "absurd_weight": lambda: (ABSURD_WEIGHT.format(name="l").encode(), M_BIN),
    "absurd_weight_not_in_bin": lambda: (ABSURD_WEIGHT.format(name="big").encode(), M_BIN),
    "unknown_operator_type": lambda: m(edit_operator(M_PARAM, "c", lambda t: retype(t, "nn.Conv9d"))),
    "bad_param_value": lambda: m(edit_operator(M_PARAM, "c", lambda t: [x.replace("stride=(1,1)", "stride=(0,0)") for x in t])),
    "index_expr_unparsable": lambda: (replace(INDEX_PARAM, "expr=[None,[True,False,True]]", "expr=[None,[True,False,True)").encode(), INDEX_BIN),
    # as pnnx writes a boolean mask (first, the query bound to $attn_mask), for a batch of 5
    # sequences of 5: the (5, 5) mask reads as an attn_mask (L, S) and as a key_padding_mask (N, S)
    "mha_bool_mask_fits_both_kinds": lambda: (
        replace(replace(replace(MASKED_PARAM, "#1=(5,5)f32\n", "#1=(5,5)bool\n"), "2 1 0 1 2 ", "2 1 1 0 2 "),
                "$attn_mask=1 #0=(1,5,16)f32 #1=(5,5)f32", "$attn_mask=0 #1=(5,5)bool #0=(1,5,16)f32")
        .replace("(1,5,16)", "(5,5,16)").encode(),
        MASKED_BIN),
    "upsample_scale_overflows": lambda: (replace(UPSAMPLE_PARAM, "scale_factor=(2.0,2.0)", "scale_factor=(1e308,1e308)").encode(), UPSAMPLE_BIN),
    # a wrong graph: one operator computes another shape than pnnx annotated, the next fails
    "shapes_part_from_annotations": lambda: m(edit_operator(M_PARAM, "Tensor.slice_4",
                                                            lambda t: [x.replace("end=8", "end=12") for x in t])),
    "weight_disagrees_with_params": lambda: m(edit_operator(M_PARAM, "l", lambda t: [x.replace("in_features=8", "in_features=9") for x in t])),
    # the graph
    "duplicate_operator_names": lambda: m(edit_operator(M_PARAM, "bn", lambda t: [t[0], "c", *t[2:]])),
    "operand_produced_twice": lambda: m(edit_operator(M_PARAM, "bn", lambda t: [*t[:5], "1", *[x for x in t[6:] if not x.startswith("#2=")]])),
    "unproduced_operand": lambda: m(replace(edit_operator(M_PARAM, "F.sigmoid_6", _unproduced), "\n13 12\n", "\n13 13\n")),
    "cycle": lambda: m(edit_operator(M_PARAM, "c", _cycle)),
    "output_operator_produces": lambda: m(edit_operator(M_PARAM, "pnnx_input_0", lambda t: retype(t, "pnnx.Output"))),
    # a 1 kB file whose output would be 2^60 tensors, and tuples nested past the limit
    "tuples_double_at_each_level": lambda: m(doubling_tuples(60)),
    "tuples_nested_too_deep": lambda: m(deep_tuples(150)),
    "input_operator_reads": lambda: m(edit_operator(M_PARAM, "pnnx_output_0", lambda t: retype(t, "pnnx.Input"))),
    # shapes that would need absurd memory at run time
    "absurd_padding": lambda: m(edit_operator(M_PARAM, "c", lambda t: [x.replace("padding=(1,1)", "padding=(100000,100000)") for x in t])),
    # (dilated as much: the output keeps its size, only the padded input is absurd)
    "absurd_dilated_padding": lambda: m(edit_operator(M_PARAM, "c", lambda t: [
        x.replace("padding=(1,1)", "padding=(100000,100000)").replace("dilation=(1,1)", "dilation=(100000,100000)")
        for x in t])),
    # (a window as large: the padded input is absurd, the output small)
    "absurd_pool_window": lambda: (replace(replace(POOL_PARAM, "kernel_size=(3,3)", "kernel_size=(200001,200001)"),
                                           "padding=(0,0)", "padding=(100000,100000)").encode(), POOL_BIN),
    "absurd_upsample": lambda: (replace(UPSAMPLE_PARAM, "scale_factor=(2.0,2.0)", "scale_factor=(1000000.0,1000000.0)").encode(), UPSAMPLE_BIN),
    "expand_past_int64": lambda: (replace(EXPAND_PARAM, "sizes=(2,3,4,5)", "sizes=(2,4611686018427387904,4,5)").encode(), EXPAND_BIN),
    # (the input's shape fixed, so that the test can make the input)
    "empty_past_float": lambda: (replace(EMPTY_PARAM, "expr=[size(@0,0),2]", "expr=(1e308,1e308)")
                                 .replace("#0=(?,?)f32", "#0=(2,3)f32").encode(), EMPTY_BIN),
    # (every line that mentions operand 0 annotates it: the last annotation wins)
    "input_dim_past_int64": lambda: (RELU_PARAM.replace("#0=(2,3,4,5)f32", "#0=(2,3,4,99999999999999999999)f32").encode(), RELU_BIN),
}


def write(folder: Path) -> list[Path]:
    """Write every case into ``folder`` (its old model files removed first); the paths written."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in [*folder.glob("*.pnnx.param"), *folder.glob("*.pnnx.bin")]:
        old.unlink()
    written = []
    for name, make in CASES.items():
        param, bin_ = make()
        written.append(folder / f"{name}.pnnx.param")
        written[-1].write_bytes(param)
        if bin_ is not None:
            written.append(folder / f"{name}.pnnx.bin")
            written[-1].write_bytes(bin_)
    return written


def main(argv: list[str]) -> int:
    folder = Path(argv[0]) if argv else BROKEN
    written = write(folder)
    size = sum(p.stat().st_size for p in written)
    print(f"wrote {len(CASES)} cases ({len(written)} files, {size:,} bytes) to {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
