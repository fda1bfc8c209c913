"""Coverage of kornia through lazytrace: every public function of the listed submodules and a set of
augmentation classes, called eagerly and traced on two different random inputs of one signature.

Used by tests/test_kornia_coverage.py (asserts) and benchmarks/kornia_coverage_report.py (README table).
Inputs: per-function overrides (OVERRIDES) on top of rules by parameter name (NAME_RULES), then by
annotation (ANNOTATION_RULES); only parameters without a default are filled unless an override says
otherwise. A function is either called or listed in SKIP with a reason.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import math
import sys
from dataclasses import dataclass, field

import torch

import lazytrace

MODULES = ["kornia.color", "kornia.filters", "kornia.enhance", "kornia.geometry.transform",
           "kornia.morphology", "kornia.losses", "kornia.metrics"]
H = W = 16


def real_module(name: str):
    """The kornia module itself, also inside enable("kornia") (the hook never touches sys.modules)."""
    importlib.import_module(name)
    return sys.modules[name]


class Rand:
    """Random inputs from one seed: same seed, same values; shapes never depend on the seed."""

    def __init__(self, seed: int):
        self.g = torch.Generator().manual_seed(seed)

    def u(self, *shape, lo=0.0, hi=1.0):
        return torch.rand(shape, generator=self.g) * (hi - lo) + lo

    def int(self, hi, *shape):
        return torch.randint(0, hi, shape, generator=self.g)

    def img(self, c=3, b=1, h=H, w=W):
        return self.u(b, c, h, w)

    def vol(self, c=3, d=4):
        return self.u(1, c, d, H, W)

    def affine(self):
        """A (1, 2, 3) affine matrix close to identity."""
        return torch.eye(2, 3).unsqueeze(0) + self.u(1, 2, 3, lo=-0.1, hi=0.1)

    def homography(self, n=3):
        """A (1, n, n) projective matrix close to identity."""
        m = torch.eye(n).unsqueeze(0) + self.u(1, n, n, lo=-0.05, hi=0.05)
        m[:, -1, :-1] *= 0.01
        m[:, -1, -1] = 1.0
        return m

    def box(self, lo=1.0, size=8.0):
        """A (1, 4, 2) axis-aligned box (x, y corners clockwise from top-left)."""
        x0, y0 = (self.u(2, lo=lo, hi=lo + 3.0)).round()
        x1, y1 = x0 + size - 1, y0 + size - 1
        return torch.tensor([[[x0, y0], [x1, y0], [x1, y1], [x0, y1]]])

    def box3d(self, size=2.0):
        """A (1, 8, 3) axis-aligned box (x, y, z corners in kornia's order)."""
        x0, y0, z0 = self.u(3, lo=0.0, hi=1.0).round()
        x1, y1, z1 = x0 + size - 1, y0 + size - 1, z0 + size - 1
        c = [[x0, y0, z0], [x1, y0, z0], [x1, y1, z0], [x0, y1, z0],
             [x0, y0, z1], [x1, y0, z1], [x1, y1, z1], [x0, y1, z1]]
        return torch.tensor([c])

    def rotation(self, b=1):
        """(b, 3, 3) rotation matrices (QR of random matrices, det +1)."""
        q, r = torch.linalg.qr(self.u(b, 3, 3, lo=-1, hi=1))
        q = q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1)).unsqueeze(-2)
        return q * torch.det(q).view(b, 1, 1)

    def points(self, n=5):
        return self.u(1, n, 2, lo=-1.0, hi=1.0)

    def softmax(self, c=3):
        return torch.softmax(self.u(1, c, H, W, lo=-2, hi=2), dim=1)


# ---- rules by parameter name: a required parameter of this name gets this value --------------------
def _image(r):
    return r.img()


NAME_RULES = {
    **dict.fromkeys(["image", "input", "input_tensor", "tensor", "img", "src", "data", "x", "img1", "img2",
                     "patch_src", "guidance", "src1", "src2", "idepth", "target", "pred"], _image),
    "kernel_size": lambda r: (3, 3),
    "window_size": lambda r: 3,
    "sigma": lambda r: (1.5, 1.5),
    "sigma_space": lambda r: (1.5, 1.5),
    "sigma_color": lambda r: 0.1,
    "factor": lambda r: r.u(1, lo=0.1, hi=0.9),
    "angle": lambda r: r.u(1, lo=-45.0, hi=45.0),
    "kernel": lambda r: torch.ones(3, 3),
    "max_val": lambda r: 1.0,
    "dsize": lambda r: (H, W),
    "size": lambda r: (8, 8),
    "out_size": lambda r: (8, 8),
    "center": lambda r: r.u(1, 2, lo=6.0, hi=10.0),
    "M": lambda r: r.affine(),
    "matrix": lambda r: r.affine(),
    "translations": lambda r: r.u(1, 2, lo=-3.0, hi=3.0),
    "translation": lambda r: r.u(1, 2, lo=-3.0, hi=3.0),
    "max_level": lambda r: 2,
    "num_classes": lambda r: 3,
}


def _img_pair(r):
    return (r.img(), r.img()), {}


def _labels(r, c=3):
    return r.softmax(c), r.int(c, 1, H, W)


def _disparity(r):
    return (r.u(1, 1, H, W, hi=20.0), r.u(1, 1, H, W, hi=20.0)), {}


def _mi(r, *shape):
    x = r.u(*shape)
    return (x, x + 0.3 * r.u(*shape)), {}


def _tps(r):
    kernel_centers, kernel_weights = r.points(), r.u(1, 5, 2, lo=-0.1, hi=0.1)
    affine_weights = torch.tensor([[[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]]) + r.u(1, 3, 2, lo=-0.1, hi=0.1)
    return kernel_centers, kernel_weights, affine_weights


def _map_average_precision(r):
    boxes = [torch.tensor([[1.0, 1.0, 6.0, 6.0], [8.0, 8.0, 14.0, 14.0]]) + r.u(2, 4, hi=0.5)]
    gt = [torch.tensor([[1.0, 1.0, 6.0, 6.0], [8.0, 8.0, 14.0, 14.0]])]
    labels = [torch.tensor([1, 2])]
    return (boxes, labels, [r.u(2, lo=0.5)], gt, labels, 3), {}


#: name -> make(Rand) -> (args, kwargs): the whole call, when rules by name are not enough
OVERRIDES = {
    # color: value ranges and channel counts
    "color.apply_colormap": lambda r: ((r.int(64, 1, 1, H, W).float(),
                                        real_module("kornia.color").ColorMap("viridis")), {}),
    "color.bgr_to_rgba": lambda r: ((r.img(), 1.0), {}),
    "color.rgb_to_rgba": lambda r: ((r.img(), 1.0), {}),
    "color.grayscale_to_rgb": lambda r: ((r.img(1),), {}),
    "color.hls_to_rgb": lambda r: ((r.img() * torch.tensor([2 * math.pi, 1, 1]).view(1, 3, 1, 1),), {}),
    "color.hsv_to_rgb": lambda r: ((r.img() * torch.tensor([2 * math.pi, 1, 1]).view(1, 3, 1, 1),), {}),
    "color.lab_to_rgb": lambda r: ((r.img() * torch.tensor([100.0, 200, 200]).view(1, 3, 1, 1)
                                    - torch.tensor([0.0, 100, 100]).view(1, 3, 1, 1),), {}),
    "color.luv_to_rgb": lambda r: ((r.img() * torch.tensor([100.0, 200, 200]).view(1, 3, 1, 1)
                                    - torch.tensor([0.0, 100, 100]).view(1, 3, 1, 1),), {}),
    "color.normals_to_rgb255": lambda r: ((r.img() * 2 - 1,), {}),
    "color.rgb255_to_normals": lambda r: ((r.img() * 255,), {}),
    "color.rgb255_to_rgb": lambda r: ((r.img() * 255,), {}),
    "color.raw_to_rgb": lambda r: ((r.img(1), real_module("kornia.color").CFA.BG), {}),
    "color.raw_to_rgb_2x2_downscaled": lambda r: ((r.img(1), real_module("kornia.color").CFA.BG), {}),
    "color.rgb_to_raw": lambda r: ((r.img(), real_module("kornia.color").CFA.BG), {}),
    "color.rgba_to_bgr": lambda r: ((r.img(4),), {}),
    "color.rgba_to_rgb": lambda r: ((r.img(4),), {}),
    "color.yuv420_to_rgb": lambda r: ((r.img(1), r.u(1, 2, H // 2, W // 2, lo=-0.4, hi=0.4)), {}),
    "color.yuv422_to_rgb": lambda r: ((r.img(1), r.u(1, 2, H, W // 2, lo=-0.4, hi=0.4)), {}),
    # filters
    "filters.convolve2d": lambda r: ((r.img(), r.u(1, 3, 3)), {}),
    "filters.correlate2d": lambda r: ((r.img(), r.u(1, 3, 3)), {}),
    "filters.filter2d": lambda r: ((r.img(), r.u(1, 3, 3)), {}),
    "filters.fft_conv": lambda r: ((r.img(), r.u(1, 3, 3)), {}),
    "filters.convolve3d": lambda r: ((r.vol(), r.u(1, 3, 3, 3)), {}),
    "filters.correlate3d": lambda r: ((r.vol(), r.u(1, 3, 3, 3)), {}),
    "filters.filter3d": lambda r: ((r.vol(), r.u(1, 3, 3, 3)), {}),
    "filters.filter2d_separable": lambda r: ((r.img(), r.u(1, 3), r.u(1, 3)), {}),
    "filters.gaussian": lambda r: ((5, r.u(1, 1, lo=0.5, hi=2.0)), {}),
    "filters.get_gaussian_discrete_kernel1d": lambda r: ((5, r.u(1, 1, lo=0.5, hi=2.0)), {}),
    "filters.get_gaussian_erf_kernel1d": lambda r: ((5, r.u(1, 1, lo=0.5, hi=2.0)), {}),
    "filters.get_gaussian_kernel1d": lambda r: ((5, r.u(1, 1, lo=0.5, hi=2.0)), {}),
    "filters.get_gaussian_kernel2d": lambda r: (((5, 5), r.u(1, 2, lo=0.5, hi=2.0)), {}),
    "filters.get_gaussian_kernel3d": lambda r: (((3, 3, 3), r.u(1, 3, lo=0.5, hi=2.0)), {}),
    "filters.get_hanning_kernel1d": lambda r: ((5,), {}),
    "filters.get_hanning_kernel2d": lambda r: (((5, 5),), {}),
    "filters.get_laplacian_kernel1d": lambda r: ((5,), {}),
    "filters.get_laplacian_kernel2d": lambda r: ((5,), {}),
    "filters.laplacian_1d": lambda r: ((5,), {}),
    "filters.get_box_kernel1d": lambda r: ((3,), {}),
    "filters.get_motion_kernel2d": lambda r: ((5, r.u(1, hi=90.0), r.u(1, lo=-1.0, hi=1.0)), {}),
    "filters.get_motion_kernel3d": lambda r: ((5, r.u(1, 3, hi=90.0), r.u(1, lo=-1.0, hi=1.0)), {}),
    "filters.get_spatial_gradient_kernel2d": lambda r: (("sobel", 1), {}),
    "filters.get_spatial_gradient_kernel3d": lambda r: (("diff", 1), {}),
    "filters.guided_blur": lambda r: ((r.img(), r.img(), 3, 0.1), {}),
    "filters.in_range": lambda r: ((r.img(), (0.2, 0.2, 0.2), (0.8, 0.8, 0.8)), {}),
    "filters.laplacian": lambda r: ((r.img(), 3), {}),
    "filters.motion_blur": lambda r: ((r.img(), 5, r.u(1, hi=90.0), r.u(1, lo=-1.0, hi=1.0)), {}),
    "filters.motion_blur3d": lambda r: ((r.vol(), 3, r.u(1, 3, hi=90.0), r.u(1, lo=-1.0, hi=1.0)), {}),
    "filters.otsu_threshold": lambda r: ((r.img(1),), {}),
    "filters.spatial_gradient3d": lambda r: ((r.vol(),), {}),
    "filters.blur_pool2d": lambda r: ((r.img(), 3), {}),
    "filters.max_blur_pool2d": lambda r: ((r.img(), 3), {}),
    "filters.edge_aware_blur_pool2d": lambda r: ((r.img(), 3), {}),
    # enhance
    "enhance.add_weighted": lambda r: ((r.img(), 0.4, r.img(), 0.6, 0.1), {}),
    "enhance.adjust_gamma": lambda r: ((r.img(), r.u(1, lo=0.5, hi=2.0)), {}),
    "enhance.adjust_hue": lambda r: ((r.img(), r.u(1, lo=-3.0, hi=3.0)), {}),
    "enhance.adjust_hue_raw": lambda r: ((r.img() * torch.tensor([2 * math.pi, 1, 1]).view(1, 3, 1, 1),
                                          r.u(1, lo=-3.0, hi=3.0)), {}),
    "enhance.adjust_saturation_raw": lambda r: ((r.img() * torch.tensor([2 * math.pi, 1, 1]).view(1, 3, 1, 1),
                                                 r.u(1, lo=0.1, hi=2.0)), {}),
    "enhance.normalize": lambda r: ((r.img(), r.u(3), r.u(3, lo=0.1, hi=1.0)), {}),
    "enhance.denormalize": lambda r: ((r.img(), r.u(3), r.u(3, lo=0.1, hi=1.0)), {}),
    "enhance.equalize3d": lambda r: ((r.vol(),), {}),
    "enhance.equalize_clahe": lambda r: ((r.img(),), {"grid_size": (2, 2)}),
    "enhance.histogram": lambda r: ((r.u(1, 64), torch.linspace(0, 1, 8), torch.tensor(0.1)), {}),
    "enhance.histogram2d": lambda r: ((r.u(1, 64), r.u(1, 64), torch.linspace(0, 1, 8), torch.tensor(0.1)), {}),
    "enhance.image_histogram2d": lambda r: ((r.img(1) * 255,), {"n_bins": 16}),
    "enhance.jpeg_codec_differentiable": lambda r: ((r.img(), r.u(1, lo=30.0, hi=90.0)), {}),
    "enhance.linear_transform": lambda r: ((r.u(8, 4), r.u(4, 4), r.u(1, 4)), {}),
    "enhance.posterize": lambda r: ((r.img(), 3), {}),
    "enhance.shift_rgb": lambda r: ((r.img(), r.u(1, lo=-0.1, hi=0.1), r.u(1, lo=-0.1, hi=0.1),
                                     r.u(1, lo=-0.1, hi=0.1)), {}),
    "enhance.threshold": lambda r: ((r.img(), 0.5), {}),
    "enhance.zca_mean": lambda r: ((r.u(16, 4),), {}),
    "enhance.zca_whiten": lambda r: ((r.u(16, 4),), {}),
    # geometry.transform
    "geometry.transform.affine3d": lambda r: ((r.vol(), torch.eye(3, 4).unsqueeze(0) + r.u(1, 3, 4, lo=-0.1, hi=0.1)),
                                              {}),
    "geometry.transform.center_crop3d": lambda r: ((r.vol(), (2, 8, 8)), {}),
    "geometry.transform.crop_and_resize": lambda r: ((r.img(), r.box(), (8, 8)), {}),
    "geometry.transform.crop_and_resize3d": lambda r: ((r.vol(), r.box3d(), (2, 4, 4)), {}),
    "geometry.transform.crop_by_boxes": lambda r: ((r.img(), r.box(), r.box(0.0)), {}),
    "geometry.transform.crop_by_boxes3d": lambda r: ((r.vol(), r.box3d(), r.box3d()), {}),
    "geometry.transform.crop_by_indices": lambda r: ((r.img(), r.box()), {}),
    "geometry.transform.crop_by_transform_mat": lambda r: ((r.img(), r.homography(), (8, 8)), {}),
    "geometry.transform.crop_by_transform_mat3d": lambda r: ((r.vol(), r.homography(4), (2, 8, 8)), {}),
    "geometry.transform.elastic_transform2d": lambda r: ((r.img(), r.u(1, 2, H, W, lo=-1, hi=1)),
                                                         {"kernel_size": (5, 5), "sigma": (4.0, 4.0)}),
    "geometry.transform.get_affine_matrix2d": lambda r: ((r.u(1, 2), r.u(1, 2, lo=6, hi=10), r.u(1, 2, lo=0.8, hi=1.2),
                                                          r.u(1, hi=45.0)), {}),
    "geometry.transform.get_affine_matrix3d": lambda r: ((r.u(1, 3), r.u(1, 3, lo=6, hi=10), r.u(1, 3, lo=0.8, hi=1.2),
                                                          r.u(1, 3, hi=45.0)), {}),
    "geometry.transform.get_perspective_transform": lambda r: ((r.box() / 10, r.box() / 10 + r.u(1, 4, 2, hi=0.1)),
                                                               {}),
    "geometry.transform.get_perspective_transform3d": lambda r: ((r.box3d(), r.box3d() + r.u(1, 8, 3, hi=0.1)), {}),
    "geometry.transform.get_projective_transform": lambda r: ((r.u(1, 3), r.u(1, 3, hi=45.0), r.u(1, 3, lo=0.8, hi=1.2)),
                                                              {}),
    "geometry.transform.get_rotation_matrix2d": lambda r: ((r.u(1, 2, lo=6, hi=10), r.u(1, hi=45.0),
                                                            r.u(1, 2, lo=0.8, hi=1.2)), {}),
    "geometry.transform.get_shear_matrix2d": lambda r: ((r.u(1, 2, lo=6, hi=10), r.u(1, hi=0.3), r.u(1, hi=0.3)), {}),
    "geometry.transform.get_shear_matrix3d": lambda r: ((r.u(1, 3, lo=6, hi=10),) + tuple(r.u(1, hi=0.3) for _ in range(6)),
                                                        {}),
    "geometry.transform.get_tps_transform": lambda r: ((r.points(), r.points()), {}),
    "geometry.transform.homography_warp": lambda r: ((r.img(), r.homography(), (H, W)), {}),
    "geometry.transform.homography_warp3d": lambda r: ((r.vol(), r.homography(4), (4, H, W)), {}),
    "geometry.transform.invert_affine_transform": lambda r: ((r.affine(),), {}),
    "geometry.transform.projection_from_Rt": lambda r: ((r.rotation(), r.u(1, 3, 1)), {}),
    "geometry.transform.remap": lambda r: ((r.img(), r.u(1, H, W, hi=W - 1.0), r.u(1, H, W, hi=H - 1.0)), {}),
    "geometry.transform.rescale": lambda r: ((r.img(), 0.5), {}),
    "geometry.transform.resize": lambda r: ((r.img(), (12, 20)), {}),
    "geometry.transform.resize_to_be_divisible": lambda r: ((r.img(), 5), {}),
    "geometry.transform.rotate3d": lambda r: ((r.vol(), r.u(1, hi=30.0), r.u(1, hi=30.0), r.u(1, hi=30.0)), {}),
    "geometry.transform.scale": lambda r: ((r.img(), r.u(1, 2, lo=0.8, hi=1.2)), {}),
    "geometry.transform.shear": lambda r: ((r.img(), r.u(1, 2, hi=0.3)), {}),
    "geometry.transform.warp_affine3d": lambda r: ((r.vol(), torch.eye(3, 4).unsqueeze(0)
                                                    + r.u(1, 3, 4, lo=-0.1, hi=0.1), (4, H, W)), {}),
    "geometry.transform.warp_grid": lambda r: ((r.u(1, H, W, 2, lo=-1, hi=1), r.homography()), {}),
    "geometry.transform.warp_grid3d": lambda r: ((r.u(1, 4, H, W, 3, lo=-1, hi=1), r.homography(4)), {}),
    "geometry.transform.warp_image_tps": lambda r: ((r.img(),) + _tps(r), {}),
    "geometry.transform.warp_perspective": lambda r: ((r.img(), r.homography(), (H, W)), {}),
    "geometry.transform.warp_perspective3d": lambda r: ((r.vol(), r.homography(4), (4, H, W)), {}),
    "geometry.transform.warp_points_tps": lambda r: ((r.points(8),) + _tps(r), {}),
    # morphology
    "morphology.reconstruction": lambda r: ((lambda m: (m * r.u(1, 3, H, W, hi=0.5), m))(r.img()), {}),
    # losses
    "losses.binary_focal_loss_with_logits": lambda r: ((r.u(1, 1, H, W, lo=-2, hi=2), r.int(2, 1, 1, H, W).float()),
                                                       {}),
    "losses.dice_loss": lambda r: (_labels(r), {}),
    "losses.focal_loss": lambda r: (_labels(r) + (0.5,), {}),
    "losses.inverse_depth_smoothness_loss": lambda r: ((r.img(1), r.img()), {}),
    "losses.js_div_loss_2d": lambda r: ((r.softmax(), r.softmax()), {}),
    "losses.kl_div_loss_2d": lambda r: ((r.softmax(), r.softmax()), {}),
    "losses.lovasz_hinge_loss": lambda r: ((r.u(1, 1, H, W, lo=-2, hi=2), r.int(2, 1, H, W)), {}),
    "losses.lovasz_softmax_loss": lambda r: (_labels(r), {}),
    "losses.mutual_information_loss": lambda r: _mi(r, 64),
    "losses.normalized_mutual_information_loss": lambda r: _mi(r, 64),
    "losses.mutual_information_loss_2d": lambda r: _mi(r, 1, 1, H, W),
    "losses.normalized_mutual_information_loss_2d": lambda r: _mi(r, 1, 1, H, W),
    "losses.mutual_information_loss_3d": lambda r: _mi(r, 1, 1, 4, H, W),
    "losses.normalized_mutual_information_loss_3d": lambda r: _mi(r, 1, 1, 4, H, W),
    "losses.one_hot": lambda r: ((r.int(3, 1, H, W), 3, torch.device("cpu"), torch.float32), {}),
    "losses.psnr_loss": lambda r: ((r.img(), r.img(), 1.0), {}),
    "losses.ssim_loss": lambda r: ((r.img(), r.img(), 3), {}),
    "losses.ssim3d_loss": lambda r: ((r.vol(), r.vol(), 3), {}),
    "losses.tversky_loss": lambda r: (_labels(r) + (0.5, 0.5), {}),
    # metrics
    "metrics.accuracy": lambda r: ((r.u(8, 5), r.int(5, 8)), {"topk": (1, 2)}),
    "metrics.aepe": lambda r: ((r.u(1, H, W, 2), r.u(1, H, W, 2)), {}),
    "metrics.average_endpoint_error": lambda r: ((r.u(1, H, W, 2), r.u(1, H, W, 2)), {}),
    "metrics.angle_error_mat": lambda r: ((r.rotation(2), r.rotation(2)), {}),
    "metrics.angle_error_vec": lambda r: ((r.u(2, 3, lo=-1), r.u(2, 3, lo=-1)), {}),
    "metrics.auc_from_errors": lambda r: ((r.u(16, hi=12.0),), {}),
    "metrics.confusion_matrix": lambda r: ((r.int(3, 1, 32), r.int(3, 1, 32), 3), {}),
    "metrics.kitti_d1_error": _disparity,
    "metrics.mean_absolute_disparity_error": _disparity,
    "metrics.mean_bad_pixel_error": _disparity,
    "metrics.root_mean_squared_disparity_error": _disparity,
    "metrics.mean_average_precision": _map_average_precision,
    "metrics.mean_iou": lambda r: ((r.int(3, 1, 32), r.int(3, 1, 32), 3), {}),
    "metrics.mean_iou_bbox": lambda r: ((torch.tensor([[1.0, 1.0, 6.0, 6.0]]) + r.u(1, 4),
                                         torch.tensor([[2.0, 2.0, 7.0, 7.0], [0.0, 0.0, 4.0, 4.0]]) + r.u(2, 4)), {}),
    "metrics.pose_errors": lambda r: ((torch.cat([r.rotation(2), r.u(2, 3, 1)], -1),
                                       torch.cat([r.rotation(2), r.u(2, 3, 1)], -1)), {}),
    "metrics.psnr": lambda r: ((r.img(), r.img(), 1.0), {}),
    "metrics.ssim": lambda r: ((r.img(), r.img(), 3), {}),
    "metrics.ssim3d": lambda r: ((r.vol(), r.vol(), 3), {}),
    "metrics.translation_ate": lambda r: ((r.u(4, 3), r.u(4, 3)), {}),
}

#: functions not called, with the reason (they count against the coverage target)
SKIP: dict[str, str] = {}


@dataclass
class Case:
    name: str                     # e.g. "filters.gaussian_blur2d" or "augmentation.RandomAffine"
    make: object                  # make(Rand) -> (args, kwargs)
    fn: object = None             # the eager kornia callable
    module_args: tuple | None = None   # for augmentation classes: constructor (args, kwargs)


def public_functions(module_name: str) -> list[tuple[str, object]]:
    """(name, function) for each public function of a kornia submodule: `__all__` if it has one,
    else the public functions defined inside kornia; classes are left to the augmentation part."""
    module = real_module(module_name)
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in dir(module) if not n.startswith("_")]
    out = []
    for name in names:
        obj = getattr(module, name, None)
        if inspect.isfunction(obj) and obj.__module__.startswith("kornia"):
            out.append((name, obj))
    return sorted(out)


def short(module_name: str) -> str:
    return module_name.removeprefix("kornia.")


#: a required parameter no name rule knows gets a value by its annotation (kornia's are strings)
ANNOTATION_RULES = {"torch.Tensor": _image, "Tensor": _image, "float": lambda r: 0.5, "int": lambda r: 3}


def _rule(param: inspect.Parameter):
    if param.name in NAME_RULES:
        return NAME_RULES[param.name]
    annotation = param.annotation
    if isinstance(annotation, type):
        annotation = annotation.__name__
    return ANNOTATION_RULES.get(annotation)


def make_by_rules(qualname: str, fn):
    """make(Rand) for a function, from OVERRIDES or else the rules by parameter name, then by
    annotation; None when a required parameter has no rule."""
    if qualname in OVERRIDES:
        return OVERRIDES[qualname]
    params = [p for p in inspect.signature(fn).parameters.values()
              if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    rules = [_rule(p) for p in params]
    if None in rules:
        return None
    return lambda r: (tuple(rule(r) for rule in rules), {})


def function_cases() -> tuple[list[Case], dict[str, str]]:
    """Cases for every public function of MODULES, and the functions skipped with reasons."""
    cases, skipped = [], {}
    for module_name in MODULES:
        for name, fn in public_functions(module_name):
            qualname = f"{short(module_name)}.{name}"
            if qualname in SKIP:
                skipped[qualname] = SKIP[qualname]
                continue
            make = make_by_rules(qualname, fn)
            if make is None:
                skipped[qualname] = "no input rule (harness gap)"
                continue
            cases.append(Case(qualname, make, fn=fn))
    return cases, skipped


# ---- augmentation classes: constructor arguments and inputs -----------------------------------------
def _aug_input(r):
    return (r.img(b=2),), {}


AUGMENTATIONS = {
    "RandomHorizontalFlip": ((), {"p": 0.5}),
    "RandomVerticalFlip": ((), {"p": 0.5}),
    "ColorJiggle": ((0.2, 0.2, 0.2, 0.1), {"p": 1.0}),
    "ColorJitter": ((0.2, 0.2, 0.2, 0.1), {"p": 1.0}),
    "RandomAffine": ((15.0,), {"translate": (0.1, 0.1), "scale": (0.9, 1.1), "p": 1.0}),
    "RandomRotation": ((30.0,), {"p": 1.0}),
    "RandomPerspective": ((0.3,), {"p": 1.0}),
    "RandomResizedCrop": (((12, 12),), {"p": 1.0}),
    "RandomCrop": (((12, 12),), {"p": 1.0}),
    "CenterCrop": (((12, 12),), {"p": 1.0}),
    "RandomGaussianBlur": (((3, 3), (0.1, 2.0)), {"p": 1.0}),
    "RandomGrayscale": ((), {"p": 0.5}),
    "RandomSolarize": ((0.1, 0.1), {"p": 1.0}),
    "RandomPosterize": ((3,), {"p": 1.0}),
    "RandomSharpness": ((0.5,), {"p": 1.0}),
    "RandomEqualize": ((), {"p": 1.0}),
    "RandomInvert": ((), {"p": 0.5}),
    "RandomBrightness": (((0.8, 1.2),), {"p": 1.0}),
    "RandomContrast": (((0.8, 1.2),), {"p": 1.0}),
    "RandomGaussianNoise": ((), {"std": 0.1, "p": 1.0}),
    "RandomErasing": ((), {"p": 1.0}),
    "RandomMotionBlur": ((3, 35.0, 0.5), {"p": 1.0}),
    "RandomChannelShuffle": ((), {"p": 1.0}),
    "RandomThinPlateSpline": ((), {"p": 1.0}),
    "RandomElasticTransform": ((), {"kernel_size": (5, 5), "p": 1.0}),
    "Normalize": ((torch.tensor([0.5, 0.4, 0.3]), torch.tensor([0.2, 0.25, 0.3])), {}),
    "Denormalize": ((torch.tensor([0.5, 0.4, 0.3]), torch.tensor([0.2, 0.25, 0.3])), {}),
    "Resize": (((12, 20),), {}),
}


def augmentation_cases() -> list[Case]:
    K = real_module("kornia.augmentation")
    return [Case(f"augmentation.{name}", _aug_input, fn=getattr(K, name), module_args=ctor)
            for name, ctor in AUGMENTATIONS.items()]


# ---- running a case -----------------------------------------------------------------------------
SEEDS = (101, 202)


@dataclass
class Result:
    name: str
    status: str                   # "graph" (2nd call served from a graph), "fallback", "wrong", "error"
    detail: str = ""
    reasons: list = field(default_factory=list)
    gradient: str = ""            # see compare_gradients: "equal", "differs ...", "not differentiable"...


class EnabledKornia:
    """kornia as a user of `with lazytrace.enable("kornia"): import kornia` gets it, for the
    duration of a `with EnabledKornia() as provider:` block: functions are the proxy's LazyGraphs,
    augmentation classes its traced classes."""

    def __init__(self, **options):
        self.options = options          # enable()'s trace_graph options, e.g. to="torch"

    def __enter__(self):
        self._layer = lazytrace.enable("kornia", **self.options)
        self._layer.__enter__()
        import kornia                   # noqa: F401 - the proxy, through the import hook
        import kornia.augmentation      # noqa: F401
        import kornia.geometry.transform  # noqa: F401
        self.kornia = kornia
        return self

    def __exit__(self, *exc):
        self._layer.__exit__(*exc)

    def _traced(self, case: Case):
        *path, attr = case.name.split(".")
        return getattr(functools.reduce(getattr, path, self.kornia), attr)

    def function(self, case: Case):
        return self._traced(case)

    def module(self, case: Case):
        args, kwargs = case.module_args
        return self._traced(case)(*args, **kwargs)

    def stats(self, traced):
        """The Stats of the LazyGraph behind `traced`, or None when the proxy left it untraced."""
        lazy = traced.forward if isinstance(traced, torch.nn.Module) else traced
        return lazy.stats if isinstance(lazy, lazytrace.LazyGraph) else None

    def skipped_reason(self, case: Case) -> str:
        summary = self._layer.summary().get("kornia", {})
        for name, reason in summary.get("skipped", {}).items():
            if name.rsplit(".", 1)[-1] == case.name.rsplit(".", 1)[-1]:
                return f"left untraced by enable(): {reason}"
        return "left untraced by enable()"


def _snapshot(provider, traced) -> tuple:
    stats = provider.stats(traced)
    return (0, 0, {}) if stats is None else (stats.hits, stats.traces, dict(stats.reasons))


def _eager_callable(case: Case):
    if case.module_args is None:
        return case.fn
    args, kwargs = case.module_args
    return case.fn(*args, **kwargs)


def assert_same(actual, expected):
    """Exact equality (NaNs equal) through nested tuples, lists and dicts; Python numbers too."""
    torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)


def run_case(case: Case, provider, gradients: bool = True) -> Result:
    """Eager and traced on SEEDS[0] (the trace), then on SEEDS[1] (should replay a graph);
    then, where the output is differentiable, the same with gradients."""
    eager = _eager_callable(case)
    try:
        traced = _traced_callable(case, provider)
    except Exception as exc:  # noqa: BLE001 - reported, the test fails on it
        return Result(case.name, "error", f"provider: {type(exc).__name__}: {exc}")
    for i, seed in enumerate(SEEDS):
        before = _snapshot(provider, traced)
        try:
            expected = _call(eager, case, seed)
        except Exception as exc:  # noqa: BLE001
            return Result(case.name, "error", f"eager call {i + 1} raised {type(exc).__name__}: {exc}"[:300])
        try:
            actual = _call(traced, case, seed)
        except Exception as exc:  # noqa: BLE001
            return Result(case.name, "wrong", f"traced call {i + 1} raised {type(exc).__name__}: {exc}"[:300])
        try:
            assert_same(actual, expected)
            if case.module_args is not None:        # what an augmentation keeps for the caller
                assert_same(_module_state(traced), _module_state(eager))
        except AssertionError as exc:
            return Result(case.name, "wrong", f"call {i + 1} differs from eager: {exc}"[:500])
    result = _classify(case, provider, traced, before)
    if gradients:
        result.gradient = compare_gradients(case, provider)
        if result.gradient.startswith("differs"):
            result.status, result.detail = "wrong", f"gradients: {result.gradient}"
    return result


def _module_state(module) -> dict:
    """The sampled parameters and the transformation matrix an augmentation keeps after a call
    (users read them to transform boxes or to invert the augmentation)."""
    state = {}
    for name in ("transform_matrix", "_params"):
        try:
            value = getattr(module, name)
        except Exception:  # noqa: BLE001 - a property that has nothing to give
            continue
        if value is not None:
            state[name] = value
    return state


def _traced_callable(case: Case, provider):
    return provider.function(case) if case.module_args is None else provider.module(case)


def _classify(case: Case, provider, traced, before: tuple) -> Result:
    """From the stats before and after the last call: was it served from a graph, and if not, why."""
    if provider.stats(traced) is None:
        return Result(case.name, "fallback", reasons=[provider.skipped_reason(case)])
    hits, traces, reasons = _snapshot(provider, traced)
    if hits == before[0] + 1:
        return Result(case.name, "graph")
    new = sorted(r for r in reasons if reasons[r] > before[2].get(r, 0))
    if not new and traces > before[1]:
        new = ["traced again: a value read back from an array changed (a guard failed)"]
    return Result(case.name, "fallback", f"last call: {traces - before[1]} traces", reasons=new)


def _call(fn, case: Case, seed: int, requires_grad: bool = False):
    """fn on the inputs of `seed` (global RNG seeded too, for augmentations): (output, grad leaves)."""
    args, kwargs = case.make(Rand(seed))
    if requires_grad:
        args = tuple(_leaf(a) for a in args)
        kwargs = {k: _leaf(v) for k, v in kwargs.items()}
    torch.default_generator.manual_seed(seed)    # torch.manual_seed minus the queued CUDA/XPU seeding
    out = fn(*args, **kwargs)
    if not requires_grad:
        return out
    return out, [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor) and a.requires_grad]


def _leaf(a):
    if isinstance(a, torch.Tensor) and a.is_floating_point():
        return a.detach().clone().requires_grad_(True)
    return a


def _float_outputs(out) -> list:
    if isinstance(out, torch.Tensor):
        return [out] if out.requires_grad else []
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _float_outputs(o)]
    return []


def _gradients(fn, case: Case, seed: int):
    """(output, gradients of a fixed random projection of the float outputs w.r.t. every float input),
    or None when the output does not depend differentiably on the inputs."""
    out, leaves = _call(fn, case, seed, requires_grad=True)
    outputs = _float_outputs(out)
    if not outputs or not leaves:
        return None
    g = torch.Generator().manual_seed(seed)
    loss = sum((o * torch.randn(o.shape, generator=g, dtype=o.dtype)).sum() for o in outputs)
    return out, torch.autograd.grad(loss, leaves, allow_unused=True)


def compare_gradients(case: Case, provider) -> str:
    """"equal" (traced gradients equal eager's on both seeds; the last call served from a graph),
    "equal (last call eager)", "differs: ...", or why they were not compared."""
    eager, traced = _eager_callable(case), _traced_callable(case, provider)
    for seed in SEEDS:
        before = _snapshot(provider, traced)
        try:
            expected = _gradients(eager, case, seed)
        except Exception as exc:  # noqa: BLE001
            return f"not compared: eager backward raises {type(exc).__name__}"
        if expected is None:
            return "not differentiable"
        try:
            actual = _gradients(traced, case, seed)
            assert_same(actual, expected)
        except Exception as exc:  # noqa: BLE001
            return f"differs on seed {seed}: {type(exc).__name__}: {exc}"[:400]
    served = _snapshot(provider, traced)[0] == before[0] + 1
    return "equal" if served else "equal (last call eager)"


def run_all(**options):
    """Results of every function and augmentation case (through enable("kornia", **options)),
    and the skipped functions.

    Runs with one intra-op thread: on 16x16 inputs a second thread only adds contention (on a
    loaded 2-core machine a 16x16 conv2d took 3 ms with 2 threads, 0.1 ms with 1)."""
    cases, skipped = function_cases()
    cases += augmentation_cases()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with EnabledKornia(**options) as provider:
            return [run_case(case, provider) for case in cases], skipped
    finally:
        torch.set_num_threads(threads)
