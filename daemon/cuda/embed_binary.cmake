# cmake -DINPUT=f.fatbin -DOUTPUT=f.cpp -DSYMBOL=name -P embed_binary.cmake
# Writes a C++ source defining `extern const unsigned char SYMBOL[]` (8-byte aligned, as
# cuModuleLoadData wants) and `SYMBOL_size` with the bytes of INPUT.
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR bytes "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REGEX REPLACE "((0x..,){32})" "\\1\n" body "${body}")
file(WRITE "${OUTPUT}" "// Generated from ${INPUT} by embed_binary.cmake; do not edit.\n#include <cstddef>\n"
  "alignas(8) extern const unsigned char ${SYMBOL}[] = {\n${body}\n};\n"
  "extern const std::size_t ${SYMBOL}_size = ${bytes};\n")
