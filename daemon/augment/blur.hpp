// Gaussian blur with torchvision 0.14's tensor gaussian_blur (functional_tensor.py): a float32
// kernel exp(-0.5 (x/sigma)^2) / sum over x = -(k-1)/2 .. (k-1)/2, reflect padding of k/2 on
// each side, then round half to even back to uint8. torch convolves with the 2-D outer product;
// here the same kernel runs as two 1-D passes (k_x + k_y instead of k_x * k_y products per
// value), which rounds the float32 sums differently only in the last bits: a value lands one
// off where torch's lands within ~1e-4 of .5 (tests/fidelity/augment_fidelity.py measures it).
#pragma once

#include <cstdint>
#include <vector>

namespace stoker::augment {

// torchvision's _get_gaussian_kernel1d in float32 (`size` odd, `sigma` > 0).
std::vector<float> gaussian_kernel1d(int size, double sigma);

// Packed RGB `width` x `height`, in place. Preconditions (the config checks them against the
// output size): kernel_x, kernel_y odd and positive, kernel_x / 2 < width, kernel_y / 2 < height
// (reflect padding needs a pixel to mirror), sigmas > 0.
void gaussian_blur(std::uint8_t* rgb, int width, int height, int kernel_x, int kernel_y, double sigma_x,
                   double sigma_y);

}  // namespace stoker::augment
