// The versions of the decoder libraries this process decodes with (libjpeg-turbo, libpng,
// libwebp, libtiff), as one line. Pixels are a pure function of a sample's bytes and the
// pipeline only for one set of these: a decoded store keys its entries by this line (a library
// upgrade then starts a fresh store instead of serving pixels another version made).
#pragma once

#include <string>

namespace stoker::image {

// "jpeg-turbo 2.1.5 (jpeg 62), png 1.6.39, webp 1.2.4, tiff 4.5.0": the libraries loaded at run
// time where they can say so, else the headers built against.
const std::string& decoder_versions();

}  // namespace stoker::image
