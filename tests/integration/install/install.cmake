# install_tree: `cmake --install` of this build into a temporary prefix (and
# into a DESTDIR with the packages' /usr prefix), then every file an
# installed node needs is checked the way its user would: the unit with
# systemd-analyze verify, the tmpfiles entry with systemd-tmpfiles --root, the
# example config with sandboxd --check-config, each completion loaded by its
# shell, each man page rendered without a warning.
add_test(NAME install_tree
  COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/run.sh ${CMAKE_COMMAND} ${CMAKE_BINARY_DIR})
set_tests_properties(install_tree PROPERTIES LABELS "integration" TIMEOUT 300)
