"""Every table shared by Python, C++ and Triton has one definition
(dara_kernels/wire.py); these tests fail when a copy drifts from it."""
import dataclasses
import inspect
import pathlib
import shutil
import subprocess
import sys

import pytest
import torch

import dara_kernels as dk
from dara_kernels import backends, wire
from dara_kernels.check.cases import make_case
from dara_kernels.options import resolve_options

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_generated_files_are_current():
    from scripts.generate_wire import stale_or_write

    assert stale_or_write(ROOT, write=False) == [], "run python scripts/generate_wire.py and commit the result"


def test_generated_files_go_stale_when_the_option_table_changes(monkeypatch):
    """One option more in the table: the C++ header, the Triton module, the AdvantageOptions dataclass and
    fused_advantage's generated keywords all differ from what is committed, and --check fails."""
    from scripts import generate_wire

    option = wire.Option("new_cap", "cap")
    monkeypatch.setattr(wire, "OPTIONS", wire.OPTIONS + (option,))
    monkeypatch.setattr(wire, "OPTION_NAMES", wire.OPTION_NAMES + ("new_cap",))
    monkeypatch.setattr(wire, "KERNEL_FIELDS", wire.KERNEL_FIELDS + (wire.KernelField("new_cap", "double"),))
    assert sorted(generate_wire.stale_or_write(ROOT, write=False)) == sorted(generate_wire.GENERATED)
    api = generate_wire.GENERATED["dara_kernels/api.py"]((ROOT / "dara_kernels/api.py").read_text())
    assert "    new_cap: Optional[float] = None,\n" in api and "new_cap=new_cap," in api
    assert "    new_cap: Optional[float]\n" in generate_wire.options_module()
    monkeypatch.setattr(generate_wire, "ROOT", ROOT)
    monkeypatch.setattr("sys.argv", ["generate_wire.py", "--check"])
    assert generate_wire.main() == 1


def test_the_generator_reads_its_own_tree_and_writes_a_deleted_file_anew(tmp_path):
    """The package's __init__ imports generated_options.py and api.py, so the generator must not import it: a
    deleted generated file could not be written again, and an installed package (an editable one points at
    another tree) would be read in place of the tables beside the script. A copy of the tree with
    generated_options.py deleted and the cpu record's limit changed: the file comes back as committed, and
    the header takes the copy's limit."""
    from scripts import generate_wire

    shutil.copytree(ROOT / "dara_kernels", tmp_path / "dara_kernels",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copytree(ROOT / "scripts", tmp_path / "scripts", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "csrc", tmp_path / "csrc")
    (tmp_path / "dara_kernels/generated_options.py").unlink()
    records = tmp_path / "dara_kernels/backends.py"
    limit = backends.backend("cpu").max_rewards
    assert records.read_text().count(f"_ops.kernel_runner(), {limit},") == 1
    records.write_text(records.read_text().replace(f"_ops.kernel_runner(), {limit},", "_ops.kernel_runner(), 48,"))
    # Without an editable install's finder, which would supply the deleted module from the installed tree.
    run = ("import runpy, sys; sys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in "
           "getattr(f, '__module__', '')]; sys.argv = ['generate_wire.py']; "
           "runpy.run_path('scripts/generate_wire.py', run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", run], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split()[1::2]) == ["csrc/core/generated_tables.h", "dara_kernels/generated_options.py"]
    for relative in generate_wire.GENERATED:
        if relative != "csrc/core/generated_tables.h":
            assert (tmp_path / relative).read_text() == (ROOT / relative).read_text(), relative
    assert "constexpr int kMaxCpuRewards = 48;" in (tmp_path / "csrc/core/generated_tables.h").read_text()


def test_a_kind_row_types_the_keyword_and_the_field():
    """fused_advantage's keywords and AdvantageOptions' fields carry their kind's annotations, visible to
    inspect.signature and to a type checker (a static dataclass)."""
    parameters = inspect.signature(dk.fused_advantage).parameters
    fields = {f.name: f.type for f in dataclasses.fields(dk.AdvantageOptions)}
    for option in wire.OPTIONS:
        kind = wire.OPTION_KINDS[option.kind]
        assert parameters[option.name].annotation == kind.keyword_type and parameters[option.name].default is None
        assert fields[option.name] == kind.field_type
    assert dataclasses.is_dataclass(dk.AdvantageOptions) and dk.AdvantageOptions.__dataclass_params__.frozen


def test_every_option_has_a_kind_row():
    assert {o.kind for o in wire.OPTIONS} <= set(wire.OPTION_KINDS)
    assert wire.COLUMN_OPTIONS == ("reward_names", "reward_gates")
    assert wire.NAMED_COLUMNS == "reward_names" and wire.INDEXED_COLUMNS == ("reward_gates",)


def test_fused_advantage_takes_every_option_of_the_table():
    parameters = list(inspect.signature(dk.fused_advantage).parameters)
    assert [p for p in parameters if p in wire.OPTION_NAMES] == list(wire.OPTION_NAMES)
    assert [f.name for f in dataclasses.fields(dk.AdvantageOptions)] == ["method", "preset", *wire.OPTION_NAMES]


def test_every_option_keyword_reaches_the_resolution(monkeypatch):
    """fused_advantage passes each keyword on by name: a keyword left out of that call would be dropped."""
    from dara_kernels import api

    seen = {}

    def capture(method, preset, **given):
        seen.update(given)
        raise RuntimeError("captured")

    monkeypatch.setattr(api, "_options", capture)
    with pytest.raises(RuntimeError, match="captured"):
        dk.fused_advantage(torch.zeros(4, 2), 2, **{name: object() for name in wire.OPTION_NAMES})
    assert sorted(seen) == sorted(wire.OPTION_NAMES) and all(v is not None for v in seen.values())


def test_triton_kernels_read_options_by_their_field_names():
    """The Triton kernels take the option vector as one argument (triton/generated_tables.KernelOptions, generated from
    wire.KERNEL_FIELDS) and read each option by its field name: a new option reaches them without a signature
    change, and every name they read is a field."""
    pytest.importorskip("triton")
    import re

    from dara_kernels.triton import accumulate, apply, finalize
    from dara_kernels.triton.fused import _runtime_parameters
    from dara_kernels.triton.generated_tables import KernelOptions, kernel_options

    fields = [f.name for f in wire.KERNEL_FIELDS]
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
    assert [wire.combined_columns(m, 4) for m in wire.METHODS] == [1, 4, 4, 4, 4, 4, 4, 4, 1]
    assert wire.combined_columns("dara", 4, positive=True) == 5
    assert wire.combined_columns("rvpo", 4, positive=True) == 1


def test_output_fields_match_the_named_tuple():
    assert dk.AdvantageOutput._fields == tuple(name for name, _, _ in wire.OUTPUT_FIELDS)


def test_option_vector_follows_the_option_table():
    opts = resolve_options("gd2po_hard", "verl", nan_policy="zero", alpha=0.25)
    vector = dict(zip((name for name, _ in wire.OPTION_FIELDS), opts.kernel_vector()))
    assert len(vector) == len(wire.OPTION_FIELDS)
    assert vector["method"] == wire.METHOD_CODE["gd2po_hard"]
    assert vector["batch_norm"] == wire.BATCH_NORM_CODE["token"]
    assert vector["nan_to_zero"] == 1.0 and vector["singleton_verl"] == 1.0
    assert vector["alpha"] == 0.25 and vector["bn_eps"] == 1e-8


def test_accumulator_offsets_tile_the_vector():
    offsets = wire.segment_offsets(wire.ACCUMULATOR_SEGMENTS, 5, 5)
    starts = [offsets[name] for name, _ in wire.ACCUMULATOR_SEGMENTS] + [offsets["size"]]
    assert starts == sorted(starts) and starts[0] == 0
    assert wire.accumulator_sizes(5, 5) == (9 + 6 * 5 + 2 * 5 + 2 * 25, 10)
    assert wire.accumulator_sizes(5, 1) == (9 + 6 * 5 + 2 + 2, 10)
    assert wire.accumulator_sizes(5, 10) == (9 + 6 * 5 + 2 * 10 + 2 * 100, 10)


def test_signal_counts_are_adjacent():
    """triton/finalize.py reads the group-signal counts as one vector from the first one's slot."""
    offsets = wire.segment_offsets(wire.ACCUMULATOR_SEGMENTS, 4, 5)
    start = offsets[wire.SIGNAL_COUNTS[0]]
    assert [offsets[name] for name in wire.SIGNAL_COUNTS] == list(range(start, start + len(wire.SIGNAL_COUNTS)))


def test_bad_input_counts_sit_where_distributed_mode_reads_them():
    from dara_kernels.distributed import _COUNT_SLOTS

    for k, c in ((1, 1), (4, 5), (16, 17)):
        offsets = wire.segment_offsets(wire.ACCUMULATOR_SEGMENTS, k, c)
        assert {name: offsets[name] for name in _COUNT_SLOTS} == _COUNT_SLOTS


@pytest.mark.skipif(not dk.extension_available(), reason="needs the compiled extension")
def test_op_schemas_name_the_output_fields():
    returns = [r.name for r in torch.ops.dara.fused_advantage.default._schema.returns]
    assert returns == [name for name, _, _ in wire.OUTPUT_FIELDS]


@pytest.mark.skipif(not dk.extension_available(), reason="needs the compiled extension")
@pytest.mark.parametrize("method", dk.METHODS)
def test_kernel_accumulators_have_the_wire_size(method):
    case = make_case(0, "fixed", 4, shape=(32, 8))
    opts = resolve_options(method, None)
    acc, ext = torch.ops.dara.accumulate(case.rewards, None, 8, torch.ones(4, dtype=torch.float64), None, None,
                                         opts.kernel_vector())
    columns = wire.combined_columns(method, 4, opts.calibration == "positive")
    assert (acc.numel(), ext.numel()) == wire.accumulator_sizes(4, columns)


@pytest.mark.skipif(not dk.extension_available(), reason="needs the compiled extension")
@pytest.mark.parametrize("tail,match", [
    ([1.0, 0.0], None), ([3.0, 0.0], "index below K = 3, got 3"), ([1.0, -1.0], "index below K = 3, got -1"),
    ([1.0, 0.5], "index below K = 3, got 0.5"), ([1.0], "options and \\(gated, gate\\) column pairs, got 20"),
])
def test_the_binding_checks_the_indexed_columns_against_k(tail, match):
    """The values after the scalar fields index reward columns (wire.INDEXED_COLUMNS): the C++ binding checks
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
    """The gates kind's cache key (wire.OPTION_KINDS) freezes a mapping, so a call with the same gates hits
    the resolved-options cache instead of resolving them again."""
    from dara_kernels import api

    rewards = torch.rand(8, 3)
    dk.fused_advantage(rewards, 4, reward_gates={2: 0}, reward_names=["a", "b", "c"])
    hits = api._resolved.cache_info().hits
    dk.fused_advantage(rewards, 4, reward_gates={2: 0}, reward_names=["a", "b", "c"])
    assert api._resolved.cache_info().hits == hits + 1


def test_the_check_sweeps_every_sample_of_every_option():
    """The check's option calls run each sample value of every option's kind (wire.OPTION_KINDS)."""
    from dara_kernels.check.table_sweeps import option_calls

    seen = {(name, repr(value)) for call in option_calls() for name, value in call.options.items()}
    for option in wire.OPTIONS:
        methods = wire.METHOD_ONLY_OPTIONS.get(option.name, wire.METHODS)
        for method in methods:
            default = wire.METHOD_TRAITS[method].options.get(option.name, option.default)
            for value in wire.OPTION_KINDS[option.kind].samples(option, default):
                assert (option.name, repr(value)) in seen, (option.name, value)


def test_a_scalar_option_is_keyed_as_given():
    """A scalar kind's cache key is the value itself: a list given for a number is reported as a list."""
    with pytest.raises(TypeError, match="eps must be a real number, got list"):
        dk.fused_advantage(torch.rand(8, 2), 4, eps=[1e-6])
