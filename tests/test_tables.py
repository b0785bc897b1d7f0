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

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_generated_files_are_current():
    from scripts.generate_tables import stale_or_write

    assert stale_or_write(ROOT, write=False) == [], "run python scripts/generate_tables.py and commit the result"


def test_generated_files_go_stale_when_the_option_table_changes(monkeypatch):
    """One option more in the table: the C++ header, the Triton module, the AdvantageOptions dataclass and
    fused_advantage's generated keywords all differ from what is committed, and --check fails."""
    from scripts import generate_tables

    option = tables.Option("new_cap", "cap")
    monkeypatch.setattr(tables, "OPTIONS", tables.OPTIONS + (option,))
    monkeypatch.setattr(tables, "OPTION_NAMES", tables.OPTION_NAMES + ("new_cap",))
    monkeypatch.setattr(tables, "KERNEL_FIELDS", tables.KERNEL_FIELDS + (tables.KernelField("new_cap", "double"),))
    assert sorted(generate_tables.stale_or_write(ROOT, write=False)) == sorted(generate_tables.GENERATED)
    api = generate_tables.GENERATED["dara_kernels/api.py"]((ROOT / "dara_kernels/api.py").read_text())
    assert "    new_cap: Optional[float] = None,\n" in api and "new_cap=new_cap," in api
    assert "    new_cap: Optional[float]\n" in generate_tables.options_module()
    monkeypatch.setattr(generate_tables, "ROOT", ROOT)
    monkeypatch.setattr("sys.argv", ["generate_tables.py", "--check"])
    assert generate_tables.main() == 1


def test_a_kind_row_types_the_keyword_and_the_field():
    """fused_advantage's keywords and AdvantageOptions' fields carry their kind's annotations, visible to
    inspect.signature and to a type checker (a static dataclass)."""
    parameters = inspect.signature(dk.fused_advantage).parameters
    fields = {f.name: f.type for f in dataclasses.fields(dk.AdvantageOptions)}
    for option in tables.OPTIONS:
        kind = tables.OPTION_KINDS[option.kind]
        assert parameters[option.name].annotation == kind.keyword_type and parameters[option.name].default is None
        assert fields[option.name] == kind.field_type
    assert dataclasses.is_dataclass(dk.AdvantageOptions) and dk.AdvantageOptions.__dataclass_params__.frozen


def test_every_option_has_a_kind_row():
    assert {o.kind for o in tables.OPTIONS} <= set(tables.OPTION_KINDS)
    assert tables.COLUMN_OPTIONS == ("reward_names", "reward_gates")
    assert tables.NAMED_COLUMNS == "reward_names" and tables.INDEXED_COLUMNS == ("reward_gates",)


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


@pytest.mark.skipif(not dk.extension_available(), reason="needs the compiled extension")
@pytest.mark.parametrize("tail,match", [
    ([1.0, 0.0], None), ([3.0, 0.0], "index below K = 3, got 3"), ([1.0, -1.0], "index below K = 3, got -1"),
    ([1.0, 0.5], "index below K = 3, got 0.5"), ([1.0], "options and \\(gated, gate\\) column pairs, got 20"),
])
def test_the_binding_checks_the_indexed_columns_against_k(tail, match):
    """The values after the scalar fields index reward columns (tables.INDEXED_COLUMNS): the C++ binding checks
    each is a whole number below K (the generated is_reward_column) and that they come in whole entries."""
    case = make_case(0, "fixed", 3, shape=(16, 4))
    vector = resolve_options("gdpo", None).kernel_vector() + tail
    call = lambda: torch.ops.dara.fused_advantage(case.rewards, None, 4, torch.ones(3, dtype=torch.float64),  # noqa
                                                  None, None, None, None, None, vector)
    if match is None:
        call()
    else:
        with pytest.raises(RuntimeError, match=match):
            call()


@pytest.mark.parametrize("names,gates,match", [
    (["a", "b"], None, "reward_names must name each of the K=3 reward columns, got 2 names"),
    (None, {3: 0}, "reward_gates: column index 3 is out of range for K=3 reward columns \\(0 to 2\\)"),
])
def test_options_that_name_or_index_columns_are_checked_against_k(names, gates, match):
    with pytest.raises(ValueError, match=match):
        dk.fused_advantage(torch.rand(8, 3), 4, reward_names=names, reward_gates=gates)


def test_a_mapping_of_gates_is_a_cache_key():
    """The gates kind's cache key (tables.OPTION_KINDS) freezes a mapping, so a call with the same gates hits
    the resolved-options cache instead of resolving them again."""
    from dara_kernels import api

    rewards = torch.rand(8, 3)
    dk.fused_advantage(rewards, 4, reward_gates={2: 0}, reward_names=["a", "b", "c"])
    hits = api._resolved.cache_info().hits
    dk.fused_advantage(rewards, 4, reward_gates={2: 0}, reward_names=["a", "b", "c"])
    assert api._resolved.cache_info().hits == hits + 1


def test_the_check_sweeps_every_sample_of_every_option():
    """The check's option calls run each sample value of every option's kind (tables.OPTION_KINDS)."""
    from dara_kernels.check.table_sweeps import option_calls

    seen = {(name, repr(value)) for call in option_calls() for name, value in call.options.items()}
    for option in tables.OPTIONS:
        methods = tables.METHOD_ONLY_OPTIONS.get(option.name, tables.METHODS)
        for method in methods:
            default = tables.METHOD_TRAITS[method].options.get(option.name, option.default)
            for value in tables.OPTION_KINDS[option.kind].samples(option, default):
                assert (option.name, repr(value)) in seen, (option.name, value)


def test_a_scalar_option_is_keyed_as_given():
    """A scalar kind's cache key is the value itself: a list given for a number is reported as a list."""
    with pytest.raises(TypeError, match="eps must be a real number, got list"):
        dk.fused_advantage(torch.rand(8, 2), 4, eps=[1e-6])
