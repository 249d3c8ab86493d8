// The daemon's float16 conversions are the segment contract's: proto/stoker/proto/half.hpp.
#pragma once

#include "stoker/proto/half.hpp"
