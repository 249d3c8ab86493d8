// stoker_augment_probe OP PARAM W H [KX KY] < in.rgb > out.rgb: one operation of color_ops.hpp
// or daemon/augment/ with an explicit parameter on a packed RGB image (for
// tests/fidelity/augment_fidelity.py).
// OP: brightness | contrast | saturation (PARAM: factor), grayscale, solarize (threshold),
// posterize (bits), autocontrast, equalize, sharpness (factor), hue (shift in [-0.5, 0.5]),
// blur (PARAM: sigma; KX KY: the kernel size, torchvision's (x, y) order), rotate (PARAM: the
// angle in degrees; KX: 0 nearest, 1 bilinear; KY: the fill, one number for all channels).
//
// Also (#17's affine and policies):
//   affine W H ANGLE TX TY SCALE SHEARX SHEARY CX CY INTERP FILL < in.rgb > out.rgb
//     functional.affine (centre relative to the image centre; FILL a number or 'none')
//   policy OPNAME MAGNITUDE W H INTERP < in.rgb > out.rgb
//     autoaugment._apply_op(img, OPNAME, MAGNITUDE, interpolation, fill=None) (INTERP 0/1)
//   tables KIND NUM_BINS W H > text
//     each op's magnitude table, one line "Op v0 v1 ..." (KIND: ta_wide, rand, auto)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "augment/blur.hpp"
#include "augment/geometric.hpp"
#include "augment/hue.hpp"
#include "augment/policies.hpp"
#include "augment/color_ops.hpp"

using namespace stoker::augment;

namespace {

stoker::augment::Interpolation interp(const char* a) {
  return std::atoi(a) == 1 ? stoker::augment::Interpolation::kBilinear : stoker::augment::Interpolation::kNearest;
}

bool read_rgb(std::vector<std::uint8_t>& rgb, int w, int h) {
  rgb.resize(static_cast<std::size_t>(w) * h * 3);
  return std::fread(rgb.data(), 1, rgb.size(), stdin) == rgb.size();
}

int extra_ops(int argc, char** argv) {
  namespace aug = stoker::augment;
  const std::string op = argv[1];
  std::vector<std::uint8_t> rgb;
  if (op == "affine" && argc == 14) {
    const int w = std::atoi(argv[2]), h = std::atoi(argv[3]);
    aug::AffineParams a;
    a.angle = std::atof(argv[4]);
    a.translate = {std::atof(argv[5]), std::atof(argv[6])};
    a.scale = std::atof(argv[7]);
    a.shear = {std::atof(argv[8]), std::atof(argv[9])};
    a.center = {std::atof(argv[10]), std::atof(argv[11])};
    const bool none = std::string(argv[13]) == "none";
    const auto f = static_cast<float>(std::atof(argv[13]));
    const std::array<float, 3> fill{f, f, f};
    if (!read_rgb(rgb, w, h)) return 1;
    std::vector<std::uint8_t> scratch;
    aug::affine(rgb.data(), w, h, a, interp(argv[12]), none ? nullptr : &fill, scratch);
  } else if (op == "policy" && argc == 7) {
    const int w = std::atoi(argv[4]), h = std::atoi(argv[5]);
    aug::PolicyDraw d;
    d.op = aug::PolicyOp::kIdentity;
    for (int k = 0; k <= static_cast<int>(aug::PolicyOp::kInvert); ++k) {
      if (std::string(aug::to_string(static_cast<aug::PolicyOp>(k))) == argv[2]) d.op = static_cast<aug::PolicyOp>(k);
    }
    if (d.op == aug::PolicyOp::kIdentity && std::string(argv[2]) != "Identity") return 2;
    d.magnitude = std::atof(argv[3]);
    if (!read_rgb(rgb, w, h)) return 1;
    apply_policy_op(rgb.data(), w, h, d, interp(argv[6]));
  } else if (op == "tables" && argc == 6) {
    const std::string k = argv[2];
    const auto kind = k == "ta_wide" ? aug::PolicyKind::kTrivialAugmentWide
                      : k == "rand"  ? aug::PolicyKind::kRandAugment
                                     : aug::PolicyKind::kAutoAugmentImagenet;
    const int bins = std::atoi(argv[3]), w = std::atoi(argv[4]), h = std::atoi(argv[5]);
    for (int o = 0; o <= static_cast<int>(aug::PolicyOp::kInvert); ++o) {
      const auto po = static_cast<aug::PolicyOp>(o);
      if (!aug::has_magnitude(po)) continue;
      std::printf("%s", aug::to_string(po));
      for (int b = 0; b < bins; ++b) std::printf(" %.17g", aug::magnitude_value(kind, po, b, bins, h, w));
      std::printf("\n");
    }
    return 0;
  } else {
    return -1;
  }
  std::fwrite(rgb.data(), 1, rgb.size(), stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2) {
    const int rc = extra_ops(argc, argv);
    if (rc >= 0) return rc;
  }
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
