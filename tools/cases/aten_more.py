"""Golden cases for layers/aten_index.py, aten_math.py, aten_linalg.py and aten_shape.py:
more calls pnnx leaves as ``aten::`` operators."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tools.cases import Case, Fn

torch.manual_seed(0)


def x(*shape):
    return torch.randn(*shape)


def square(n):
    a = torch.randn(2, n, n)
    return a + n * torch.eye(n)


class Bags(torch.nn.Module):
    """nn.EmbeddingBag in its three modes, one with a padding row, and per-sample weights."""

    def __init__(self):
        super().__init__()
        self.mean = torch.nn.EmbeddingBag(10, 4, mode="mean")
        self.sum = torch.nn.EmbeddingBag(10, 4, mode="sum", padding_idx=0)
        self.max = torch.nn.EmbeddingBag(10, 4, mode="max")
        self.weights = torch.nn.Parameter(torch.rand(3, 4))

    def forward(self, i):
        return self.mean(i), self.sum(i), self.max(i), self.sum(i, per_sample_weights=self.weights)


class Cells(torch.nn.Module):
    """nn.GRUCell and nn.LSTMCell over two steps from given states: TorchScript splits their
    gates with aten::unsafe_chunk. (Without a state, pnnx folds the hidden side's product
    with the zero state into wrong constants: its own model_pnnx.py is off too.)"""

    def __init__(self):
        super().__init__()
        self.gru = torch.nn.GRUCell(6, 4)
        self.lstm = torch.nn.LSTMCell(4, 3)

    def forward(self, x, h, c):
        h = self.gru(x, h)
        h = self.gru(x * 0.5, h)
        state = self.lstm(h, (c[:, :3], c[:, 3:]))
        return self.lstm(h * 2, state)


class ViewAsInAConvBlock(torch.nn.Module):
    """A convolution's output softmaxed over all its positions and viewed back as it was."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        return torch.relu(y.flatten(1).softmax(1).view_as(y) * 10)


def as_strided_under_views(a):
    """Longformer's overlapping chunks: ``as_strided`` of a transposed view reads the memory
    under the transpose; of the same made contiguous (pnnx drops ``.contiguous()``, so both
    read one operand) its row-major order; behind a reshape that copies, the copy's."""
    heads = a.view(12, 4, 8).transpose(0, 1)
    viewed = heads.reshape(4, 3, 4, 8)
    copied = heads.contiguous().view(4, 3, 4, 8)
    flat = heads.reshape(4, 96)  # not a view: a copy, read in its own order
    return tuple(torch.as_strided(t, (4, 5, 4, 8) if t.dim() == 4 else (4, 5, 32), _halved(t.stride())) + 0
                 for t in (viewed, copied, flat.view(4, 3, 32)))


def _halved(strides):
    return (strides[0], strides[1] // 2, *strides[2:])


def as_strided_computed(a):
    """Sizes, strides and an offset read from the input's shape: pnnx leaves a computed
    offset as aten::as_strided, and writes torch.as_strided with size and stride inputs
    where only those are computed (offset 0: a constant one other than 0 it drops)."""
    n, m = a.shape
    return (a.as_strided((n - 1, 2, 2), (m, 1, m - 2), m - 3), torch.as_strided(a, (n, m - 1), (m, 1)),
            torch.as_strided(a, (2, n), (1, m - 1)))


class CausalMaskInPlace(torch.nn.Module):
    """espnet's subsequent mask: ``torch.tril(m, out=m)`` of ones sized by the input, then a
    fill that broadcasts the (B, 1, T) input with the (T, T) mask."""

    def forward(self, x):
        n = x.size(1)
        m = torch.ones(n, n, dtype=torch.bool)
        torch.tril(m, out=m)
        return x.unsqueeze(1).masked_fill(~m, 0.0)


class SizesAsAList(torch.nn.Module):
    """``tensor.tolist()`` of a size-derived tensor (espnet's pad mask): the trace keeps an
    ``aten::resolve_conj`` and an ``aten::resolve_neg`` in front of it."""

    def forward(self, x):
        n = (x.shape[1] // 2 + 1) * torch.ones(1, dtype=torch.long)
        n.tolist()
        return x * n


@torch.jit.script
def _scripted_gate(a: torch.Tensor, n_channels: torch.Tensor) -> torch.Tensor:
    n = n_channels[0]
    return torch.tanh(a[:, :n]) * torch.sigmoid(a[:, n:])


class ScriptedGate(torch.nn.Module):
    """coqui's WaveNet gate, scripted: the channel count, a one-element tensor, becomes a
    slice bound through ``aten::IntImplicit``."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 6, 3, padding=1)

    def forward(self, x):
        return _scripted_gate(self.conv(x), torch.IntTensor([3]))


CASES = [
    Case("index_add_copy_fill",
         Fn(lambda a, i, s: (a.index_add(0, i, s, alpha=2), a.index_copy(0, i[:2], s[:2]),
                             a.index_fill(1, i, -1.5))),
         (x(6, 10), torch.tensor([0, 2, 2]), x(3, 10))),
    Case("scatter_reduce_modes",
         Fn(lambda a, i, s: (a.scatter_reduce(0, i, s, "amax", include_self=False),
                             a.scatter_reduce(0, i, s, "sum"), a.scatter_reduce(0, i, s, "mean"),
                             a.scatter_reduce(0, i, s, "amin", include_self=False),
                             a.scatter_reduce(0, i, s, "prod"))),
         (x(3, 5), torch.tensor([[0, 1, 2, 0, 1], [2, 2, 0, 0, 1]]), x(2, 5))),
    Case("take_along_dim", Fn(lambda a: (torch.take_along_dim(a, a.argsort(1)[:, :3], 1),
                                         torch.take_along_dim(a, torch.tensor([0, 7, 59])))),
         (x(6, 10),)),
    Case("searchsorted_bucketize",
         Fn(lambda a, b: (torch.searchsorted(b, a), torch.searchsorted(b, a, right=True, out_int32=True),
                          torch.bucketize(a, b), torch.bucketize(a, b, right=True))),
         (torch.tensor([[-2.0, -1.0, 0.3, 1.0], [2.0, 0.0, -0.5, 5.0]]), torch.tensor([-1.0, 0.0, 1.0]))),
    Case("searchsorted_rows", Fn(lambda s, v: torch.searchsorted(s, v)),
         (torch.tensor([[0.0, 1.0, 2.0], [-3.0, -2.0, 9.0]]), torch.tensor([[0.5, 2.5], [-2.0, 10.0]]))),
    Case("count_nonzero_nansum_nanmean",
         Fn(lambda a: (torch.count_nonzero(a > 0, dim=1), torch.count_nonzero(a),
                       torch.nansum(torch.log(a), 1), torch.nanmean(torch.log(a), (0, 1), keepdim=True))),
         (x(3, 4, 5),)),
    Case("nansum_of_an_observed_mask",  # chronos' scaling: the count of the values that are not NaN
         Fn(lambda a: (torch.nansum(~torch.isnan(a), dim=-1),
                       torch.nansum(a.abs(), -1) / torch.nansum(~a.isnan(), -1),
                       torch.nansum((a > 0).int(), (0, 1), keepdim=True))),
         (torch.where(x(2, 3, 8) > 1.0, float("nan"), x(2, 3, 8)),)),
    Case("tril_into_itself_as_a_causal_mask", CausalMaskInPlace(), (x(2, 5),), inputs2=(x(2, 7),),
         more_inputs=((x(3, 7),), (x(1, 4),))),
    Case("resolve_neg_of_sizes_made_a_list", SizesAsAList(), (x(2, 6),), inputs2=(x(2, 9),),
         more_inputs=((x(3, 9),), (x(1, 4),))),
    Case("int_implicit_of_a_scripted_count", ScriptedGate().eval(), (x(1, 4, 10),), inputs2=(x(1, 4, 14),),
         more_inputs=((x(2, 4, 14),), (x(1, 4, 3),))),
    Case("polygamma_mvlgamma",
         Fn(lambda a: (torch.polygamma(1, a.abs() + 1), torch.special.polygamma(3, a * 3),
                       torch.mvlgamma(a.abs() + 3, p=2), torch.polygamma(0, a))),
         (x(2, 6),)),
    Case("logcumsumexp_trapezoid", Fn(lambda a: (torch.logcumsumexp(a * 30, 1), torch.trapezoid(a, dx=0.5, dim=0))),
         (x(4, 6),)),
    Case("cov_pdist", Fn(lambda a: (torch.cov(a), torch.cov(a, correction=0), F.pdist(a), F.pdist(a, p=1.0))),
         (x(5, 8),)),
    Case("matrix_norms", Fn(lambda a: (torch.linalg.matrix_norm(a), torch.linalg.matrix_norm(a, ord=1),
                                       torch.linalg.matrix_norm(a, ord=float("inf"), keepdim=True),
                                       torch.linalg.matrix_norm(a, ord=-1, dim=(0, 2)))),
         (square(4),)),
    Case("addcmul_addcdiv", Fn(lambda a, b, c: (torch.addcmul(a, b, c, value=0.5), torch.addcdiv(a, b, c.abs() + 1))),
         (x(3, 4), x(4), x(3, 1))),
    Case("movedim_rot90_channel_shuffle",
         Fn(lambda a: (torch.movedim(a, 1, 3), torch.movedim(a, (0, 1), (2, 0)), torch.rot90(a, 1, (2, 3)),
                       torch.rot90(a, -3, (3, 1)), F.channel_shuffle(a, 2))),
         (x(1, 4, 3, 5),)),
    Case("isclose",  # broadcast; inf is close to inf, NaN only with equal_nan; integers compared as floats
         Fn(lambda a, b, i, j: (torch.isclose(a, b, atol=0.5), torch.isclose(a / 0, b / 0, equal_nan=True),
                                torch.isclose(a / 0, b / 0), torch.isclose(i, j, rtol=0.1, atol=1))),
         (x(3, 4), torch.tensor([0.0, 1.0, -0.5, 2.0]), torch.tensor([[1, 5, 10, -3], [0, 100, 7, 8]]),
          torch.tensor([2, 5, 13, -3]))),
    Case("frac_hypot", Fn(lambda a, b: (torch.frac(a * 3), torch.hypot(a, b))), (x(3, 4), x(4))),
    Case("diagonal", Fn(lambda a: (torch.diagonal(a), torch.diagonal(a, 1, 1, 2), torch.diagonal(a, -2, -1, 0))),
         (x(4, 5, 6),)),
    Case("tensor_unfold", Fn(lambda a: (a.unfold(2, 3, 2), a.unfold(-1, 2, 1), a.unfold(0, 2, 1))), (x(3, 2, 9),)),
    Case("std_var_of_everything", Fn(lambda a: (a.std().reshape(1), a.var(unbiased=False).reshape(1))), (x(4, 6),)),
    Case("aminmax", Fn(lambda a: (*torch.aminmax(a, dim=1), *torch.aminmax(a, dim=-1, keepdim=True),
                                  torch.stack(torch.aminmax(a)))), (x(3, 4, 5),)),
    Case("take_narrow_copy_trace",
         Fn(lambda a: (torch.take(a, torch.tensor([[0, 5], [17, -1]])), torch.narrow_copy(a, 1, -4, 3),
                       torch.trace(a[:, :4]).reshape(1))),
         (x(4, 6),)),
    Case("linalg_cross", Fn(lambda a, b: (torch.linalg.cross(a, b), torch.linalg.cross(a.transpose(1, 2), b[:1].transpose(1, 2), dim=1))),
         (x(4, 5, 3), x(4, 5, 3))),
    Case("meshgrid_of_inputs", Fn(lambda a, b, c: (torch.stack(torch.meshgrid(a, b, indexing="xy"), 0),
                                                   sum(torch.meshgrid(a, b, c, indexing="ij")))),
         (x(5), x(7), x(3))),
    Case("meshgrid_broadcast_tensors", Fn(lambda a, b: torch.stack(torch.broadcast_tensors(a, b), 0)),
         (x(4, 1), x(3))),
    # e3nn's Wigner-D rotations: exponentials of generators; a large norm needs squarings
    Case("matrix_exp", Fn(lambda a: (torch.linalg.matrix_exp(a), torch.matrix_exp(a * 9.0))), (x(2, 3, 3),)),
    # normalizing flows' LU permutations (normflows' LULinearPermute): each side and triangle,
    # only the triangle read (the rest of the matrix is noise), batch dims broadcast
    Case("solve_triangular",
         Fn(lambda a, b: (torch.linalg.solve_triangular(a, b, upper=False),
                          torch.linalg.solve_triangular(a, b, upper=True, unitriangular=True),
                          torch.linalg.solve_triangular(a, b.transpose(-1, -2), upper=True, left=False),
                          torch.linalg.solve_triangular(a[0], b.transpose(-1, -2), upper=False, left=False,
                                                        unitriangular=True))),
         (square(4), x(3, 2, 4, 5))),
    # the older call (a Gaussian process's predictive variance): solution and a copy of A
    Case("triangular_solve",
         Fn(lambda a, b: (*torch.triangular_solve(b, a, upper=False),
                          torch.triangular_solve(b, a, upper=True, transpose=True,
                                                 unitriangular=True).solution)),
         (square(4), x(3, 2, 4, 5))),
    # a size computed from a dynamic batch (zuko's flows): known from the shapes once planned
    Case("broadcast_to_a_computed_size", Fn(lambda a, b: b.broadcast_to((a.shape[0], 4)) + a),
         (x(2, 4), x(2, 1)), inputs2=(x(3, 4), x(3, 1))),
    # e3nn's angles_to_matrix broadcasts 0-d angles: they stay 0-d
    Case("broadcast_tensors_of_scalars", Fn(lambda v: torch.stack(torch.broadcast_tensors(v[0], v[1]), -1)),
         (x(3),)),
    Case("flips_diag_embed",
         Fn(lambda a: (torch.fliplr(a), torch.flipud(a), torch.diag_embed(a[0]), torch.diag_embed(a, -1, 0, 2),
                       torch.diag_embed(a[:, 0], offset=2, dim1=-1, dim2=0))),
         (x(2, 3, 4),)),
    Case("block_diag_cartesian_prod_vander",
         Fn(lambda a, b, i: (torch.block_diag(a, b, i), torch.cartesian_prod(a[0], b[:, 0], a[1, :2]),
                             torch.linalg.vander(a[0]), torch.linalg.vander(i[0], N=4))),
         (x(2, 3), x(3, 1), torch.tensor([[2, -1]]))),
    Case("linalg_norm_renorm",
         Fn(lambda a, v: (torch.linalg.norm(a), torch.linalg.norm(a, dim=1), torch.linalg.norm(a, 3, -1, True),
                          torch.linalg.norm(a[0], "fro"), torch.linalg.norm(a, float("inf"), (0, 2)),
                          torch.linalg.norm(v, -1), torch.linalg.norm(a[1], 1), torch.renorm(a, 2, 1, 1.5),
                          torch.renorm(a, 1, -1, 2.0))),
         (x(2, 3, 4), x(5))),
    Case("quantile_histc",
         Fn(lambda a, q: (torch.quantile(a, 0.3, dim=1), torch.quantile(a, q, dim=0, keepdim=True),
                          torch.quantile(a, 0.4, interpolation="nearest"),
                          torch.quantile(a, q, dim=-1, interpolation="lower"),
                          torch.quantile(a, 0.75, dim=1, interpolation="higher"),
                          torch.quantile(a, 0.5, dim=1, keepdim=True, interpolation="midpoint"),
                          torch.nanquantile(torch.where(a > 1.0, float("nan"), a), q, dim=1),
                          torch.histc(a, bins=6, min=-1.5, max=1.5), torch.histc(a, bins=4))),
         (x(4, 7), torch.tensor([0.0, 0.25, 0.5, 1.0]))),
    Case("nanmedian_mode",
         Fn(lambda a, i: (*torch.nanmedian(torch.where(a > 0.8, float("nan"), a), 1), torch.median(a.masked_fill(a > 1.5, float("nan"))),
                          *torch.median(torch.where(a > 1.2, float("nan"), a), 0, keepdim=True),
                          *torch.mode(i, 1), *torch.mode(i.float(), 0, keepdim=True))),
         (x(4, 7), torch.tensor([[1, 2, 1, 2, 3, 0, 0], [3, 3, 0, 0, 1, 1, 1], [5, 5, 5, 5, 5, 5, 5]]))),
    Case("addr_addbmm_multi_dot",
         Fn(lambda a, b, c, u: (torch.addr(a, u, b[0, 0], beta=0.5, alpha=2.0), torch.addbmm(a, c, b),
                                torch.addbmm(a, c, b, beta=0, alpha=-1), torch.linalg.multi_dot([u, a, b[1].T]),
                                torch.linalg.multi_dot([a.T, c[0], b[0]]))),
         (x(3, 4), x(2, 5, 4), x(2, 3, 5), x(3))),
    Case("stacks_whole_prod",
         Fn(lambda a, v, i: (torch.hstack([v, v * 2]), torch.hstack([a, a[:, :1]]), torch.vstack([v, a]),
                             torch.dstack([a, a * 3]), torch.dstack([v, v]), torch.column_stack([v, a.T, v.int()]),
                             a.prod(), i.prod(), (i > 0).prod())),
         (x(2, 3), x(3), torch.tensor([[2, -1], [3, 4]]))),
    Case("grouped_mm_of_experts",  # a mixture of experts' products, as Hugging Face's MoE layers run them
         Fn(lambda a, b, counts: torch._grouped_mm(a, b, offs=torch.cumsum(counts, 0).to(torch.int32))),
         (x(10, 8), x(3, 8, 4), torch.tensor([4, 0, 6]))),
    Case("embedding_bag_modes",  # 2-d indices: each row a bag (pnnx cannot export offsets given as input)
         Bags().eval(), (torch.tensor([[1, 2, 4, 5], [4, 3, 2, 9], [0, 0, 0, 7]]),)),
    Case("repeat_interleave_output_size_broadcast_to",  # as diffusers repeats attention masks per head
         Fn(lambda a, b: (a.repeat_interleave(3, dim=0, output_size=a.shape[0] * 3), b.repeat_interleave(2, output_size=8),
                          a.broadcast_to(2, 4, 5) + 1, b.broadcast_to((3, -1, -1)) * 2)),
         (x(2, 1, 5), x(2, 2))),
    Case("gru_and_lstm_cells", Cells().eval(), (x(2, 6), x(2, 4), x(2, 6))),
    Case("nearest_exact_to_a_size_of_another",  # the size read from a tensor's shape stays an aten:: call
         Fn(lambda a, b: torch.nn.functional.interpolate(b, size=(a.shape[2], a.shape[3]), mode="nearest-exact")),
         (x(1, 2, 13, 17), x(1, 2, 7, 9))),
    Case("view_as", Fn(lambda a, b: ((a * 2).view_as(b), b.view_as(a.reshape(2, 2, 3)), a.view_as(a))),
         (x(2, 6), x(3, 4))),
    Case("view_as_in_a_conv_block", ViewAsInAConvBlock().eval(), (x(1, 3, 6, 5),)),
    Case("addmv_inner_vdot",  # beta 0: the input is not read (its NaN stay out)
         Fn(lambda a, m, v, b: (torch.addmv(a, m, v), torch.addmv(a[:1], m, v, beta=0.5, alpha=2),
                                torch.addmv(a.log(), m, v, beta=0, alpha=-1), torch.inner(m, b), torch.inner(v, v),
                                torch.inner(a.sum(), b), torch.vdot(v, v * 2))),
         (x(3), x(3, 4), x(4), x(2, 5, 4))),
    Case("dist_orders",
         Fn(lambda a, b: (torch.dist(a, b), torch.dist(a, b, 1), torch.dist(a, b, float("inf")),
                          torch.dist(a, b, float("-inf")), torch.dist(a, b.round(), 0), torch.dist(a, b, 3.5),
                          torch.dist(a[0], a[1], -1.5))),
         (x(3, 4), x(4))),
    Case("deg2rad_rad2deg", Fn(lambda a, i: (torch.deg2rad(a * 90), torch.rad2deg(a), torch.deg2rad(i),
                                             torch.rad2deg(i))),
         (x(3, 4), torch.tensor([[0, 45, 90], [180, -270, 360]]))),
    Case("atleast_1d_2d_3d",
         Fn(lambda a, v: (torch.atleast_1d(a.sum()), torch.atleast_1d(v), torch.atleast_2d(a.sum()),
                          torch.atleast_2d(v) + 1, torch.atleast_2d(a), torch.atleast_3d(a.sum()),
                          torch.atleast_3d(v) * 2, torch.atleast_3d(a) - 1, torch.atleast_3d(a[None]),
                          torch.atleast_3d(v, a)[0] + torch.atleast_3d(v, a)[1][:1, :3])),
         (x(3, 4), x(3))),
    Case("isin_inverted",
         Fn(lambda i, t, f: (torch.isin(i, t), torch.isin(i, t, invert=True), torch.isin(i, 3),
                             torch.isin(f, f[:, 1]), torch.isin(f.log(), f.log()[0], invert=True),
                             torch.isin(i, t.float() + 0.5), torch.isin(2, i))),
         (torch.tensor([[1, 2, 3], [4, 5, 6]]), torch.tensor([2, 5, 9]), x(3, 4))),
    Case("masked_scatter",
         Fn(lambda a, m, s: (a.masked_scatter(a > 0, s), a.masked_scatter(m > 0, s),
                             m.masked_scatter(a < 0, s))),
         (x(3, 4), x(4), x(3, 5))),
    # arguments read as constants, computed from sizes in a dynamic export
    Case("arguments_computed_from_sizes",
         Fn(lambda a: (torch.kthvalue(a, a.size(-1) // 2 + 1, dim=-1)[0], F.one_hot(a.argmax(-1), a.size(-1)),
                       torch.histc(a, bins=a.size(-1)), torch.diagonal(a, a.size(-1) // 4, dim1=-2, dim2=-1),
                       a.unfold(-1, a.size(-1) // 2, a.size(-1) // 4), F.group_norm(a, a.size(1) // 2),
                       torch.addcmul(a, a, a, value=a.size(1) / 2), torch.renorm(a, 2, 0, a.size(-1) / 10),
                       F.normalize(a, p=a.size(-1) / 4, dim=-1), torch.linalg.vector_norm(a, a.size(-1) / 3),
                       torch.linalg.vector_norm(a, a.size(-1) / 2, (0, -1), keepdim=True))),
         (x(2, 4, 6),), (x(3, 6, 9),), more_inputs=((x(2, 2, 11),),)),
    Case("as_strided_views",  # overlapping windows, a stride of 0, an offset of 0
         Fn(lambda a: (torch.as_strided(a, (3, 3), (1, 2)), a.as_strided((2, 3, 4), (4, 1, 1)),
                       torch.as_strided(a, (2, 3), (0, 5), 0) * 2, a.as_strided((0, 2), (3, 1)))),
         (x(3, 4),)),
    Case("as_strided_computed", Fn(as_strided_computed), (x(3, 4),), inputs2=(x(5, 6),)),
    Case("as_strided_under_views", Fn(as_strided_under_views), (x(12, 32),), check_trace=False),
]
