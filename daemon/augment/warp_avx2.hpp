// The bilinear sampling of warp_affine (geometric.cpp), eight output pixels at a time with
// AVX2: for the blocks whose eight pixels have all four neighbours inside the image, which is
// most of a rotated, sheared or translated crop. The other blocks (near the border, or
// outside) are left to the scalar path. Per pixel and channel it evaluates the scalar path's
// expression in its order (weights from floor, ((nw + ne) + sw) + se, the fill blend, round
// half to even, clamp), with no fused multiply-add: the same bytes, as tests/unit check.
#pragma once

#include <array>
#include <cstdint>

namespace stoker::augment {

// Samples the pixels of one output row whose source coordinates are ix[j], iy[j] (j < count),
// writing packed RGB to out[3 j ..]. done[b] (b < count / 8) says whether block b, pixels
// 8b .. 8b + 7, was written; a tail of count % 8 pixels never is. `fill`: nullptr for
// torchvision's fill=None (no blend), else the fill values the in-image weight blends with.
// Preconditions: use_avx2(); src holds width * height * 3 + 1 readable bytes (a neighbour's 3
// bytes are read as 4), and that size is below 2^31 (offsets are int32).
void bilinear_row_avx2(const std::uint8_t* src, int width, int height, const float* ix, const float* iy, int count,
                       const std::array<float, 3>* fill, std::uint8_t* out, std::uint8_t* done);

}  // namespace stoker::augment
