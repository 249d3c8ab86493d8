// stoker_augment_probe OP PARAM W H [KX KY] < in.rgb > out.rgb: one operation of color_ops.hpp
// or daemon/augment/ with an explicit parameter on a packed RGB image (for
// tests/fidelity/augment_fidelity.py).
// OP: brightness | contrast | saturation (PARAM: factor), grayscale, solarize (threshold),
// posterize (bits), autocontrast, equalize, sharpness (factor), hue (shift in [-0.5, 0.5]),
// blur (PARAM: sigma; KX KY: the kernel size, torchvision's (x, y) order), rotate (PARAM: the
// angle in degrees; KX: 0 nearest, 1 bilinear; KY: the fill, one number for all channels).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "augment/blur.hpp"
#include "augment/geometric.hpp"
#include "augment/hue.hpp"
#include "image/color_ops.hpp"

using namespace stoker::image;

int main(int argc, char** argv) {
  if (argc != 5 && argc != 7) {
    std::fprintf(stderr, "usage: stoker_augment_probe OP PARAM W H [KX KY] < in.rgb > out.rgb\n");
    return 2;
  }
  const std::string op = argv[1];
  const double param = std::atof(argv[2]);
  const std::size_t pixels = std::strtoull(argv[3], nullptr, 10) * std::strtoull(argv[4], nullptr, 10);
  std::vector<std::uint8_t> rgb(pixels * 3);
  if (std::fread(rgb.data(), 1, rgb.size(), stdin) != rgb.size()) return 1;
  if (op == "brightness") adjust_brightness(rgb.data(), pixels, param);
  else if (op == "contrast") adjust_contrast(rgb.data(), pixels, param);
  else if (op == "saturation") adjust_saturation(rgb.data(), pixels, param);
  else if (op == "grayscale") to_grayscale(rgb.data(), pixels);
  else if (op == "solarize") solarize(rgb.data(), pixels, static_cast<int>(param));
  else if (op == "posterize") posterize(rgb.data(), pixels, static_cast<int>(param));
  else if (op == "autocontrast") autocontrast(rgb.data(), pixels);
  else if (op == "equalize") equalize(rgb.data(), pixels);
  else if (op == "sharpness") adjust_sharpness(rgb.data(), std::atoi(argv[3]), std::atoi(argv[4]), param);
  else if (op == "hue") stoker::augment::adjust_hue(rgb.data(), pixels, param);
  else if (op == "blur" && argc == 7) {
    stoker::augment::gaussian_blur(rgb.data(), std::atoi(argv[3]), std::atoi(argv[4]), std::atoi(argv[5]),
                                   std::atoi(argv[6]), param, param);
  } else if (op == "rotate" && argc == 7) {
    const auto fill = static_cast<float>(std::atof(argv[6]));
    std::vector<std::uint8_t> scratch;
    stoker::augment::rotate(rgb.data(), std::atoi(argv[3]), std::atoi(argv[4]), param,
                            std::atoi(argv[5]) == 1 ? stoker::augment::Interpolation::kBilinear
                                                    : stoker::augment::Interpolation::kNearest,
                            {fill, fill, fill}, scratch);
  } else return 2;
  std::fwrite(rgb.data(), 1, rgb.size(), stdout);
  return 0;
}
