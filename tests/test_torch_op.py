"""The registered torch ops: opcheck (schema, fake kernel, dispatch) and torch.compile."""
import pytest
import torch

import dara_kernels as dk
from dara_kernels.check.cases import make_case
from dara_kernels.options import resolve_options

pytestmark = pytest.mark.skipif(not dk.extension_available(), reason="extension not built")


def op_args(method, with_mask, layout="fixed"):
    case = make_case(1, layout, 3, shape=(24, 4) if layout == "fixed" else (24,))
    opts = resolve_options(method, None, batch_norm="token" if with_mask else None)
    group_index = case.layout.get("group_index")
    return (case.rewards, group_index, case.layout.get("group_size", 0), torch.ones(3, dtype=torch.float64),
            case.mask if with_mask else None, None), opts.kernel_vector()


@pytest.mark.parametrize("layout", ["fixed", "shuffled"])
@pytest.mark.parametrize("with_mask", [False, True])
@pytest.mark.parametrize("method", ["grpo", "dara", "dvao", "gd2po_hard"])
def test_opcheck(method, with_mask, layout):
    check_ops(torch.ops.dara, method, with_mask, layout)


# Under the interpreter each opcheck takes about 8 s: two calls that between them take both layouts, the mask
# and its absence, a per-reward and a summed method.
@pytest.mark.skipif(dk.unavailable_reason("triton", torch.device("cpu")) is not None,
                    reason="the Triton ops run on CPU tensors under the interpreter only")
@pytest.mark.parametrize("method, with_mask, layout", [("dara", True, "shuffled"), ("grpo", False, "fixed")])
def test_opcheck_triton(method, with_mask, layout):
    check_ops(torch.ops.dara_triton, method, with_mask, layout)


def check_ops(ops, method, with_mask, layout):
    args, options = op_args(method, with_mask, layout)
    torch.library.opcheck(ops.fused_advantage.default, (*args, None, None, None, options))
    torch.library.opcheck(ops.accumulate.default, (*args, options))


@pytest.mark.parametrize("ids", [[5, 2, 5, 9, 2, 2, 7], [3], [], [4, 4, 4]])
def test_device_layout(ids):
    """The CSR layout the CUDA and Triton backends walk: rows in stable group order, each group's start."""
    group_index = torch.tensor(ids, dtype=torch.int32)
    torch.library.opcheck(torch.ops.dara.device_layout.default, (group_index,))
    rows, offsets, num_groups = torch.ops.dara.device_layout(group_index)
    distinct = sorted(set(ids))
    expected_rows = [i for g in distinct for i, gid in enumerate(ids) if gid == g]
    starts = [expected_rows.index(next(i for i, gid in enumerate(ids) if gid == g)) for g in distinct]
    assert rows.tolist() == expected_rows
    assert offsets.tolist() == starts + [len(ids)] * (len(ids) + 1 - len(starts))
    assert int(num_groups) == len(distinct) and num_groups.dtype == torch.int64


@pytest.mark.parametrize("method", ["gdpo", "dara", "grpo"])
def test_compile_fullgraph_matches_eager(method):
    case = make_case(2, "fixed", 3, shape=(64, 8))

    def step(rewards, mask):
        out = dk.fused_advantage(rewards, 8, method=method, response_mask=mask, batch_norm="token",
                                 validate=False, backend="cpu")
        return out.advantages * 2.0, out.token_advantages, out.weights

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    for a, b in zip(compiled(case.rewards, case.mask), step(case.rewards, case.mask)):
        torch.testing.assert_close(a, b)


def test_compile_fullgraph_with_default_arguments():
    """validate=True (the default) steps aside by itself while torch.compile traces."""
    case = make_case(3, "fixed", 4, shape=(64, 8))

    def step(rewards):
        return dk.fused_advantage(rewards, 8).advantages

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(case.rewards), step(case.rewards))


def test_value_checks_still_run_in_eager():
    rewards = torch.rand(8, 2)
    rewards[3, 1] = float("inf")
    with pytest.raises(ValueError, match="Inf"):
        dk.fused_advantage(rewards, 4)
