// torch.linspace's float32 values, which torchvision's affine grids and magnitude tables are
// made of: reproducing them bit for bit keeps our parameters torchvision's.
#pragma once

namespace stoker::augment {

// torch.linspace(start, end, steps)[i] in float32: the first half counts up from start, the
// second half down from end (ATen's RangeFactories), so both ends are exact.
inline float linspace_at(float start, float end, int steps, int i) {
  if (steps == 1) return start;
  const float step = (end - start) / static_cast<float>(steps - 1);
  const int half = steps / 2;
  return i < half ? start + step * static_cast<float>(i) : end - step * static_cast<float>(steps - i - 1);
}

}  // namespace stoker::augment
