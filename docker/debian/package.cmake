# The Debian package: `cpack -G DEB` in a build directory (after building
# delayd and delayctl) makes delayd_<version>_<arch>.deb with the two
# binaries, a hardened systemd unit, /etc/default/delayd (a conffile: an
# upgrade keeps the operator's edits) and the maintainer scripts beside this
# file (a delayd system user, /var/lib/delayd; the unit enabled and
# restarted where systemd runs). Dependencies on shared libraries come from
# dpkg-shlibdeps.
install(TARGETS delayd delayctl RUNTIME DESTINATION bin)
install(FILES ${CMAKE_CURRENT_LIST_DIR}/delayd.service
        DESTINATION lib/systemd/system)
install(FILES ${CMAKE_CURRENT_LIST_DIR}/delayd.default
        DESTINATION /etc/default RENAME delayd)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME delayd)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
# A rebuild of one version (the package's upgrade test makes two).
set(DELAYD_PACKAGE_RELEASE 1 CACHE STRING "The Debian revision of the package")
set(CPACK_DEBIAN_PACKAGE_RELEASE ${DELAYD_PACKAGE_RELEASE})
set(CPACK_PACKAGE_CONTACT "delayd maintainers <maintainers@delayd.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "delayed-job scheduling daemon (delayd) and its CLI (delayctl)")
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_SET_DESTDIR ON)  # (/etc/default lands in the package, not on /)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser, tzdata, ca-certificates")
set(conffiles ${CMAKE_CURRENT_BINARY_DIR}/debian/conffiles)
file(WRITE ${conffiles} "/etc/default/delayd\n")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${CMAKE_CURRENT_LIST_DIR}/postinst ${CMAKE_CURRENT_LIST_DIR}/prerm
    ${CMAKE_CURRENT_LIST_DIR}/postrm ${conffiles})
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
