"""Valid calls of kornia functions, shared by tests and benchmarks.

Each case: (name, function, make_args(seed) -> args tuple). Inputs are
1x3x32x32 float32 images in [0, 1] unless the function needs otherwise.
"""
import torch
import kornia.color as KC
import kornia.enhance as KE
import kornia.filters as KF
import kornia.geometry.transform as KT
import kornia.morphology as KM


def img(seed, shape=(1, 3, 32, 32)):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=g)


def to_device(obj, device):
    """A case's arguments with every tensor moved to `device`."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, tuple):
        return tuple(to_device(x, device) for x in obj)
    return obj


def gray(seed):
    return img(seed, (1, 1, 32, 32))


KERNEL3 = torch.ones(3, 3)
ANGLE = torch.tensor([30.0])
AFFINE = torch.tensor([[[1.0, 0.1, 2.0], [0.0, 0.9, -1.0]]])
HOMOGRAPHY = torch.tensor([[[1.0, 0.05, 1.0], [0.02, 1.0, -2.0], [0.0001, 0.0, 1.0]]])
MEAN = torch.tensor([0.5, 0.4, 0.3])
STD = torch.tensor([0.2, 0.25, 0.3])

CASES = [
    # color
    ("color.rgb_to_grayscale", KC.rgb_to_grayscale, lambda s: (img(s),)),
    ("color.rgb_to_hsv", KC.rgb_to_hsv, lambda s: (img(s),)),
    ("color.hsv_to_rgb", KC.hsv_to_rgb, lambda s: (img(s) * torch.tensor([6.28, 1, 1]).view(1, 3, 1, 1),)),
    ("color.rgb_to_hls", KC.rgb_to_hls, lambda s: (img(s),)),
    ("color.rgb_to_lab", KC.rgb_to_lab, lambda s: (img(s),)),
    ("color.rgb_to_luv", KC.rgb_to_luv, lambda s: (img(s),)),
    ("color.rgb_to_ycbcr", KC.rgb_to_ycbcr, lambda s: (img(s),)),
    ("color.ycbcr_to_rgb", KC.ycbcr_to_rgb, lambda s: (img(s),)),
    ("color.rgb_to_yuv", KC.rgb_to_yuv, lambda s: (img(s),)),
    ("color.rgb_to_xyz", KC.rgb_to_xyz, lambda s: (img(s),)),
    ("color.bgr_to_rgb", KC.bgr_to_rgb, lambda s: (img(s),)),
    ("color.rgb_to_linear_rgb", KC.rgb_to_linear_rgb, lambda s: (img(s),)),
    ("color.grayscale_to_rgb", KC.grayscale_to_rgb, lambda s: (gray(s),)),
    # filters
    ("filters.gaussian_blur2d", KF.gaussian_blur2d, lambda s: (img(s), (5, 5), (1.5, 1.5))),
    ("filters.box_blur", KF.box_blur, lambda s: (img(s), (3, 3))),
    ("filters.median_blur", KF.median_blur, lambda s: (img(s), (3, 3))),
    ("filters.sobel", KF.sobel, lambda s: (img(s),)),
    ("filters.laplacian", KF.laplacian, lambda s: (img(s), 5)),
    ("filters.spatial_gradient", KF.spatial_gradient, lambda s: (img(s),)),
    ("filters.unsharp_mask", KF.unsharp_mask, lambda s: (img(s), (5, 5), (1.5, 1.5))),
    ("filters.motion_blur", KF.motion_blur, lambda s: (img(s), 5, 35.0, 0.5)),
    ("filters.canny", KF.canny, lambda s: (img(s),)),
    ("filters.bilateral_blur", KF.bilateral_blur, lambda s: (img(s), (5, 5), 0.1, (1.5, 1.5))),
    # enhance
    ("enhance.adjust_brightness", KE.adjust_brightness, lambda s: (img(s), 0.2)),
    ("enhance.adjust_contrast", KE.adjust_contrast, lambda s: (img(s), 1.5)),
    ("enhance.adjust_gamma", KE.adjust_gamma, lambda s: (img(s), 2.2)),
    ("enhance.adjust_saturation", KE.adjust_saturation, lambda s: (img(s), 1.3)),
    ("enhance.adjust_hue", KE.adjust_hue, lambda s: (img(s), 0.3)),
    ("enhance.normalize", KE.normalize, lambda s: (img(s), MEAN, STD)),
    ("enhance.denormalize", KE.denormalize, lambda s: (img(s), MEAN, STD)),
    ("enhance.normalize_min_max", KE.normalize_min_max, lambda s: (img(s),)),
    ("enhance.invert", KE.invert, lambda s: (img(s),)),
    ("enhance.posterize", KE.posterize, lambda s: (img(s), 3)),
    ("enhance.sharpness", KE.sharpness, lambda s: (img(s), 0.5)),
    ("enhance.solarize", KE.solarize, lambda s: (img(s), 0.5)),
    ("enhance.equalize", KE.equalize, lambda s: (img(s),)),
    # geometry.transform
    ("geometry.transform.rotate", KT.rotate, lambda s: (img(s), ANGLE)),
    ("geometry.transform.resize", KT.resize, lambda s: (img(s), (48, 40))),
    ("geometry.transform.rescale", KT.rescale, lambda s: (img(s), 0.5)),
    ("geometry.transform.hflip", KT.hflip, lambda s: (img(s),)),
    ("geometry.transform.vflip", KT.vflip, lambda s: (img(s),)),
    ("geometry.transform.warp_affine", KT.warp_affine, lambda s: (img(s), AFFINE, (32, 32))),
    ("geometry.transform.warp_perspective", KT.warp_perspective, lambda s: (img(s), HOMOGRAPHY, (32, 32))),
    ("geometry.transform.translate", KT.translate, lambda s: (img(s), torch.tensor([[3.0, -2.0]]))),
    ("geometry.transform.scale", KT.scale, lambda s: (img(s), torch.tensor([[1.2]]))),
    ("geometry.transform.shear", KT.shear, lambda s: (img(s), torch.tensor([[0.1, 0.2]]))),
    ("geometry.transform.center_crop", KT.center_crop, lambda s: (img(s), (16, 16))),
    ("geometry.transform.crop_by_indices", KT.crop_by_indices,
     lambda s: (img(s), torch.tensor([[[2, 2], [20, 2], [20, 18], [2, 18]]]))),
    ("geometry.transform.pyrdown", KT.pyrdown, lambda s: (img(s),)),
    ("geometry.transform.pyrup", KT.pyrup, lambda s: (img(s),)),
    # morphology
    ("morphology.dilation", KM.dilation, lambda s: (img(s), KERNEL3)),
    ("morphology.erosion", KM.erosion, lambda s: (img(s), KERNEL3)),
    ("morphology.opening", KM.opening, lambda s: (img(s), KERNEL3)),
    ("morphology.closing", KM.closing, lambda s: (img(s), KERNEL3)),
    ("morphology.gradient", KM.gradient, lambda s: (img(s), KERNEL3)),
    ("morphology.top_hat", KM.top_hat, lambda s: (img(s), KERNEL3)),
]

#: differentiable cases whose gradients are compared with eager's
GRADIENT_CASES = ["color.rgb_to_hsv", "color.rgb_to_lab", "filters.gaussian_blur2d", "filters.sobel",
                  "enhance.adjust_contrast", "enhance.normalize", "geometry.transform.rotate",
                  "geometry.transform.warp_perspective", "morphology.dilation", "filters.unsharp_mask"]

