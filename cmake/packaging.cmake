# The Debian package (CPack, DEB generator): scripts/package.sh configures a build for /usr
# with STOKER_SYSTEM_FILES=ON and runs `cpack -G DEB`.
#
# Contents: stokerd, stokerctl, libstoker + headers + stoker.pc + the CMake package files,
# the Python module in /usr/lib/python3/dist-packages (client/python/CMakeLists.txt picks that
# folder for prefix /usr), the systemd unit in /lib/systemd/system, an example config
# /etc/stoker/stoker.yaml (a conffile: an edited copy survives upgrades and removal; purge
# deletes it), the demo dataset in /usr/share/stoker/demo (the demo example points there), and
# /usr/share/doc/stoker/copyright. Dependencies come from the binaries' shared libraries
# (dpkg-shlibdeps). Maintainer scripts: cmake/debian/ (ldconfig, the unit's systemd steps).
#
# The unit and /etc only with STOKER_SYSTEM_FILES: their folders are absolute, and a plain
# `cmake --install --prefix P` must write nothing outside P.
option(STOKER_SYSTEM_FILES "Install the systemd unit and /etc/stoker/stoker.yaml (the .deb)" OFF)

if(STOKER_SYSTEM_FILES)
  # The unit as scripts/ ships it, with ExecStart pointing at this install's stokerd.
  file(READ ${PROJECT_SOURCE_DIR}/scripts/stokerd.service _unit)
  string(REPLACE "/usr/local/bin/stokerd" "${CMAKE_INSTALL_FULL_BINDIR}/stokerd" _unit "${_unit}")
  file(WRITE ${CMAKE_BINARY_DIR}/packaging/stokerd.service "${_unit}")
  install(FILES ${CMAKE_BINARY_DIR}/packaging/stokerd.service DESTINATION /lib/systemd/system)
  install(FILES ${PROJECT_SOURCE_DIR}/configs/imagenet-train.yaml DESTINATION /etc/stoker RENAME stoker.yaml)
  # The demo dataset ships (64 photos, 1.2 MB, with the file naming their authors) so that the
  # demo example runs as installed; its root points there instead of the source tree's folder.
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/tests/data/demo/ DESTINATION ${CMAKE_INSTALL_DATADIR}/stoker/demo)
  file(READ ${PROJECT_SOURCE_DIR}/configs/demo.yaml _demo)
  string(REPLACE "root: ../tests/data/demo     # relative to this file's folder"
                 "root: ${CMAKE_INSTALL_FULL_DATADIR}/stoker/demo" _demo_installed "${_demo}")
  if(_demo_installed STREQUAL _demo)
    message(FATAL_ERROR "configs/demo.yaml: its `root:` line changed; update cmake/packaging.cmake to match")
  endif()
  file(WRITE ${CMAKE_BINARY_DIR}/packaging/demo.yaml "${_demo_installed}")
  install(FILES ${PROJECT_SOURCE_DIR}/configs/imagenet-train.yaml ${PROJECT_SOURCE_DIR}/configs/imagenet-val.yaml
                ${CMAKE_BINARY_DIR}/packaging/demo.yaml ${PROJECT_SOURCE_DIR}/configs/README.md
          DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/stoker/examples)
  # Debian policy 12.5: every package has /usr/share/doc/<package>/copyright (DEP-5 format).
  install(FILES ${PROJECT_SOURCE_DIR}/cmake/debian/copyright DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/stoker)
  file(WRITE ${CMAKE_BINARY_DIR}/packaging/conffiles "/etc/stoker/stoker.yaml\n")
endif()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME stoker)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_CONTACT "Stoker maintainers <stoker@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # stoker_VERSION_ARCH.deb
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
  "stokerd decodes and augments images on the CPU and serves batches to trainer processes through shared memory. libstoker (C/C++) and the Python module stoker are the client side; stokerctl inspects and consumes.")
set(CPACK_STRIP_FILES ON)  # built RelWithDebInfo (as tested, and ccache's objects); shipped stripped
# Depends: from the ELF files' shared libraries; libstoker itself is in this package.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CMAKE_BINARY_DIR}/lib)
# The module is built for one interpreter (its file name carries the ABI tag).
if(TARGET stoker_python_native)
  execute_process(COMMAND ${STOKER_PYTHON_EXECUTABLE} -c "import sys; print(sys.version_info[1])"
                  OUTPUT_VARIABLE _py_minor OUTPUT_STRIP_TRAILING_WHITESPACE)
  math(EXPR _py_next "${_py_minor} + 1")
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "python3 (>= 3.${_py_minor}), python3 (<< 3.${_py_next})")
  set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3-torch")
endif()
if(STOKER_SYSTEM_FILES)
  # Our own maintainer scripts replace the ldconfig-only ones CPack would write: they run
  # ldconfig too, and handle the unit as dh_installsystemd does (cmake/debian/*).
  set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${CMAKE_BINARY_DIR}/packaging/conffiles
      ${PROJECT_SOURCE_DIR}/cmake/debian/postinst ${PROJECT_SOURCE_DIR}/cmake/debian/prerm
      ${PROJECT_SOURCE_DIR}/cmake/debian/postrm)
  set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)  # 0755 scripts, 0644 conffiles
endif()
include(CPack)
