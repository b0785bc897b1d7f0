"""Every table shared by Python, C++ and Triton has one definition
(dara_kernels/tables.py); these tests fail when a copy drifts from it."""
import dataclasses
import inspect
import pathlib

import pytest
import torch

import dara_kernels as dk
from dara_kernels import tables
from dara_kernels.check.cases import make_case
from dara_kernels.options import resolve_options


def test_generated_files_are_current():
    from scripts.generate_tables import stale_or_write

    root = pathlib.Path(__file__).resolve().parent.parent
    assert stale_or_write(root, write=False) == [], "run python scripts/generate_tables.py and commit the result"


def test_fused_advantage_takes_every_option_of_the_table():
    parameters = list(inspect.signature(dk.fused_advantage).parameters)
    assert [p for p in parameters if p in tables.OPTION_NAMES] == list(tables.OPTION_NAMES)
    assert [f.name for f in dataclasses.fields(dk.AdvantageOptions)] == ["method", "preset", *tables.OPTION_NAMES]


def test_every_option_keyword_reaches_the_resolution(monkeypatch):
    """fused_advantage passes each keyword on by name: a keyword left out of that call would be dropped."""
    from dara_kernels import api

    seen = {}

    def capture(method, preset, **given):
        seen.update(given)
        raise RuntimeError("captured")

    monkeypatch.setattr(api, "_options", capture)
    with pytest.raises(RuntimeError, match="captured"):
        dk.fused_advantage(torch.zeros(4, 2), 2, **{name: object() for name in tables.OPTION_NAMES})
    assert sorted(seen) == sorted(tables.OPTION_NAMES) and all(v is not None for v in seen.values())


def test_triton_kernels_read_options_by_their_field_names():
    """The Triton kernels take the option vector as one argument (triton/generated_tables.KernelOptions, generated from
    tables.KERNEL_FIELDS) and read each option by its field name: a new option reaches them without a signature
    change, and every name they read is a field."""
    pytest.importorskip("triton")
    import re

    from dara_kernels.triton import accumulate, apply, finalize
    from dara_kernels.triton.fused import _runtime_parameters
    from dara_kernels.triton.generated_tables import KernelOptions, kernel_options

    fields = [f.name for f in tables.KERNEL_FIELDS]
    assert list(KernelOptions._fields) == fields + ["gated", "gate"]
    for kernel in (accumulate.accumulate_kernel, finalize.finalize_kernel, apply.apply_kernel):
        parameters = _runtime_parameters(kernel)
        # Never "options": Triton's launch binder is def dynamic_func(<parameters>, **options).
        assert "opts" in parameters and "options" not in parameters and not set(parameters) & set(fields)
    source = "".join(pathlib.Path(m.__file__).read_text() for m in (accumulate, apply, finalize))
    from dara_kernels.triton import common

    read = set(re.findall(r"opts\.(\w+)", source + pathlib.Path(common.__file__).read_text()))
    assert read and read <= set(KernelOptions._fields)
    gated = kernel_options(resolve_options("gdpo", None, reward_gates={2: 0, 1: 0}).kernel_vector())
    assert gated.gated == 1.0 and gated.gate[:4] == (-1, 0, 0, -1)
    assert kernel_options(resolve_options("gdpo", None).kernel_vector()).gated == 0.0
    # Floats only: an int specialises a kernel on its value, a bool breaks the Triton 3.4 and 3.6 interpreters.
    assert {type(v) for v in gated[:-1] + gated.gate} == {float}


def test_column_counts_follow_the_modes():
    assert [tables.combined_columns(m, 4) for m in tables.METHODS] == [1, 4, 4, 4, 4, 4, 4, 4, 1]
    assert tables.combined_columns("dara", 4, positive=True) == 5
    assert tables.combined_columns("rvpo", 4, positive=True) == 1


def test_output_fields_match_the_named_tuple():
    assert dk.AdvantageOutput._fields == tuple(name for name, _, _ in tables.OUTPUT_FIELDS)


def test_option_vector_follows_the_option_table():
    opts = resolve_options("gd2po_hard", "verl", nan_policy="zero", alpha=0.25)
    vector = dict(zip((name for name, _ in tables.OPTION_FIELDS), opts.kernel_vector()))
    assert len(vector) == len(tables.OPTION_FIELDS)
    assert vector["method"] == tables.METHOD_CODE["gd2po_hard"]
    assert vector["batch_norm"] == tables.BATCH_NORM_CODE["token"]
    assert vector["nan_to_zero"] == 1.0 and vector["singleton_verl"] == 1.0
    assert vector["alpha"] == 0.25 and vector["bn_eps"] == 1e-8


def test_accumulator_offsets_tile_the_vector():
    offsets = tables.segment_offsets(tables.ACCUMULATOR_SEGMENTS, 5, 5)
    starts = [offsets[name] for name, _ in tables.ACCUMULATOR_SEGMENTS] + [offsets["size"]]
    assert starts == sorted(starts) and starts[0] == 0
    assert tables.accumulator_sizes(5, 5) == (9 + 6 * 5 + 2 * 5 + 2 * 25, 10)
    assert tables.accumulator_sizes(5, 1) == (9 + 6 * 5 + 2 + 2, 10)
    assert tables.accumulator_sizes(5, 10) == (9 + 6 * 5 + 2 * 10 + 2 * 100, 10)


def test_signal_counts_are_adjacent():
    """triton/finalize.py reads the group-signal counts as one vector from the first one's slot."""
    offsets = tables.segment_offsets(tables.ACCUMULATOR_SEGMENTS, 4, 5)
    start = offsets[tables.SIGNAL_COUNTS[0]]
    assert [offsets[name] for name in tables.SIGNAL_COUNTS] == list(range(start, start + len(tables.SIGNAL_COUNTS)))


def test_bad_input_counts_sit_where_distributed_mode_reads_them():
    from dara_kernels.distributed import _COUNT_SLOTS

    for k, c in ((1, 1), (4, 5), (16, 17)):
        offsets = tables.segment_offsets(tables.ACCUMULATOR_SEGMENTS, k, c)
        assert {name: offsets[name] for name in _COUNT_SLOTS} == _COUNT_SLOTS


@pytest.mark.skipif(not dk.extension_available(), reason="needs the compiled extension")
def test_op_schemas_name_the_output_fields():
    returns = [r.name for r in torch.ops.dara.fused_advantage.default._schema.returns]
    assert returns == [name for name, _, _ in tables.OUTPUT_FIELDS]


@pytest.mark.skipif(not dk.extension_available(), reason="needs the compiled extension")
@pytest.mark.parametrize("method", dk.METHODS)
def test_kernel_accumulators_have_the_wire_size(method):
    case = make_case(0, "fixed", 4, shape=(32, 8))
    opts = resolve_options(method, None)
    acc, ext = torch.ops.dara.accumulate(case.rewards, None, 8, torch.ones(4, dtype=torch.float64), None, None,
                                         opts.kernel_vector())
    columns = tables.combined_columns(method, 4, opts.calibration == "positive")
    assert (acc.numel(), ext.numel()) == tables.accumulator_sizes(4, columns)
