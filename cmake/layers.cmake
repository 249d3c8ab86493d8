# One include directory per library: the layers the compiler enforces.
#
# Sources include a room's headers by its folder name ("image/sample_processor.hpp"). Each
# library gets its own include root, <build>/include/<target>/, holding one link named after
# its folder and pointing at it; that root is the library's PUBLIC include directory, and so
# reaches exactly the targets that link the library (directly, or through a PUBLIC dependency).
# An include of a room a target does not link therefore fails to compile ("No such file"),
# instead of compiling and failing, or not, at link time. tests/layers/ checks it does.
#
#   stoker_expose(<target> [FOLDER <dir>])   dir: the folder exposed (default: the current one)
function(stoker_expose target)
  cmake_parse_arguments(E "" "FOLDER" "" ${ARGN})
  if(NOT E_FOLDER)
    set(E_FOLDER ${CMAKE_CURRENT_SOURCE_DIR})
  endif()
  get_filename_component(name ${E_FOLDER} NAME)
  set(root ${CMAKE_BINARY_DIR}/include/${target})
  file(MAKE_DIRECTORY ${root})
  file(CREATE_LINK ${E_FOLDER} ${root}/${name} SYMBOLIC)
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "INTERFACE_LIBRARY")
    target_include_directories(${target} INTERFACE $<BUILD_INTERFACE:${root}>)
  else()
    target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${root}>)
  endif()
endfunction()
