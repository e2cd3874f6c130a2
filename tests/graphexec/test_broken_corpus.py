"""Hand-broken copies of real exports (tests/fixtures/broken/, written by
tools/make_broken_corpus.py): each raises its own GraphexecError subclass, with a message
that names the problem and the file, never another exception and never a big allocation.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from graphexec import (
    Engine,
    GraphexecError,
    GraphStructureError,
    InputShapeError,
    LayerConfigError,
    ModelFormatError,
    UnsupportedOperatorError,
    WeightError,
)
from tests.paths import REPO
from tools import make_broken_corpus

BROKEN = REPO / "tests" / "fixtures" / "broken"
MEMORY_LIMIT = 256 * 2**20


@dataclass(frozen=True)
class Broken:
    name: str
    error: type[GraphexecError]
    #: Words the message must hold (each one, as written).
    words: tuple[str, ...]
    #: The param file's line the error must point at, where it is about one line.
    line: int | None = None
    #: "load", or "forward" for a model that loads and must refuse to run.
    stage: str = "load"


MF, WE, GS = ModelFormatError, WeightError, GraphStructureError
CASES = [
    # the bin
    Broken("truncated_bin", MF, ("not a pnnx weight archive", "zip")),
    Broken("truncated_bin_tail", MF, ("not a pnnx weight archive", "zip")),
    Broken("empty_bin", WE, ("'c.bias'", "missing", "not in the bin")),
    Broken("no_bin", WE, ("no_bin.pnnx.bin: the weight file does not exist", "'c.bias'")),
    Broken("bin_is_text", MF, ("not a pnnx weight archive",)),
    Broken("deflated_entries", MF, ("'c.bias' is compressed",)),
    Broken("duplicate_entry", MF, ("'c.bias' appears twice",)),
    Broken("missing_entry", WE, ("'bn.running_var'", "missing")),
    Broken("zip_directory_lies_about_size", MF, ("'c.weight'", "damaged")),
    Broken("zip_directory_claims_a_huge_entry", MF, ("'l.weight'", "4000000000000 bytes past the end")),
    Broken("zip_directory_sizes_differ", MF, ("'c.bias'", "sizes differ")),
    Broken("zip_header_offset_lies", MF, ("'c.weight'", "no local header")),
    Broken("zip_local_header_names_another_entry", MF, ("'c.weight'", "local header names")),
    Broken("zip_entry_encrypted", MF, ("'bn.bias' is encrypted",)),
    Broken("zip_two_records_one_entry", MF, ("'c.bias'", "local header names b'c.weight'")),
    Broken("zip_entry_named_up_the_tree", WE, ("'c.bias'", "missing")),  # a name, never a path
    Broken("zip_extra_field_length_lies", MF, ("not a pnnx weight archive", "extra field")),
    Broken("zip_local_name_length_lies", MF, ("'c.bias'", "local header names")),
    Broken("zip_crc_wrong", WE, ("'c.bias'", "CRC-32")),
    Broken("zip_needs_version_9_9", MF, ("not a pnnx weight archive", "version 9.9")),
    Broken("zip_directory_size_huge", MF, ("not a pnnx weight archive",)),
    # the param file as a whole
    Broken("empty_param", MF, ("magic number",), line=1),
    Broken("param_is_zip", MF, ("not a text file",)),
    Broken("non_utf8_param", MF, ("not UTF-8",)),
    Broken("bad_magic", MF, ("bad magic number 7767518",), line=1),
    Broken("operator_count_enormous", MF, ("declares 99999999999999999999 operators", "13 lines"), line=2),
    Broken("operator_count_disagrees", MF, ("declares 14 operators", "13 lines"), line=2),
    Broken("operand_count_disagrees", MF, ("declares 11 operands", "use 12"), line=2),
    # one operator line
    Broken("input_count_disagrees", MF, ("operator l", "not an operand name"), line=12),
    Broken("input_count_enormous", MF, ("operator l", "99999999999999999999 inputs", "names fewer"), line=12),
    # the expression's message quotes its head and tail and says where all of it is
    Broken("expression_nested_too_deep", LayerConfigError,
           ("operator pnnx_expr_7", "nested deeper than 200 levels", "characters left out",
            "expression_nested_too_deep.pnnx.param:8")),
    Broken("output_count_disagrees", MF, ("F.relu_5", "9 outputs", "names fewer"), line=6),
    Broken("negative_dim", MF, ("pnnx_input_0", "bad dimension '-3'"), line=3),
    Broken("negative_weight_dim", MF, ("@weight", "bad dimension '-3'"), line=4),
    Broken("unknown_weight_dtype", MF, ("@weight", "unknown type 'f33'"), line=4),
    Broken("unknown_operand_dtype", MF, ("#1", "unknown type 'q8'"), line=4),
    # regression: a weight of 100,000 dims made a byte count too long for str() (a raw ValueError)
    Broken("weight_rank_past_64", MF, ("@bias", "65 dimensions (at most 64)"), line=12),
    Broken("weight_dims_all_past_int32", WE, ("'l.bias'", "bytes for", "but holds 16")),
    Broken("weight_size_disagrees", WE, ("'c.bias'", "36 bytes", "holds 32")),
    Broken("weight_dtype_changed", WE, ("'c.bias'", "(8)f64", "64 bytes")),
    Broken("absurd_weight", WE, ("'l.weight'", "4000000000000 bytes")),
    Broken("absurd_weight_not_in_bin", WE, ("'big.weight'", "missing")),
    Broken("unknown_operator_type", UnsupportedOperatorError, ("nn.Conv9d", "used by c")),
    Broken("bad_param_value", LayerConfigError, ("operator c", "stride")),
    Broken("weight_disagrees_with_params", LayerConfigError, ("operator l", "@weight", "(4, 9)")),
    # regression: ast.literal_eval's SyntaxError used to escape Layer.__init__ (layers/indexing.py)
    Broken("index_expr_unparsable", LayerConfigError, ("Tensor.index_1", "SyntaxError")),
    Broken("mha_bool_mask_fits_both_kinds", LayerConfigError,
           ("operator attn", "fits both as an attn_mask", "key_padding_mask", "float attn_mask")),
    Broken("shapes_part_from_annotations", LayerConfigError,
           ("operator l (nn.Linear)", "pnnx's annotations at operand 8, output of Tensor.slice_4",
            "annotated (1,8), inferred (1,12)")),
    # regression: 4 x 1e308 is inf, and math.floor(inf)'s OverflowError in infer_shapes (layers/resize.py)
    # used to escape graphexec/shapes.py
    Broken("upsample_scale_overflows", LayerConfigError, ("module", "nn.Upsample")),
    # the graph
    Broken("duplicate_operator_names", GS, ("two operators are named 'c'",)),
    Broken("operand_produced_twice", GS, ("'1' is produced twice",)),
    Broken("unproduced_operand", GS, ("'99'", "no operator produces")),
    Broken("cycle", GS, ("cycle", "c", "bn")),
    # regression: the Input line retyped pnnx.Output used to give a raw KeyError at load
    Broken("output_operator_produces", GS, ("pnnx.Output",)),
    # regression: the output, packed with itself 60 times over, was expanded element by element (2^60)
    Broken("tuples_double_at_each_level", GS, ("2,305,843,009,213,693,952 tensors in all",)),
    # regression: tuples nested as values of the plan were walked by recursion
    Broken("tuples_nested_too_deep", LayerConfigError, ("operator deep100", "nested 101 deep")),
    # regression: the Output line retyped pnnx.Input used to load, and forward returned ()
    Broken("input_operator_reads", GS, ("pnnx.Input",)),
    # shapes that would need absurd memory at run time
    Broken("absurd_padding", InputShapeError, ("memory_limit",), stage="forward"),
    # regression: the output kept its size, so the memory_limit check passed, and the padded copy of the
    # input (447 GiB) failed inside the layer (an ExecutionError from a MemoryError)
    Broken("absurd_dilated_padding", InputShapeError, ("memory_limit",), stage="forward"),
    Broken("absurd_pool_window", InputShapeError, ("memory_limit",), stage="forward"),
    Broken("absurd_upsample", InputShapeError, ("memory_limit",), stage="forward"),
    # regression: the element count used to wrap past int64 in TensorSpec.nbytes, so the memory_limit check
    # passed and numpy failed inside the layer (an ExecutionError)
    Broken("expand_past_int64", InputShapeError, ("memory_limit",), stage="forward"),
    # regression: a size of 1e308 x 1e308 (an expression's value) used to raise a raw OverflowError
    # where the plan's cost estimates and the memory_limit message turned byte counts into floats
    Broken("empty_past_float", InputShapeError, ("memory_limit", "10^610 MiB"), stage="forward"),
    # regression: a dim past int64 used to make Engine.load raise a raw OverflowError
    Broken("input_dim_past_int64", MF, ("99999999999999999999",)),
]


def _files(name: str) -> tuple[Path, Path]:
    return BROKEN / f"{name}.pnnx.param", BROKEN / f"{name}.pnnx.bin"


# the damaged sizes part from pnnx's annotations, which the load warns of before the run refuses them
@pytest.mark.filterwarnings("ignore::graphexec.ExportMismatchWarning")
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_broken_file_raises_its_own_error(case: Broken):
    param = _files(case.name)[0]
    with pytest.raises(GraphexecError) as info:
        engine = Engine.load(param, threads=1, memory_limit=MEMORY_LIMIT)
        assert case.stage == "forward", f"{case.name} loaded"
        with engine:
            inputs = [np.zeros(s, d) for s, d in zip(engine.input_shapes.values(), engine.input_dtypes.values())]
            engine.forward(*inputs, timeout=30)
    error = info.value
    message = str(error)
    assert type(error) is case.error, f"{type(error).__name__}: {message}"
    for word in case.words:
        assert word in message, f"{word!r} is not in: {message}"
    if isinstance(error, ModelFormatError):
        assert f"{case.name}.pnnx." in message, f"the message does not name the file: {message}"
        assert error.path is None or Path(error.path).name.startswith(case.name)
    if case.line is not None:
        assert error.line == case.line and f"{param}:{case.line}: " in message


def test_the_table_covers_the_corpus():
    on_disk = {p.name.removesuffix(".pnnx.param") for p in BROKEN.glob("*.pnnx.param")}
    assert on_disk == {c.name for c in CASES} == set(make_broken_corpus.CASES)


def test_the_corpus_is_what_the_tool_writes(tmp_path):
    written = make_broken_corpus.write(tmp_path)
    assert sorted(p.name for p in written) == sorted(p.name for p in BROKEN.iterdir() if ".pnnx." in p.name)
    for path in written:
        assert path.read_bytes() == (BROKEN / path.name).read_bytes(), f"{path.name} differs; run tools/make_broken_corpus.py"


def test_the_corpus_is_small():
    sizes = {p.name: p.stat().st_size for p in BROKEN.iterdir()}
    assert max(sizes.values()) < 20_000, max(sizes.items(), key=lambda kv: kv[1])
    assert len(_files("absurd_weight")[0].read_bytes()) < 250  # a 10^12-element weight in ~200 bytes
