# Installation extras and CPack settings, included last by the top-level CMakeLists.txt:
# the bash completion, and `cpack -G DEB` producing hvdrun_<version>_<arch>.deb with
# its Depends computed from the installed ELF files (dpkg-shlibdeps) plus the ssh client
# the launcher runs.
install(FILES ${PROJECT_SOURCE_DIR}/completions/hvdrun.bash
        DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
        RENAME hvdrun)

set(CPACK_PACKAGE_NAME hvdrun)
set(CPACK_PACKAGE_VENDOR "hvdrun developers")
set(CPACK_PACKAGE_CONTACT "hvdrun developers")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "launcher for data-parallel training jobs over SSH, and the libhvdrun runtime")
set(CPACK_PACKAGE_DESCRIPTION
    "hvdrun starts one process per slot on a set of hosts over SSH, wires them\n\
together through a rendezvous and tears the job down when a rank fails.\n\
libhvdrun is the library those processes link to join the job and run\n\
Gloo (CPU) and NCCL (GPU) collectives.")
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "hvdrun developers")
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "openssh-client")
# hwloc is opened when a topology is first read (launcher/topology/hwloc_loader.cc), so the
# shared-library scan cannot see it: placement needs it, a plain launch does not.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libhwloc15")
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
# A packaged program linking libhvdrun resolves it from the build tree, not the system.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS
    "${CMAKE_BINARY_DIR}/runtime")
set(CPACK_STRIP_FILES ON)
set(CPACK_SOURCE_IGNORE_FILES "/build[^/]*/" "/\\\\.git/")
include(CPack)
