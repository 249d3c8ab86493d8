// A 5x7 bitmap font for the labels of `stokerctl preview`: digits, A-Z (lower case drawn as
// upper case) and - _ . : / ; anything else is drawn as '?'. Cells are 6x9 (a column and two
// rows of spacing).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stoker::ctl {

inline constexpr int kGlyphWidth = 5, kGlyphHeight = 7, kCellWidth = 6, kCellHeight = 9;

// Rows of glyph `c`, top first; bit 4 is the leftmost column.
const std::uint8_t* glyph_rows(char c);

// Draws `text` into an RGB8 image (`stride` bytes per row) at (x, y) in `rgb`, clipped to
// max_width pixels and to the image (width x height).
void draw_text(std::vector<std::uint8_t>& image, int width, int height, int x, int y, int max_width,
               const std::string& text, const std::uint8_t rgb[3]);

}  // namespace stoker::ctl
