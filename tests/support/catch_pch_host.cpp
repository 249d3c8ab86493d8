// Host of the precompiled catch.hpp that every test executable reuses (tests/CMakeLists.txt,
// stoker_catch_pch). Built, never run: it holds no tests, and its main is stoker_catch_main's.
#include <catch2/catch.hpp>
