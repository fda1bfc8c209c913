"""Warm-up script for kornia: common color, filter, geometry and augmentation calls on float32
RGB images at a few typical sizes. Plain Python: `lazytrace warmup kornia` runs it with kornia
traced and the persistent cache on, so later processes replay these calls without tracing.

Edit SIZES (and the calls) to the shapes and dtypes your application uses: a stored graph is
only used for exactly the signature it was traced with (shapes, dtypes, Python values).
"""
import torch

import kornia
import kornia.augmentation as KA
import kornia.color as KC
import kornia.enhance as KE
import kornia.filters as KF
import kornia.geometry.transform as KT

SIZES = [(1, 3, 32, 32), (1, 3, 64, 64), (8, 3, 64, 64), (1, 3, 224, 224)]

for size in SIZES:
    img = torch.rand(size)
    n, _, h, w = size
    # color
    KC.rgb_to_grayscale(img)
    KC.rgb_to_hsv(img)
    KC.hsv_to_rgb(KC.rgb_to_hsv(img))
    KC.rgb_to_lab(img)
    KC.rgb_to_ycbcr(img)
    KC.ycbcr_to_rgb(img)
    KC.rgb_to_yuv(img)
    KC.bgr_to_rgb(img)
    KC.grayscale_to_rgb(KC.rgb_to_grayscale(img))
    # filters
    KF.gaussian_blur2d(img, (5, 5), (1.5, 1.5))
    KF.gaussian_blur2d(img, (3, 3), (1.0, 1.0))
    KF.box_blur(img, (3, 3))
    KF.median_blur(img, (3, 3))
    KF.sobel(img)
    KF.spatial_gradient(img)
    KF.unsharp_mask(img, (5, 5), (1.5, 1.5))
    KF.motion_blur(img, 5, 35.0, 0.5)
    # enhance
    KE.adjust_brightness(img, 0.2)
    KE.adjust_contrast(img, 1.5)
    KE.adjust_gamma(img, 2.2)
    KE.adjust_saturation(img, 1.3)
    KE.adjust_hue(img, 0.3)
    KE.normalize(img, torch.tensor([0.485, 0.456, 0.406]), torch.tensor([0.229, 0.224, 0.225]))
    KE.invert(img)
    KE.solarize(img, 0.5)
    # geometry
    KT.hflip(img)
    KT.vflip(img)
    KT.rotate(img, torch.full((n,), 30.0))
    KT.resize(img, (h // 2, w // 2))
    KT.resize(img, (224, 224))
    KT.rescale(img, 0.5)
    KT.center_crop(img, (h // 2, w // 2))
    KT.warp_affine(img, torch.eye(2, 3).repeat(n, 1, 1), (h, w))
    KT.warp_perspective(img, torch.eye(3).repeat(n, 1, 1), (h, w))
    KT.pyrdown(img)
    # augmentation (nn.Module pipelines: traced per instance, not stored on disk; see README)
    KA.RandomHorizontalFlip(p=0.5)(img)
    KA.ColorJitter(0.1, 0.1, 0.1, 0.1, p=1.0)(img)

print(f"kornia {kornia.__version__}: warm-up calls done for sizes {SIZES}")
