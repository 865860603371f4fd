"""fumi's own fp64 convolution (interposer/torch/wide_conv.cpp), the reference of highprec's
and attribution's wider reruns of aten::convolution and aten::conv2d, held against aten's fp64
convolution on the same arguments: every stride, padding, dilation, group count, bias, memory
format and batch split it accepts agrees within fp64 rounding of the terms, and it declines
what it does not compute (the adapter then runs aten's kernel). Likewise its fp64 max pooling
(wide_ops.cpp), which must equal aten's bit for bit, and its fp64 batch norm, which must agree
to fp64 rounding and update the running statistics as aten does."""
import itertools
import os
import unittest

import torch
import torch.nn.functional as F

torch.ops.load_library(os.environ["FUMI_WIDE_CONV_OPS"])
ops = torch.ops.fumi_test
K_BYTES = 32 << 20


def sum_bound(terms, size):
    """fp64 rounding of a sum of `terms` products whose magnitudes sum to `size`:
    (terms) · 2^-53 · size, with room for order."""
    return 4 * (terms + 1) * 2.0 ** -53 * size + 1e-300


def bound(x, w, stride, padding, dilation, groups):
    """sum_bound of a 2-d convolution's outputs: Σ|x||w| over its taps."""
    taps = w.shape[1] * w.shape[2] * w.shape[3]
    return sum_bound(taps, F.conv2d(x.abs(), w.abs(), None, stride, padding, dilation, groups))


def non_finite_alike(test, got, want):
    """NaN and inf where aten's are, the finite values equal."""
    test.assertTrue(torch.equal(torch.isnan(got), torch.isnan(want)))
    test.assertTrue(torch.equal(torch.isinf(got), torch.isinf(want)))
    finite = torch.isfinite(want)
    test.assertTrue(torch.equal(got[finite], want[finite]))


class WideConv(unittest.TestCase):
    def check(self, x, w, b, stride, padding, dilation, groups, column_bytes=K_BYTES):
        want = F.conv2d(x, w, b, stride, padding, dilation, groups)
        got = ops.wide_conv_forward(x, w, b, stride, padding, dilation, groups, column_bytes)
        self.assertEqual(got.shape, want.shape)
        # Channels-first from a contiguous x (the program's output buffer takes it in one
        # contiguous copy), else channels-last.
        self.assertTrue(got.is_contiguous() if x.is_contiguous()
                        else got.is_contiguous(memory_format=torch.channels_last))
        tol = bound(x, w, stride, padding, dilation, groups)
        if b is not None:
            tol = tol + 4 * 2.0 ** -53 * b.abs().view(1, -1, 1, 1)
        worst = ((got - want).abs() / tol).max().item()
        self.assertLessEqual(worst, 1.0, f"{tuple(x.shape)} {tuple(w.shape)} stride {stride} "
                             f"padding {padding} dilation {dilation} groups {groups}")
        return got, want

    def test_agrees_with_aten_across_arguments(self):
        g = torch.Generator().manual_seed(7)
        cases = 0
        for (n, c, k, hw, rs), stride, padding, dilation, groups, bias in itertools.product(
                [(1, 3, 4, (9, 11), (3, 3)), (5, 4, 6, (8, 7), (1, 3)), (2, 6, 6, (6, 6), (1, 1)),
                 (3, 2, 8, (13, 10), (7, 7))],
                [(1, 1), (2, 2), (1, 3)], [(0, 0), (1, 1), (3, 2)], [(1, 1), (2, 1)],
                [1, 2], [False, True]):
            if c % groups or k % groups:
                continue
            h_eff = (rs[0] - 1) * dilation[0] + 1
            w_eff = (rs[1] - 1) * dilation[1] + 1
            if hw[0] + 2 * padding[0] < h_eff or hw[1] + 2 * padding[1] < w_eff:
                continue
            x = torch.randn(n, c, *hw, dtype=torch.float64, generator=g)
            w = torch.randn(k, c // groups, *rs, dtype=torch.float64, generator=g)
            b = torch.randn(k, dtype=torch.float64, generator=g) if bias else None
            self.check(x, w, b, stride, padding, dilation, groups)
            cases += 1
        self.assertGreater(cases, 200)

    def test_many_filters_over_few_outputs(self):
        # Fewer im2col rows per GEMM than twice the filters: the rows are built in the filter's
        # own order from channels-first x (no transposed filter); x channels-last, or the
        # batch split down to one image per GEMM, takes the other order. All agree with aten.
        g = torch.Generator().manual_seed(13)
        for (n, c, k, hw, rs), stride, padding, dilation, bias in itertools.product(
                [(2, 16, 40, (3, 3), (3, 3)), (3, 5, 24, (4, 5), (2, 3)), (1, 7, 9, (5, 5), (3, 1))],
                [(1, 1), (2, 2)], [(0, 0), (1, 1)], [(1, 1), (2, 1)], [False, True]):
            h_eff = (rs[0] - 1) * dilation[0] + 1
            w_eff = (rs[1] - 1) * dilation[1] + 1
            if hw[0] + 2 * padding[0] < h_eff or hw[1] + 2 * padding[1] < w_eff:
                continue
            x = torch.randn(n, c, *hw, dtype=torch.float64, generator=g)
            w = torch.randn(k, c, *rs, dtype=torch.float64, generator=g)
            b = torch.randn(k, dtype=torch.float64, generator=g) if bias else None
            self.check(x, w, b, stride, padding, dilation, 1)
            self.check(x, w, b, stride, padding, dilation, 1, 1)
            self.check(x.contiguous(memory_format=torch.channels_last), w, b, stride, padding,
                       dilation, 1)

    def test_depthwise_and_many_groups(self):
        g = torch.Generator().manual_seed(3)
        x = torch.randn(4, 12, 10, 10, dtype=torch.float64, generator=g)
        for groups in (3, 4, 12):
            w = torch.randn(24, 12 // groups, 3, 3, dtype=torch.float64, generator=g)
            self.check(x, w, None, (1, 1), (1, 1), (1, 1), groups)

    def test_batch_split_over_several_gemms(self):
        # One image per GEMM, two (with a remainder of one), and all five in one.
        g = torch.Generator().manual_seed(5)
        x = torch.randn(5, 4, 9, 9, dtype=torch.float64, generator=g)
        w = torch.randn(6, 2, 3, 3, dtype=torch.float64, generator=g)
        b = torch.randn(6, dtype=torch.float64, generator=g)
        per_image = 9 * 9 * (4 * 9) * 8  # rows per image · row length · 8 bytes
        results = [self.check(x, w, b, (1, 1), (1, 1), (1, 1), 2, cb)[0]
                   for cb in (1, 2 * per_image + 8, K_BYTES)]
        for r in results[1:]:
            self.assertTrue(torch.equal(r, results[0]))

    def test_memory_formats_and_views(self):
        g = torch.Generator().manual_seed(11)
        base = torch.randn(3, 8, 12, 14, dtype=torch.float64, generator=g)
        w = torch.randn(5, 8, 3, 3, dtype=torch.float64, generator=g)
        for x in (base.contiguous(memory_format=torch.channels_last), base[:, :, ::2, 1:],
                  base.transpose(2, 3), base[1:2]):
            self.check(x, w, None, (1, 1), (1, 1), (1, 1), 1)
        self.check(base, w.transpose(2, 3).contiguous().transpose(2, 3), None, (2, 1), (0, 1),
                   (1, 1), 1)

    def test_non_finite_values_land_where_atens_do(self):
        x = torch.ones(2, 3, 6, 6, dtype=torch.float64)
        x[0, 1, 2, 3] = float("nan")
        x[1, 0, 0, 0] = float("inf")
        w = torch.ones(4, 3, 3, 3, dtype=torch.float64)
        w[2, 0, 1, 1] = 0.0  # inf · 0: NaN in both
        want = F.conv2d(x, w, None, 1, 1)
        got = ops.wide_conv_forward(x, w, None, [1, 1], [1, 1], [1, 1], 1, K_BYTES)
        non_finite_alike(self, got, want)
        self.assertTrue(torch.isnan(got).any() and torch.isinf(got).any())

    def test_run_replaces_the_ops_it_computes(self):
        g = torch.Generator().manual_seed(13)
        x = torch.randn(2, 8, 7, 7, dtype=torch.float64, generator=g)
        w = torch.randn(6, 8, 3, 3, dtype=torch.float64, generator=g)
        b = torch.randn(6, dtype=torch.float64, generator=g)
        want = F.conv2d(x, w, b, 2, 1, 1)
        for name in ("convolution", "_convolution", "conv2d"):  # _convolution: a traced graph's
            got = ops.wide_conv_run(name, x, w, b, [2, 2], [1, 1], [1, 1], False, 1)
            self.assertIsNotNone(got, name)
            self.assertLess((got - want).abs().max().item(), 1e-12)
        # aten expands a one-element list to both dimensions; so does run().
        got = ops.wide_conv_run("convolution", x, w, None, [2], [1], [1], False, 1)
        self.assertLess((got - F.conv2d(x, w, None, 2, 1, 1)).abs().max().item(), 1e-12)

    def test_run_takes_one_dimensional_convolutions(self):
        g = torch.Generator().manual_seed(17)
        x = torch.randn(3, 8, 29, dtype=torch.float64, generator=g)
        w = torch.randn(6, 8, 5, dtype=torch.float64, generator=g)
        b = torch.randn(6, dtype=torch.float64, generator=g)
        want = F.conv1d(x, w, b, 2, 3, 2)
        for name in ("convolution", "conv1d"):
            got = ops.wide_conv_run(name, x, w, b, [2], [3], [2], False, 1)
            self.assertIsNotNone(got, name)
            self.assertEqual(got.shape, want.shape)
            self.assertLess((got - want).abs().max().item(), 1e-12)
        dy = torch.randn(want.shape, dtype=torch.float64, generator=g)
        grads = torch.ops.aten.convolution_backward(dy, x, w, [6], [2], [3], [2], False, [0], 1,
                                                    [True, True, True])
        took, *got = ops.wide_conv_run_backward(dy, x, w, [2], [3], [2], False, 1, [True] * 3)
        self.assertTrue(took)
        for a, b_ in zip(got, grads):
            self.assertEqual(a.shape, b_.shape)
            self.assertLess((a - b_).abs().max().item(), 1e-12)

    def test_declines_what_it_does_not_compute(self):
        x = torch.randn(2, 4, 7, 7, dtype=torch.float64)
        w = torch.randn(6, 4, 3, 3, dtype=torch.float64)
        run = ops.wide_conv_run
        self.assertIsNone(run("conv2d", x.float(), w.float(), None, [1, 1], [0, 0], [1, 1],
                              False, 1))  # fp32: the call's own kernel
        self.assertIsNone(run("conv2d", x, w.float(), None, [1, 1], [0, 0], [1, 1], False, 1))
        self.assertIsNone(run("conv2d", x[:0], w, None, [1, 1], [0, 0], [1, 1], False, 1))
        self.assertIsNone(run("conv2d", x[:, :, :2], w, None, [1, 1], [0, 0], [1, 1], False, 1))
        self.assertIsNone(run("conv2d", x, w, None, [1, 1, 1], [0, 0, 0], [1, 1, 1], False, 1))
        self.assertIsNone(run("conv2d", x, w, None, [1, 1], [0, 0], [1, 1], False, 3))
        self.assertIsNone(run("convolution", x[0], w, None, [1], [0], [1], False, 1))  # 3-d x
        self.assertIsNone(run("conv1d", x[:, :, 0], w[:, :, 0], None, [1, 1], [0, 0], [1, 1],
                              False, 1))  # 1-d with 2-d lists
        # Grouped and depthwise convolutions: aten's loop over groups is faster.
        self.assertIsNone(run("conv2d", x, w[:, :2], None, [1, 1], [0, 0], [1, 1], False, 2))
        self.assertIsNone(run("conv2d", x, w[:4, :1], None, [1, 1], [0, 0], [1, 1], False, 4))
        # A stem: 3 channels, 16×16 outputs (aten's per-image GEMMs); 8 channels it takes.
        stem = torch.randn(2, 3, 18, 18, dtype=torch.float64)
        self.assertIsNone(run("conv2d", stem, w[:, :3], None, [1, 1], [0, 0], [1, 1], False, 1))
        wide = torch.randn(2, 8, 18, 18, dtype=torch.float64)
        w8 = torch.randn(6, 8, 3, 3, dtype=torch.float64)
        self.assertIsNotNone(run("conv2d", wide, w8, None, [1, 1], [0, 0], [1, 1], False, 1))
        # A stem whose im2col buffer, which aten takes for the whole batch, passes 32 MiB
        # (torchaudio's Resample: 57 MB, faulted in afresh each call): taken, and right.
        waves = torch.randn(32, 1, 16028, dtype=torch.float64)
        sinc = torch.randn(1, 1, 28, dtype=torch.float64)
        got = run("conv1d", waves, sinc, None, [2], [0], [1], False, 1)
        self.assertIsNotNone(got)
        want = F.conv1d(waves, sinc, None, 2)
        tol = sum_bound(28, F.conv1d(waves.abs(), sinc.abs(), None, 2))
        self.assertTrue(bool(((got - want).abs() <= tol).all()))
        self.assertIsNone(run("conv1d", waves[:4], sinc, None, [2], [0], [1], False, 1))  # 7 MB


class WideConvBackward(unittest.TestCase):
    """backward() against aten::convolution_backward in fp64: dx, dw and db within fp64
    rounding of their terms (the same backward on |dy|, |x|, |w| sizes them)."""

    def check(self, n, c, k, hw, rs, stride, padding, dilation, groups, mask=(True,) * 3,
              column_bytes=K_BYTES, seed=0, x_format=torch.contiguous_format):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(n, c, *hw, dtype=torch.float64, generator=g).contiguous(
            memory_format=x_format)
        w = torch.randn(k, c // groups, *rs, dtype=torch.float64, generator=g)
        y = F.conv2d(x, w, None, stride, padding, dilation, groups)
        dy = torch.randn(y.shape, dtype=torch.float64, generator=g)
        args = (stride, padding, dilation, False, [0, 0], groups, list(mask))
        want = torch.ops.aten.convolution_backward(dy, x, w, [k], *args)
        size = torch.ops.aten.convolution_backward(dy.abs(), x.abs(), w.abs(), [k], *args)
        got = ops.wide_conv_backward(dy, x, w, stride, padding, dilation, groups, list(mask),
                                     column_bytes)
        terms = [k // groups * y.shape[2] * y.shape[3] * 9, n * y.shape[2] * y.shape[3],
                 n * y.shape[2] * y.shape[3]]
        for i, name in enumerate(("dx", "dw", "db")):
            if not mask[i]:
                self.assertIsNone(got[i], name)
                continue
            self.assertEqual(got[i].shape, want[i].shape, name)
            tol = sum_bound(terms[i], size[i])
            worst = ((got[i] - want[i]).abs() / tol).max().item()
            self.assertLessEqual(worst, 1.0, f"{name}: {n, c, k, hw, rs} stride {stride} "
                                 f"padding {padding} dilation {dilation} groups {groups}")
        return got

    def test_agrees_with_aten_across_arguments(self):
        cases = 0
        for (n, c, k, hw, rs), stride, padding, dilation, groups in itertools.product(
                [(1, 3, 4, (9, 11), (3, 3)), (5, 4, 6, (8, 7), (1, 3)), (2, 6, 6, (6, 6), (1, 1)),
                 (3, 2, 8, (13, 10), (7, 7))],
                [(1, 1), (2, 2), (1, 3)], [(0, 0), (1, 1), (3, 2)], [(1, 1), (2, 1)], [1, 2]):
            if c % groups or k % groups:
                continue
            if (hw[0] + 2 * padding[0] < (rs[0] - 1) * dilation[0] + 1 or
                    hw[1] + 2 * padding[1] < (rs[1] - 1) * dilation[1] + 1):
                continue
            self.check(n, c, k, hw, rs, stride, padding, dilation, groups, seed=cases)
            cases += 1
        self.assertGreater(cases, 100)

    def test_masks_groups_batch_split_and_formats(self):
        for mask in ((True, False, False), (False, True, False), (False, False, True),
                     (True, True, False)):
            self.check(3, 4, 6, (7, 7), (3, 3), (1, 1), (1, 1), (1, 1), 2, mask)
        self.check(4, 12, 24, (8, 8), (3, 3), (2, 2), (1, 1), (1, 1), 12)  # depthwise
        whole = self.check(5, 4, 6, (9, 9), (3, 3), (1, 1), (1, 1), (1, 1), 2, seed=9)
        for cb in (1, 2 * 81 * 36 * 8 + 8):  # one image per GEMM; two with a remainder
            split = self.check(5, 4, 6, (9, 9), (3, 3), (1, 1), (1, 1), (1, 1), 2,
                               column_bytes=cb, seed=9)
            self.assertTrue(torch.equal(split[0], whole[0]))  # dx: the same sums per image
            self.assertLess((split[1] - whole[1]).abs().max().item(), 1e-12)
        self.check(2, 8, 5, (12, 14), (3, 3), (1, 1), (1, 1), (1, 1), 1,
                   x_format=torch.channels_last)

    def test_images_larger_than_the_column_bytes_split_into_runs_of_rows(self):
        """An image whose im2col rows alone pass column_bytes (a 9x9 filter over 64 channels of
        96x96: 382 MB) goes in runs of rows, at least 256, across image boundaries: the same
        results as whole images, dx bit for bit (each element's terms in the same order)."""
        for groups, stride in ((1, (1, 1)), (2, (2, 1))):
            whole = self.check(3, 4, 6, (31, 21), (5, 3), stride, (2, 1), (1, 1), groups,
                               seed=21)
            for cb in (1, 300 * 4 * 15 * 8):  # 256 rows a run; 300 (of 651 or 336 an image)
                split = self.check(3, 4, 6, (31, 21), (5, 3), stride, (2, 1), (1, 1), groups,
                                   column_bytes=cb, seed=21)
                self.assertTrue(torch.equal(split[0], whole[0]))
                self.assertLess((split[1] - whole[1]).abs().max().item(), 1e-12)
                self.assertTrue(torch.equal(split[2], whole[2]))
        g = torch.Generator().manual_seed(22)
        x = torch.randn(2, 4, 20, 20, dtype=torch.float64, generator=g)
        w = torch.randn(5, 4, 3, 5, dtype=torch.float64, generator=g)
        b = torch.randn(5, dtype=torch.float64, generator=g)
        forward = WideConv()
        # the forward passes' products of fewer rows: the BLAS may take another kernel for them
        # (OpenBLAS's small-matrix one on AVX-512), whose sums round differently
        runs = [forward.check(x, w, b, (1, 1), (1, 2), (1, 1), 1, cb)[0] for cb in (K_BYTES, 1)]
        self.assertLess((runs[0] - runs[1]).abs().max().item(), 1e-12)
        y = ops.wide_conv_transposed(x, w.transpose(0, 1).contiguous(), None, [1, 1], [1, 2],
                                     [0, 0], [1, 1], 1, 1)
        self.assertLess((y - ops.wide_conv_transposed(
            x, w.transpose(0, 1).contiguous(), None, [1, 1], [1, 2], [0, 0], [1, 1], 1,
            K_BYTES)).abs().max().item(), 1e-12)

    def test_run_takes_convolution_backward(self):
        g = torch.Generator().manual_seed(21)
        x = torch.randn(2, 8, 7, 7, dtype=torch.float64, generator=g)
        w = torch.randn(6, 8, 3, 3, dtype=torch.float64, generator=g)
        dy = torch.randn(2, 6, 4, 4, dtype=torch.float64, generator=g)
        want = torch.ops.aten.convolution_backward(dy, x, w, [6], [2, 2], [1, 1], [1, 1], False,
                                                   [0, 0], 1, [True, True, True])
        took, *got = ops.wide_conv_run_backward(dy, x, w, [2, 2], [1, 1], [1, 1], False, 1,
                                                [True, True, True])
        self.assertTrue(took)
        for a, b in zip(got, want):
            self.assertLess((a - b).abs().max().item(), 1e-12)
        took, *got = ops.wide_conv_run_backward(dy, x, w, [2, 2], [1, 1], [1, 1], False, 1,
                                                [False, True, False])
        self.assertTrue(took)
        self.assertIsNone(got[0])
        self.assertIsNone(got[2])
        declined = [ops.wide_conv_run_backward(dy.float(), x.float(), w.float(), [2, 2], [1, 1],
                                               [1, 1], False, 1, [True] * 3),
                    ops.wide_conv_run_backward(dy[:, :, :3], x, w, [2, 2], [1, 1], [1, 1],
                                               False, 1, [True] * 3),  # dy of another shape
                    ops.wide_conv_run_backward(dy, x, w[:, :4], [2, 2], [1, 1], [1, 1], False, 2,
                                               [True] * 3)]  # grouped: aten's
        for took, *_ in declined:
            self.assertFalse(took)


class WideConvTransposed(unittest.TestCase):
    """transposed() against aten's fp64 conv_transpose2d, and run() on aten::convolution and
    aten::convolution_backward with transposed set, against aten's."""

    def test_agrees_with_aten_across_arguments(self):
        g = torch.Generator().manual_seed(31)
        cases = 0
        for (n, cin, cout, hw, rs), stride, padding, dilation, groups, bias in itertools.product(
                [(1, 4, 3, (5, 6), (3, 3)), (3, 6, 4, (4, 4), (1, 3)), (2, 8, 8, (3, 5), (4, 4))],
                [(1, 1), (2, 2), (3, 1)], [(0, 0), (1, 2)], [(1, 1), (2, 1)], [1, 2],
                [False, True]):
            for extra in {(0, 0), (stride[0] - 1, 0)}:
                if cout % groups or cin % groups:
                    continue
                x = torch.randn(n, cin, *hw, dtype=torch.float64, generator=g)
                w = torch.randn(cin, cout // groups, *rs, dtype=torch.float64, generator=g)
                b = torch.randn(cout, dtype=torch.float64, generator=g) if bias else None
                want = F.conv_transpose2d(x, w, b, stride, padding, extra, groups, dilation)
                try:
                    got = ops.wide_conv_transposed(x, w, b, stride, padding, list(extra),
                                                   dilation, groups, K_BYTES)
                except RuntimeError:
                    self.fail(f"declined: {n, cin, cout, hw, rs} {stride} {padding} {extra} "
                              f"{dilation} {groups}")
                self.assertEqual(got.shape, want.shape)
                size = F.conv_transpose2d(x.abs(), w.abs(), None if b is None else b.abs(),
                                          stride, padding, extra, groups, dilation)
                taps = rs[0] * rs[1] * cin
                tol = sum_bound(taps, size)
                self.assertLessEqual(((got - want).abs() / tol).max().item(), 1.0,
                                     f"{n, cin, cout, hw, rs} {stride} {padding} {extra} "
                                     f"{dilation} {groups}")
                cases += 1
        self.assertGreater(cases, 100)

    def test_batch_split_and_declines(self):
        g = torch.Generator().manual_seed(33)
        x = torch.randn(5, 4, 6, 6, dtype=torch.float64, generator=g)
        w = torch.randn(4, 3, 3, 3, dtype=torch.float64, generator=g)
        whole = ops.wide_conv_transposed(x, w, None, [2, 2], [1, 1], [1, 1], [1, 1], 1, K_BYTES)
        split = ops.wide_conv_transposed(x, w, None, [2, 2], [1, 1], [1, 1], [1, 1], 1, 1)
        self.assertTrue(torch.equal(whole, split))
        want = F.conv_transpose2d(x, w, None, 2, 1, 1)
        self.assertLess((whole - want).abs().max().item(), 1e-12)
        with self.assertRaises(RuntimeError):  # output padding must be below the stride
            ops.wide_conv_transposed(x, w, None, [2, 2], [1, 1], [2, 0], [1, 1], 1, K_BYTES)
        # aten allows it up to the dilation; those rows lie outside the plain convolution whose
        # gradient this is: left to aten.
        F.conv_transpose2d(x, w, None, 1, 0, (1, 0), 1, (2, 1))
        with self.assertRaises(RuntimeError):
            ops.wide_conv_transposed(x, w, None, [1, 1], [0, 0], [1, 0], [2, 1], 1, K_BYTES)

    def test_run_takes_transposed_convolutions_and_their_backward(self):
        g = torch.Generator().manual_seed(35)
        x = torch.randn(3, 6, 5, 4, dtype=torch.float64, generator=g)
        w = torch.randn(6, 8, 3, 3, dtype=torch.float64, generator=g)
        b = torch.randn(8, dtype=torch.float64, generator=g)
        want = F.conv_transpose2d(x, w, b, 2, 1, 0, 1, 1)
        got = ops.wide_conv_run("convolution", x, w, b, [2, 2], [1, 1], [1, 1], True, 1)
        self.assertIsNotNone(got)
        self.assertLess((got - want).abs().max().item(), 1e-12)
        dy = torch.randn(want.shape, dtype=torch.float64, generator=g)
        for mask in ([True, True, True], [False, True, False], [True, False, False],
                     [False, False, True]):
            ref = torch.ops.aten.convolution_backward(dy, x, w, [8], [2, 2], [1, 1], [1, 1],
                                                      True, [0, 0], 1, mask)
            took, *res = ops.wide_conv_run_backward(dy, x, w, [2, 2], [1, 1], [1, 1], True, 1,
                                                    mask)
            self.assertTrue(took, mask)
            for i in range(3):
                if not mask[i]:
                    self.assertIsNone(res[i])
                    continue
                self.assertEqual(res[i].shape, ref[i].shape)
                self.assertLess((res[i] - ref[i]).abs().max().item(), 1e-12, (mask, i))
        # 1-d
        x1, w1 = x[:, :, 0], w[:, :, 0]
        want1 = F.conv_transpose1d(x1, w1, b, 2, 1, 0, 1, 1)
        got1 = ops.wide_conv_run("convolution", x1, w1, b, [2], [1], [1], True, 1)
        self.assertEqual(got1.shape, want1.shape)
        self.assertLess((got1 - want1).abs().max().item(), 1e-12)


def tile_input_max(x, padding, th, tw):
    """max |x| over each F(2x2, 3x3) tile's 4x4 input block (zeros outside x): (N, C, th, tw)."""
    h, wd = x.shape[2], x.shape[3]
    padded = F.pad(x.abs(), (padding[1], max(0, 2 * tw + 2 - padding[1] - wd),
                             padding[0], max(0, 2 * th + 2 - padding[0] - h)))
    return F.max_pool2d(padded, 4, 2)[:, :, :th, :tw]


def winograd_bound(x, w, padding):
    """F(2x2, 3x3)'s rounding: a transformed input point sums 4 input values (|V| <= 4 max|d|
    of the tile's 4x4 block), a transformed filter point is at most 2.25 max|g|, an output sums
    9 products of points: terms of at most 81 max|d| max|g| per channel, summed over C channels
    in the GEMM and by the transforms (a few more roundings): (C + 10) 2^-53 81 sum_c max|d|
    max|g|, doubled for room. Not in terms of sum |x||w|: an output's terms include products
    of values that its direct sum never multiplies."""
    c, h, wd = x.shape[1], x.shape[2], x.shape[3]
    oh, ow = h + 2 * padding[0] - 2, wd + 2 * padding[1] - 2
    th, tw = (oh + 1) // 2, (ow + 1) // 2
    terms = torch.einsum("nchw,kc->nkhw", tile_input_max(x, padding, th, tw),
                         w.abs().amax((2, 3)))
    terms = terms.repeat_interleave(2, 2).repeat_interleave(2, 3)[:, :, :oh, :ow]
    return 2 * (c + 10) * 2.0 ** -53 * 81 * terms + 1e-300


def winograd_filter_bound(x, dy, padding):
    """The filter gradient's: a tile's transformed input points are at most 4 max|d| (its 4x4
    block), its transformed gradient points 4 max|dy| (its 2x2 block of dy), and a tap weighs
    16 of their products by at most 4 in all: terms of 64 max|d| max|dy| per tile, summed over
    the T tiles in the GEMMs: (T + 10) 2^-53 64 sum_t max|d| max|dy|, doubled for room."""
    n, oh, ow = x.shape[0], dy.shape[2], dy.shape[3]
    th, tw = (oh + 1) // 2, (ow + 1) // 2
    dy_max = F.max_pool2d(F.pad(dy.abs(), (0, 2 * tw - ow, 0, 2 * th - oh)), 2, 2)
    terms = torch.einsum("nkhw,nchw->kc", dy_max, tile_input_max(x, padding, th, tw))
    bound = 2 * (n * th * tw + 10) * 2.0 ** -53 * 64 * terms + 1e-300
    return bound.view(*terms.shape, 1, 1)


class WideWinograd(unittest.TestCase):
    """winograd.h's F(2x2, 3x3), which forward() and backward() run for 3x3, stride-1,
    one-group 2-d convolutions with 16 channels or more a side and 64 tiles of 2x2 outputs or
    more: within fp64 rounding of aten's terms plus F(2x2, 3x3)'s own (winograd_bound), whatever
    the padding, odd output sizes and blocks of tiles; a non-finite result sends the call to the
    direct path (NaN and inf where aten's land)."""

    def test_agrees_with_aten(self):
        g = torch.Generator().manual_seed(17)
        cases = 0
        for (n, c, k, hw), padding, tiles_per_block, scaled in itertools.product(
                [(2, 16, 16, (8, 8)), (3, 16, 24, (7, 9)), (1, 32, 16, (5, 4)),
                 (2, 17, 19, (10, 3))],
                [(0, 0), (1, 1), (2, 1)], [1, 3, None], [False, True]):
            x = torch.randn(n, c, *hw, dtype=torch.float64, generator=g)
            w = torch.randn(k, c, 3, 3, dtype=torch.float64, generator=g)
            if scaled:  # magnitudes over eight decades
                x = x * 10.0 ** (8 * torch.rand(x.shape, dtype=torch.float64, generator=g) - 4)
                w = w * 10.0 ** (8 * torch.rand(w.shape, dtype=torch.float64, generator=g) - 4)
            block = K_BYTES if tiles_per_block is None else tiles_per_block * 16 * (c + k) * 8
            got = ops.wide_winograd(x, w, list(padding), block)
            want = F.conv2d(x, w, None, 1, padding)
            what = f"{n, c, k, hw} padding {padding} block {tiles_per_block} scaled {scaled}"
            self.assertEqual(got.shape, want.shape, what)
            # aten's own fp64 rounding within bound(), F(2x2, 3x3)'s within winograd_bound()
            tol = bound(x, w, 1, padding, 1, 1) + winograd_bound(x, w, padding)
            self.assertLessEqual(((got - want).abs() / tol).max().item(), 1.0, what)
            self.assertLess(((got - want).norm() / want.norm()).item(), 1e-14, what)
            cases += 1
        self.assertEqual(cases, 72)

    def test_forward_and_run_take_it(self):
        g = torch.Generator().manual_seed(19)
        x = torch.randn(4, 32, 12, 11, dtype=torch.float64, generator=g)
        w = torch.randn(48, 32, 3, 3, dtype=torch.float64, generator=g)
        b = torch.randn(48, dtype=torch.float64, generator=g)
        want = ops.wide_winograd(x, w, [1, 1], K_BYTES) + b.view(1, -1, 1, 1)
        for xf in (x, x.contiguous(memory_format=torch.channels_last)):
            got = ops.wide_conv_forward(xf, w, b, [1, 1], [1, 1], [1, 1], 1, K_BYTES)
            self.assertTrue(torch.equal(got, want))
            self.assertTrue(torch.equal(
                ops.wide_conv_run("conv2d", xf, w, b, [1, 1], [1, 1], [1, 1], False, 1), want))

    def test_input_gradient_and_transposed_convolution(self):
        # dx of a 3x3 stride-1 convolution is F(2x2, 3x3) of dy by the filter turned by 180
        # degrees with its channel axes swapped, padded by 2 - padding; the transposed
        # convolution by w is the same computation.
        g = torch.Generator().manual_seed(23)
        cases = 0
        for (n, c, k, hw), padding in itertools.product(
                [(4, 16, 24, (12, 12)), (3, 24, 16, (11, 13))],
                [(0, 0), (1, 1), (2, 2), (2, 1)]):
            what = f"{n, c, k, hw} padding {padding}"
            x = torch.randn(n, c, *hw, dtype=torch.float64, generator=g)
            w = torch.randn(k, c, 3, 3, dtype=torch.float64, generator=g)
            dy = torch.randn(F.conv2d(x, w, None, 1, padding).shape, dtype=torch.float64,
                             generator=g)
            args = ([1, 1], list(padding), [1, 1], False, [0, 0], 1, [True, False, False])
            want = torch.ops.aten.convolution_backward(dy, x, w, None, *args)[0]
            size = torch.ops.aten.convolution_backward(dy.abs(), x.abs(), w.abs(), None, *args)[0]
            dx = ops.wide_conv_backward(dy, x, w, [1, 1], list(padding), [1, 1], 1,
                                        [True, False, False], K_BYTES)[0]
            turned = w.flip(2, 3).transpose(0, 1)
            adjoint = [2 - padding[0], 2 - padding[1]]
            self.assertTrue(torch.equal(dx, ops.wide_winograd(dy, turned, adjoint, K_BYTES)), what)
            tol = sum_bound(9 * k, size) + winograd_bound(dy, turned, adjoint)
            self.assertLessEqual(((dx - want).abs() / tol).max().item(), 1.0, what)
            transposed = ops.wide_conv_transposed(dy, w, None, [1, 1], list(padding), [0, 0],
                                                  [1, 1], 1, K_BYTES)
            self.assertTrue(torch.equal(transposed, dx), what)
            t_want = F.conv_transpose2d(dy, w, None, 1, padding)
            self.assertLessEqual(((transposed - t_want).abs() / tol).max().item(), 1.0, what)
            cases += 1
        self.assertEqual(cases, 8)

    def test_filter_gradient(self):
        # dw = the sum over the tiles of G^T ((A dy A^T) * (B^T d B)) G: against aten's filter
        # gradient; bit-equal through backward() and run() with any mask.
        g = torch.Generator().manual_seed(29)
        cases = 0
        for (n, c, k, hw), padding, tiles_per_block, scaled in itertools.product(
                [(2, 16, 24, (8, 8)), (3, 17, 19, (7, 9)), (1, 16, 16, (5, 4))],
                [(0, 0), (1, 1), (2, 1)], [1, None], [False, True]):
            what = f"{n, c, k, hw} padding {padding} block {tiles_per_block} scaled {scaled}"
            x = torch.randn(n, c, *hw, dtype=torch.float64, generator=g)
            w = torch.randn(k, c, 3, 3, dtype=torch.float64, generator=g)
            dy = torch.randn(F.conv2d(x, w, None, 1, padding).shape, dtype=torch.float64,
                             generator=g)
            if scaled:  # magnitudes over eight decades
                x = x * 10.0 ** (8 * torch.rand(x.shape, dtype=torch.float64, generator=g) - 4)
                dy = dy * 10.0 ** (8 * torch.rand(dy.shape, dtype=torch.float64, generator=g) - 4)
            block = K_BYTES if tiles_per_block is None else tiles_per_block * 16 * (c + k) * 8
            args = ([1, 1], list(padding), [1, 1], False, [0, 0], 1, [False, True, False])
            want = torch.ops.aten.convolution_backward(dy, x, w, None, *args)[1]
            size = torch.ops.aten.convolution_backward(dy.abs(), x.abs(), w.abs(), None, *args)[1]
            got = ops.wide_winograd_filter_grad(x, dy, list(padding), block)
            terms = n * dy.shape[2] * dy.shape[3]
            tol = sum_bound(terms, size) + winograd_filter_bound(x, dy, padding)
            self.assertLessEqual(((got - want).abs() / tol).max().item(), 1.0, what)
            self.assertLess(((got - want).norm() / want.norm()).item(), 1e-14, what)
            cases += 1
        self.assertEqual(cases, 36)
        x = torch.randn(4, 32, 12, 11, dtype=torch.float64, generator=g)
        w = torch.randn(48, 32, 3, 3, dtype=torch.float64, generator=g)
        dy = torch.randn(4, 48, 12, 11, dtype=torch.float64, generator=g)
        want = ops.wide_winograd_filter_grad(x, dy, [1, 1], K_BYTES)
        for mask in ([False, True, False], [True, True, True]):
            dw = ops.wide_conv_backward(dy, x, w, [1, 1], [1, 1], [1, 1], 1, mask, K_BYTES)[1]
            self.assertTrue(torch.equal(dw, want), mask)
            took, _, by_run, _ = ops.wide_conv_run_backward(dy, x, w, [1, 1], [1, 1], [1, 1],
                                                            False, 1, mask)
            self.assertTrue(took and torch.equal(by_run, want), mask)

    def test_non_finite_values_go_the_direct_way(self):
        x = torch.ones(4, 16, 12, 12, dtype=torch.float64)
        x[0, 1, 2, 3] = float("nan")
        x[1, 0, 0, 0] = float("inf")
        x[1, 5, 6, 7] = -float("inf")
        w = torch.ones(16, 16, 3, 3, dtype=torch.float64)
        w[2, 0, 1, 1] = 0.0  # inf · 0: NaN in aten's
        self.assertIsNone(ops.wide_winograd(x, w, [1, 1], K_BYTES))
        want = F.conv2d(x, w, None, 1, 1)
        got = ops.wide_conv_forward(x, w, None, [1, 1], [1, 1], [1, 1], 1, K_BYTES)
        non_finite_alike(self, got, want)
        self.assertTrue(torch.isnan(got).any() and torch.isinf(got).any())
        self.assertIsNotNone(ops.wide_winograd(torch.ones_like(x), w, [1, 1], K_BYTES))
        # The input gradient alike, from a dy holding them.
        args = ([1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, False, False])
        want = torch.ops.aten.convolution_backward(x, x, w, None, *args)[0]
        got = ops.wide_conv_backward(x, x, w, [1, 1], [1, 1], [1, 1], 1, [True, False, False],
                                     K_BYTES)[0]
        non_finite_alike(self, got, want)
        self.assertTrue(torch.isnan(got).any())
        # And the filter gradient, from an x holding them.
        self.assertIsNone(ops.wide_winograd_filter_grad(x, torch.ones_like(x), [1, 1], K_BYTES))
        args = ([1, 1], [1, 1], [1, 1], False, [0, 0], 1, [False, True, False])
        want = torch.ops.aten.convolution_backward(torch.ones_like(x), x, w, None, *args)[1]
        got = ops.wide_conv_backward(torch.ones_like(x), x, w, [1, 1], [1, 1], [1, 1], 1,
                                     [False, True, False], K_BYTES)[1]
        non_finite_alike(self, got, want)
        self.assertTrue(torch.isnan(got).any())


class WideConv3d(unittest.TestCase):
    """3-d convolutions (video, volumes): forward, backward and transposed against aten's."""

    def close(self, got, want, size, terms, what):
        self.assertEqual(got.shape, want.shape, what)
        tol = sum_bound(terms, size)
        self.assertLessEqual(((got - want).abs() / tol).max().item(), 1.0, what)

    def test_forward_backward_and_transposed_agree_with_aten(self):
        g = torch.Generator().manual_seed(41)
        cases = 0
        for (n, c, k, dhw, trs), stride, padding, dilation, groups in itertools.product(
                [(2, 4, 6, (5, 6, 7), (3, 3, 3)), (1, 8, 4, (4, 7, 5), (1, 3, 2))],
                [(1, 1, 1), (2, 1, 2)], [(0, 0, 0), (1, 2, 0)], [(1, 1, 1), (1, 2, 1)], [1, 2]):
            what = f"{n, c, k, dhw, trs} {stride} {padding} {dilation} {groups}"
            x = torch.randn(n, c, *dhw, dtype=torch.float64, generator=g)
            w = torch.randn(k, c // groups, *trs, dtype=torch.float64, generator=g)
            b = torch.randn(k, dtype=torch.float64, generator=g)
            y = F.conv3d(x, w, b, stride, padding, dilation, groups)
            taps = c // groups * trs[0] * trs[1] * trs[2]
            size = F.conv3d(x.abs(), w.abs(), b.abs(), stride, padding, dilation, groups)
            got = ops.wide_conv_forward(x, w, b, list(stride), list(padding), list(dilation),
                                        groups, K_BYTES)
            self.close(got, y, size, taps, what)
            by_run = ops.wide_conv_run("conv3d", x, w, b, list(stride), list(padding),
                                       list(dilation), False, groups)
            if groups == 1:
                self.assertTrue(torch.equal(by_run, got), what)
            else:
                self.assertIsNone(by_run, what)  # grouped: aten's
            dy = torch.randn(y.shape, dtype=torch.float64, generator=g)
            args = (list(stride), list(padding), list(dilation), False, [0, 0, 0], groups,
                    [True, True, True])
            want = torch.ops.aten.convolution_backward(dy, x, w, [k], *args)
            sizes = torch.ops.aten.convolution_backward(dy.abs(), x.abs(), w.abs(), [k], *args)
            res = ops.wide_conv_backward(dy, x, w, list(stride), list(padding), list(dilation),
                                         groups, [True] * 3, K_BYTES)
            took, *_ = ops.wide_conv_run_backward(dy, x, w, list(stride), list(padding),
                                                  list(dilation), False, groups, [True] * 3)
            self.assertEqual(took, groups == 1, what)
            terms = [k * taps, n * y[0, 0].numel(), n * y[0, 0].numel()]
            for i in range(3):
                self.close(res[i], want[i], sizes[i], terms[i], f"{what} grad {i}")
            # The transposed convolution by the same filter, from y's shape back to x's.
            t_want = F.conv_transpose3d(dy, w, None, stride, padding, 0, groups, dilation)
            t_got = ops.wide_conv_transposed(dy, w, None, list(stride), list(padding), [0, 0, 0],
                                             list(dilation), groups, K_BYTES)
            t_size = F.conv_transpose3d(dy.abs(), w.abs(), None, stride, padding, 0, groups,
                                        dilation)
            self.close(t_got, t_want, t_size, k * taps, f"{what} transposed")
            cases += 1
        self.assertEqual(cases, 32)


class WidePool(unittest.TestCase):
    """wide_ops::run against aten::max_pool2d in fp64: the same values bit for bit (max pooling
    is exact), NaN where a window holds one, every kernel, stride, padding, dilation and ceil
    mode aten accepts, batched and not; declined where aten rejects the arguments or the input
    is not a contiguous fp64 CPU tensor."""

    def test_equal_to_atens_across_arguments(self):
        g = torch.Generator().manual_seed(3)
        shapes = [(2, 3, 9, 11), (3, 8, 7), (1, 1, 1, 5), (2, 4, 16, 16)]
        cases = 0
        for shape, k, s, p, d, ceil in itertools.product(
                shapes, [(1, 1), (2, 2), (3, 3), (2, 3)], [(), (1, 1), (2, 2), (3, 1)],
                [(0, 0), (1, 1), (0, 1)], [(1, 1), (2, 1)], [False, True]):
            x = torch.randn(shape, dtype=torch.float64, generator=g)
            x[..., 0, 0] = -0.0  # a signed zero beside its neighbours
            args = (list(k), list(s), list(p), list(d), ceil)
            try:
                want = F.max_pool2d(x, *args)
            except RuntimeError:  # aten rejects these arguments: fumi leaves them to it
                self.assertIsNone(ops.wide_pool_run(x, *args), (shape, args))
                continue
            got = ops.wide_pool_run(x, *args)
            self.assertIsNotNone(got, (shape, args))
            self.assertEqual(got.shape, want.shape, (shape, args))
            self.assertTrue(torch.equal(got, want), (shape, args))
            self.assertTrue(torch.equal(got.signbit(), want.signbit()), (shape, args))
            cases += 1
        self.assertGreater(cases, 300)

    def test_non_finite_windows(self):
        x = torch.randn(2, 3, 8, 8, dtype=torch.float64)
        x[0, 0, 1, 1] = float("nan")
        x[0, 1, 3, 4] = float("inf")
        x[1, 2] = float("-inf")  # a whole plane of -inf
        x[1, 0, 5, 5] = float("nan")
        x[1, 0, 5, 6] = float("inf")  # NaN and Inf in one window: NaN
        for args in (([3, 3], [2, 2], [1, 1], [1, 1], False), ([2, 2], [], [0, 0], [1, 1], True)):
            want = F.max_pool2d(x, *args)
            got = ops.wide_pool_run(x, *args)
            self.assertTrue(torch.equal(got.isnan(), want.isnan()), args)
            self.assertTrue(torch.equal(got.nan_to_num(0.0), want.nan_to_num(0.0)), args)
            self.assertGreater(int(got.isnan().sum()), 0)

    def test_declines_what_it_does_not_compute(self):
        x = torch.randn(2, 3, 8, 8, dtype=torch.float64)
        args = ([3, 3], [2, 2], [1, 1], [1, 1], False)
        self.assertIsNone(ops.wide_pool_run(x.float(), *args))  # not fp64
        self.assertIsNone(ops.wide_pool_run(x.contiguous(memory_format=torch.channels_last),
                                            *args))
        self.assertIsNone(ops.wide_pool_run(x[:, :, ::2], *args))  # not contiguous
        self.assertIsNone(ops.wide_pool_run(x[0, 0], *args))  # 2-d
        self.assertIsNone(ops.wide_pool_run(x, [3, 3], [2, 2], [2, 2], [1, 1], False))  # pad > k/2
        self.assertIsNotNone(ops.wide_pool_run(x, *args))


class WideBatchNorm(unittest.TestCase):
    """wide_ops::run against aten::batch_norm and aten::native_batch_norm in fp64: results and
    updated running statistics within fp64 rounding, training and evaluation, with and without
    weight, bias and running statistics, 2-d to 5-d inputs; declined outside its reach."""

    def test_agrees_with_aten(self):
        g = torch.Generator().manual_seed(5)
        cases = 0
        for shape, training, affine, stats, name in itertools.product(
                [(8, 16, 5, 5), (4, 3), (2, 6, 7), (2, 4, 3, 3, 3), (1, 5, 1, 2)],
                [True, False], [True, False], [True, False], ["batch_norm", "native_batch_norm"]):
            if not training and not stats:
                continue
            c = shape[1]
            x = 3 + 2 * torch.randn(shape, dtype=torch.float64, generator=g)
            w = torch.rand(c, dtype=torch.float64, generator=g) + 0.5 if affine else None
            b = torch.randn(c, dtype=torch.float64, generator=g) if affine else None
            rm = torch.randn(c, dtype=torch.float64, generator=g) if stats else None
            rv = torch.rand(c, dtype=torch.float64, generator=g) + 0.5 if stats else None
            mine = [t.clone() if t is not None else None for t in (rm, rv)]
            theirs = [t.clone() if t is not None else None for t in (rm, rv)]
            took, *got = ops.wide_batch_norm_run(name, x, w, b, *mine, training, 0.3, 1e-4)
            where = (shape, training, affine, stats, name)
            self.assertTrue(took, where)
            if name == "batch_norm":
                want = [torch.ops.aten.batch_norm(x, w, b, *theirs, training, 0.3, 1e-4, False)]
                self.assertIsNone(got[1], where)
            else:
                want = list(torch.ops.aten.native_batch_norm(x, w, b, *theirs, training, 0.3,
                                                             1e-4))
            for a, e in zip(got, want):
                self.assertEqual(a.shape, e.shape, where)
                self.assertTrue(torch.allclose(a, e, rtol=1e-12, atol=1e-12), where)
            for a, e in zip(mine, theirs):
                if e is not None:
                    self.assertTrue(torch.allclose(a, e, rtol=1e-12, atol=1e-12), where)
            if stats and training:
                self.assertFalse(torch.equal(mine[0], rm), where)  # updated
            cases += 1
        self.assertEqual(cases, 60)

    def test_declines_what_it_does_not_compute(self):
        x = torch.randn(4, 3, 5, 5, dtype=torch.float64)
        c = torch.ones(3, dtype=torch.float64)
        run = ops.wide_batch_norm_run
        self.assertTrue(run("batch_norm", x, c, c, c.clone(), c.clone(), True, 0.1, 1e-5)[0])
        self.assertFalse(run("batch_norm", x.float(), None, None, None, None, True, 0.1, 1e-5)[0])
        self.assertFalse(run("batch_norm", x.contiguous(memory_format=torch.channels_last),
                             None, None, None, None, True, 0.1, 1e-5)[0])
        self.assertFalse(run("batch_norm", x, c.float(), None, None, None, True, 0.1, 1e-5)[0])
        self.assertFalse(run("batch_norm", x, None, None, None, None, False, 0.1, 1e-5)[0])
        self.assertFalse(run("batch_norm", x[:1, :, :1, :1].contiguous(), None, None, None, None,
                             True, 0.1, 1e-5)[0])  # one value per channel
        rm = c.clone()
        self.assertFalse(run("batch_norm", x, None, None, rm, None, True, 0.1, 1e-5)[0])
        self.assertTrue(torch.equal(rm, c))  # declined: nothing updated


if __name__ == "__main__":
    unittest.main()
